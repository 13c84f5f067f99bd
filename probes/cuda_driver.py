"""The few CUDA driver API calls needed to run a compiled kernel next to torch, via ctypes.

torch keeps its work in the *primary* context of each device, so a module loaded there can
read and write torch tensors (``tensor.data_ptr()`` is a CUdeviceptr) and run on torch's
stream (``torch.cuda.current_stream(i).cuda_stream``). Every CUresult is checked and a
failure raised as :class:`~probes.kernels.CudaDriverError` carrying the error's name.
Only the stdlib is imported.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from .kernels import CudaDriverError, KernelError

LIBCUDA = "libcuda.so.1"
CUDA_SUCCESS = 0
# CUdevice_attribute values from cuda.h (stable across releases).
ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111
_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# Up to 48 KiB of dynamic shared memory needs no opt-in (CUDA programming guide).
_DEFAULT_DYNAMIC_SHARED_BYTES = 48 * 1024

KernelArgument = ctypes.c_uint64 | ctypes.c_int32 | ctypes.c_uint32 | ctypes.c_float


def describe_result(call: str, code: int, name_of: Callable[[int], str | None]) -> CudaDriverError:
    """The typed error for a failed call; ``name_of`` maps a CUresult to its name, or None."""
    return CudaDriverError(call, code, name_of(code) or f"CUresult {code}")


def kernel_parameter_array(args: Sequence[KernelArgument]) -> ctypes.Array[ctypes.c_void_p]:
    """``void* kernelParams[]`` for cuLaunchKernel: one pointer to each argument's storage.

    The caller keeps ``args`` alive until the launch call returns.
    """
    pointers = [ctypes.cast(ctypes.pointer(arg), ctypes.c_void_p) for arg in args]
    return (ctypes.c_void_p * len(pointers))(*pointers)


def exclusive_shared_bytes(per_sm_bytes: int, optin_bytes: int, reserved_bytes: int) -> int | None:
    """Dynamic shared memory (bytes) per block so that no two blocks fit on one SM.

    Two resident blocks on one SM would share its pipes and look like a slow SM; asking for
    just over half the SM's shared memory keeps one block per SM. None when the per-block
    opt-in limit is too small for that.
    """
    needed = per_sm_bytes // 2 - reserved_bytes + 1
    return needed if 0 < needed <= optin_bytes else None


class KernelDriver(Protocol):
    """What a probe needs to run a kernel; :class:`CudaDriver` is the real one."""

    def device_attribute(self, attribute: int, ordinal: int) -> int: ...

    def primary_context(self, ordinal: int) -> AbstractContextManager[None]: ...

    def module(self, image: bytes) -> AbstractContextManager[ctypes.c_void_p]: ...

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p: ...

    def allow_dynamic_shared(self, function: ctypes.c_void_p, shared_bytes: int) -> None: ...

    def launch(self, function: ctypes.c_void_p, grid_blocks: int, block_threads: int,
               shared_bytes: int, stream: int, args: Sequence[KernelArgument]) -> None: ...


class CudaDriver:
    """libcuda through ctypes, with argument types declared so handles are not truncated."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.library = library
        pointer, pointer_ref = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        uint, integer = ctypes.c_uint, ctypes.c_int
        self._declare("cuGetErrorName", [integer, ctypes.POINTER(ctypes.c_char_p)])
        self._declare("cuInit", [uint])
        self._declare("cuDeviceGet", [ctypes.POINTER(integer), integer])
        self._declare("cuDeviceGetAttribute", [ctypes.POINTER(integer), integer, integer])
        self._declare("cuDevicePrimaryCtxRetain", [pointer_ref, integer])
        self._declare(self._release_name(), [integer])
        self._declare("cuCtxGetCurrent", [pointer_ref])
        self._declare("cuCtxSetCurrent", [pointer])
        self._declare("cuModuleLoadData", [pointer_ref, ctypes.c_char_p])
        self._declare("cuModuleUnload", [pointer])
        self._declare("cuModuleGetFunction", [pointer_ref, pointer, ctypes.c_char_p])
        self._declare("cuFuncSetAttribute", [pointer, integer, integer])
        self._declare("cuLaunchKernel", [pointer, uint, uint, uint, uint, uint, uint, uint,
                                         pointer, pointer_ref, pointer_ref])

    @classmethod
    def load(cls, name: str = LIBCUDA) -> CudaDriver:
        """Open the driver library; raise KernelError when it is not installed."""
        try:
            return cls(ctypes.CDLL(name))
        except OSError as error:
            raise KernelError(f"the CUDA driver library {name} cannot be loaded ({error})") from error

    def _declare(self, name: str, argtypes: list[type]) -> None:
        function = getattr(self.library, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int

    def _release_name(self) -> str:
        # cuda.h maps cuDevicePrimaryCtxRelease to the _v2 symbol since CUDA 11.
        has_v2 = hasattr(self.library, "cuDevicePrimaryCtxRelease_v2")
        return "cuDevicePrimaryCtxRelease_v2" if has_v2 else "cuDevicePrimaryCtxRelease"

    def error_name(self, code: int) -> str | None:
        """``CUDA_ERROR_...`` for a CUresult, or None when the driver does not know it."""
        name = ctypes.c_char_p()
        if self.library.cuGetErrorName(code, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
            return None
        return name.value.decode()

    def check(self, code: int, call: str) -> None:
        """Raise CudaDriverError unless ``code`` is CUDA_SUCCESS."""
        if code != CUDA_SUCCESS:
            raise describe_result(call, code, self.error_name)

    def device(self, ordinal: int) -> int:
        """The CUdevice for ``ordinal`` (numbered as torch numbers them, after CUDA_VISIBLE_DEVICES)."""
        self.check(self.library.cuInit(0), "cuInit")  # idempotent, and required before anything
        device = ctypes.c_int()
        self.check(self.library.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
        return device.value

    def device_attribute(self, attribute: int, ordinal: int) -> int:
        """One CUdevice_attribute (a value from cuda.h) of device ``ordinal``."""
        value = ctypes.c_int()
        self.check(self.library.cuDeviceGetAttribute(ctypes.byref(value), attribute,
                                                     self.device(ordinal)),
                   "cuDeviceGetAttribute")
        return value.value

    @contextmanager
    def primary_context(self, ordinal: int) -> Iterator[None]:
        """Make the device's primary context (the one torch uses) current, then restore.

        Call after torch has initialised the device (``torch.cuda.set_device`` and one
        allocation), so the retain only adds a reference to torch's context.
        """
        device = ctypes.c_int(self.device(ordinal))
        previous, context = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.library.cuCtxGetCurrent(ctypes.byref(previous)), "cuCtxGetCurrent")
        self.check(self.library.cuDevicePrimaryCtxRetain(ctypes.byref(context), device.value),
                   "cuDevicePrimaryCtxRetain")
        try:
            self.check(self.library.cuCtxSetCurrent(context), "cuCtxSetCurrent")
            yield
        finally:
            self.library.cuCtxSetCurrent(previous)
            getattr(self.library, self._release_name())(device.value)

    @contextmanager
    def module(self, image: bytes) -> Iterator[ctypes.c_void_p]:
        """Load a CUBIN or PTX image into the current context; unload it on exit."""
        handle = ctypes.c_void_p()
        # PTX must be NUL-terminated; a CUBIN is unaffected by a trailing NUL.
        self.check(self.library.cuModuleLoadData(ctypes.byref(handle), image + b"\0"),
                   "cuModuleLoadData")
        try:
            yield handle
        finally:
            self.library.cuModuleUnload(handle)

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        """The kernel ``name`` (an ``extern "C"`` symbol) in a loaded module."""
        handle = ctypes.c_void_p()
        self.check(self.library.cuModuleGetFunction(ctypes.byref(handle), module, name.encode()),
                   "cuModuleGetFunction")
        return handle

    def allow_dynamic_shared(self, function: ctypes.c_void_p, shared_bytes: int) -> None:
        """Opt the kernel in to ``shared_bytes`` of dynamic shared memory when above 48 KiB."""
        if shared_bytes > _DEFAULT_DYNAMIC_SHARED_BYTES:
            self.check(self.library.cuFuncSetAttribute(
                function, _FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes),
                "cuFuncSetAttribute")

    def launch(self, function: ctypes.c_void_p, grid_blocks: int, block_threads: int,
               shared_bytes: int, stream: int, args: Sequence[KernelArgument]) -> None:
        """Queue a 1-D launch on ``stream`` (a CUstream as an int, 0 = legacy default).

        Returns once queued; errors of the kernel itself surface at the next synchronise.
        """
        parameters = kernel_parameter_array(args)
        self.check(self.library.cuLaunchKernel(function, grid_blocks, 1, 1, block_threads, 1, 1,
                                               shared_bytes, ctypes.c_void_p(stream or None),
                                               parameters, None),
                   "cuLaunchKernel")
