"""Compile the CUDA sources of ``cuda_kernels/`` on the node, for the GPU's own architecture.

Compiling: NVRTC through ctypes first (a system toolkit, or the pip wheel CUDA builds of
torch install), else ``nvcc`` in a temporary folder, else :class:`NoCompiler`, whose message
is the reason a probe reports as ``skipped``. Images are cached per (source hash, arch).

Launching lives in :mod:`probes.cuda_driver`; this module also holds the error types both
share. Only the stdlib is imported here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

NO_COMPILER_REASON = "no CUDA compiler: neither libnvrtc nor nvcc found"
NVRTC_SONAMES = ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2")
# Where libnvrtc lies below a site-packages folder: CUDA 12 wheels, CUDA 13 wheels, and the
# hash-named copy some torch builds bundle.
NVRTC_WHEEL_GLOBS = ("nvidia/cuda_nvrtc/lib/libnvrtc.so*", "nvidia/cu13/lib/libnvrtc.so*",
                     "torch/lib/libnvrtc*.so*")
TOOLKIT_ROOTS = ("/usr/local/cuda",)
CUBIN = "cubin"
PTX = "ptx"
_ELF_MAGIC = b"\x7fELF"
_NVRTC_SUCCESS = 0
_NVRTC_ERROR_INVALID_OPTION = 5


class KernelError(Exception):
    """A CUDA kernel could not be compiled, loaded or launched; the message says why."""


class NoCompiler(KernelError):
    """Neither NVRTC nor nvcc is present; the message is the probe's skip reason."""


class CompileError(KernelError):
    """The compiler was found but rejected the source or the target architecture."""


class NvrtcRejected(CompileError):
    """NVRTC refused to compile; ``result`` is the nvrtcResult code."""

    def __init__(self, result: int, message: str) -> None:
        super().__init__(message)
        self.result = result


class CudaDriverError(KernelError):
    """A CUDA driver API call returned an error; ``name`` is e.g. ``CUDA_ERROR_LAUNCH_FAILED``."""

    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: {name} ({code})")
        self.call = call
        self.code = code
        self.name = name


@dataclass(frozen=True)
class KernelImage:
    """A compiled kernel: ``kind`` is ``cubin`` (ELF) or ``ptx`` (text the driver JITs)."""

    data: bytes
    kind: str
    arch: str
    compiler: str


class Compiler(Protocol):
    """Turns one CUDA source into an image for one architecture."""

    name: str

    def compile(self, source: str, file_name: str, arch: str, timeout_s: float) -> KernelImage:
        """Compile ``source``; raise CompileError on rejection or when ``timeout_s`` passes."""
        ...


# ---- pure parts -----------------------------------------------------------------------

def arch_for(compute_capability: tuple[int, int]) -> str:
    """The real architecture name for a compute capability, e.g. ``(9, 0)`` → ``sm_90``."""
    major, minor = compute_capability
    if major < 1 or minor < 0:
        raise ValueError(f"not a compute capability: {compute_capability}")
    return f"sm_{major}{minor}"


def nvcc_argv(nvcc: str, source_path: str, cubin_path: str, arch: str) -> list[str]:
    """The nvcc command line that compiles one ``.cu`` file to a CUBIN for ``arch``."""
    return [nvcc, "-cubin", f"-arch={arch}", "-o", cubin_path, source_path]


def nvrtc_options(arch: str, kind: str) -> list[bytes]:
    """NVRTC options: a real ``sm_XY`` target yields a CUBIN, a virtual ``compute_XY`` PTX."""
    target = arch if kind == CUBIN else arch.replace("sm_", "compute_", 1)
    return [f"--gpu-architecture={target}".encode()]


def ptx_fallback_arch(arch: str, supported: Sequence[int]) -> str | None:
    """The newest architecture in ``supported`` not newer than ``arch`` (``sm_XY``), or None.

    PTX for an older virtual architecture runs on a newer GPU after the driver's JIT.
    """
    wanted = int(arch.removeprefix("sm_"))
    usable = [number for number in supported if number <= wanted]
    return f"sm_{max(usable)}" if usable else None


def default_library_dirs(site_dirs: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """Folders to look for libnvrtc in besides the loader's own search, in order of trust."""
    homes = [environ[key] for key in ("CUDA_HOME", "CUDA_PATH") if environ.get(key)]
    toolkit = [os.path.join(home, sub) for home in (*homes, *TOOLKIT_ROOTS)
               for sub in ("lib64", "lib")]
    return [*toolkit, *site_dirs]


def nvrtc_candidates(library_dirs: Sequence[str], system_names: Sequence[str]) -> list[str]:
    """Library names/paths to try with dlopen, in order: system names, then files found.

    ``system_names`` are resolved by the dynamic loader (``find_library`` result, sonames);
    ``library_dirs`` are searched for toolkit files and the wheel layouts above.
    """
    found: list[str] = list(system_names)
    for folder in library_dirs:
        patterns = ("libnvrtc.so*", *NVRTC_WHEEL_GLOBS)
        for pattern in patterns:
            for path in sorted(glob.glob(os.path.join(folder, pattern))):
                if "builtins" not in os.path.basename(path) and path not in found:
                    found.append(path)
    return found


def system_nvrtc_names() -> list[str]:
    """What the dynamic loader itself may resolve: ``find_library`` first, then sonames."""
    located = ctypes.util.find_library("nvrtc")
    return ([located] if located else []) + [name for name in NVRTC_SONAMES if name != located]


def nvcc_search_path(environ: Mapping[str, str]) -> str:
    """$PATH, then the toolkit ``bin`` folders nvcc usually lives in when not on PATH."""
    homes = [environ[key] for key in ("CUDA_HOME", "CUDA_PATH") if environ.get(key)]
    extra = [os.path.join(home, "bin") for home in (*homes, *TOOLKIT_ROOTS)]
    return os.pathsep.join([environ.get("PATH", ""), *extra])


def cache_key(source: str, arch: str) -> str:
    """The cache file stem for one source and arch (hex SHA-256 of the source, then arch)."""
    return f"{hashlib.sha256(source.encode()).hexdigest()[:32]}-{arch}"


def looks_valid(data: bytes, kind: str) -> bool:
    """Whether cached bytes are plausibly an image of ``kind`` (guards truncated files)."""
    if kind == CUBIN:
        return data.startswith(_ELF_MAGIC)
    return b".entry" in data


# ---- locating and running a compiler --------------------------------------------------

def locate_compiler(search_path: str, nvrtc_paths: Sequence[str]) -> Compiler:
    """The first usable compiler: NVRTC from ``nvrtc_paths``, else nvcc on ``search_path``.

    Raises NoCompiler (message :data:`NO_COMPILER_REASON`) when there is neither.
    """
    for candidate in nvrtc_paths:
        library = _load_nvrtc(candidate)
        if library is not None:
            return NvrtcCompiler(library, candidate)
    nvcc = shutil.which("nvcc", path=search_path) if search_path else None
    if nvcc is not None:
        return NvccCompiler(nvcc)
    raise NoCompiler(NO_COMPILER_REASON)


def default_compiler() -> Compiler:
    """:func:`locate_compiler` with this process's environment and ``sys.path``."""
    dirs = default_library_dirs([entry for entry in sys.path if entry], os.environ)
    return locate_compiler(nvcc_search_path(os.environ),
                           nvrtc_candidates(dirs, system_nvrtc_names()))


def _load_nvrtc(candidate: str) -> ctypes.CDLL | None:
    if os.sep in candidate:
        # NVRTC dlopens its builtins library by soname; load the sibling first so a wheel
        # folder that is not on LD_LIBRARY_PATH still works.
        for builtins in sorted(glob.glob(os.path.join(os.path.dirname(candidate),
                                                      "libnvrtc-builtins*.so*"))):
            _try_dlopen(builtins, ctypes.RTLD_GLOBAL)
    library = _try_dlopen(candidate, ctypes.DEFAULT_MODE)
    if library is None or not hasattr(library, "nvrtcCreateProgram"):
        return None
    return library


def _try_dlopen(name: str, mode: int) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(name, mode=mode)
    except OSError:  # absent, wrong architecture, or unresolved dependency: try the next
        return None


class NvccCompiler:
    """``nvcc -cubin`` in a private temporary folder."""

    def __init__(self, nvcc: str) -> None:
        self.nvcc = nvcc
        self.name = f"nvcc:{nvcc}"

    def compile(self, source: str, file_name: str, arch: str, timeout_s: float) -> KernelImage:
        """Compile to a CUBIN; raise CompileError on a non-zero exit or after ``timeout_s``."""
        with tempfile.TemporaryDirectory(prefix="gpudiag-nvcc-") as folder:
            source_path = os.path.join(folder, file_name)
            cubin_path = os.path.join(folder, "kernel.cubin")
            with open(source_path, "w", encoding="utf-8") as handle:
                handle.write(source)
            argv = nvcc_argv(self.nvcc, source_path, cubin_path, arch)
            try:
                done = subprocess.run(argv, capture_output=True, text=True,
                                      timeout=max(1.0, timeout_s), check=False)
            except subprocess.TimeoutExpired as error:
                raise CompileError(f"nvcc did not finish within {timeout_s:.0f} s") from error
            except OSError as error:  # found on PATH but not executable
                raise CompileError(f"nvcc could not be started: {error}") from error
            if done.returncode != 0:
                raise CompileError(f"nvcc failed for {arch}: {_tail(done.stderr or done.stdout)}")
            with open(cubin_path, "rb") as handle:
                return KernelImage(handle.read(), CUBIN, arch, self.name)


class NvrtcCompiler:
    """NVRTC through ctypes: a CUBIN for the real arch, else PTX for the driver to JIT."""

    def __init__(self, library: ctypes.CDLL, path: str) -> None:
        self.library = library
        self.name = f"nvrtc:{path}"
        library.nvrtcGetErrorString.restype = ctypes.c_char_p

    def compile(self, source: str, file_name: str, arch: str, timeout_s: float) -> KernelImage:
        """Compile in-process (``timeout_s`` is not enforceable there); raise CompileError.

        An NVRTC that does not know ``arch`` (older than the GPU) emits PTX for the newest
        architecture it knows instead, which the driver JIT-compiles for the GPU.
        """
        if hasattr(self.library, "nvrtcGetCUBIN"):
            try:
                return self._image(source, file_name, arch, CUBIN)
            except NvrtcRejected as error:
                if error.result != _NVRTC_ERROR_INVALID_OPTION:
                    raise
        ptx_arch = ptx_fallback_arch(arch, self._supported_archs()) or arch
        return self._image(source, file_name, ptx_arch, PTX)

    def _image(self, source: str, file_name: str, arch: str, kind: str) -> KernelImage:
        return KernelImage(self._compile(source, file_name, arch, kind), kind, arch, self.name)

    def _supported_archs(self) -> list[int]:
        """Architectures this NVRTC knows, e.g. ``[75, 80, 90]``; empty if it cannot say."""
        count = ctypes.c_int()
        if not hasattr(self.library, "nvrtcGetSupportedArchs") or \
                self.library.nvrtcGetNumSupportedArchs(ctypes.byref(count)) != _NVRTC_SUCCESS:
            return []
        archs = (ctypes.c_int * count.value)()
        if self.library.nvrtcGetSupportedArchs(archs) != _NVRTC_SUCCESS:
            return []
        return list(archs)

    def _compile(self, source: str, file_name: str, arch: str, kind: str) -> bytes:
        program = ctypes.c_void_p()
        self._check(self.library.nvrtcCreateProgram(ctypes.byref(program), source.encode(),
                                                    file_name.encode(), 0, None, None),
                    "nvrtcCreateProgram")
        try:
            options = nvrtc_options(arch, kind)
            array = (ctypes.c_char_p * len(options))(*options)
            result = self.library.nvrtcCompileProgram(program, len(options), array)
            if result != _NVRTC_SUCCESS:
                raise NvrtcRejected(result, f"NVRTC ({kind}, {arch}): {self._error(result)}: "
                                   f"{_tail(self._log(program))}")
            getter = "nvrtcGetCUBIN" if kind == CUBIN else "nvrtcGetPTX"
            return self._read(program, getter)
        finally:
            self.library.nvrtcDestroyProgram(ctypes.byref(program))

    def _read(self, program: ctypes.c_void_p, getter: str) -> bytes:
        size = ctypes.c_size_t()
        self._check(getattr(self.library, f"{getter}Size")(program, ctypes.byref(size)),
                    f"{getter}Size")
        buffer = ctypes.create_string_buffer(size.value)
        self._check(getattr(self.library, getter)(program, buffer), getter)
        return buffer.raw

    def _log(self, program: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        if self.library.nvrtcGetProgramLogSize(program, ctypes.byref(size)) != _NVRTC_SUCCESS:
            return ""
        buffer = ctypes.create_string_buffer(size.value)
        self.library.nvrtcGetProgramLog(program, buffer)
        return buffer.value.decode(errors="replace")

    def _error(self, result: int) -> str:
        text = self.library.nvrtcGetErrorString(result)
        return text.decode() if text else f"nvrtcResult {result}"

    def _check(self, result: int, call: str) -> None:
        if result != _NVRTC_SUCCESS:
            raise CompileError(f"{call} failed: {self._error(result)}")


def _tail(text: str, limit_chars: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit_chars else "…" + text[-limit_chars:]


# ---- cache ----------------------------------------------------------------------------

def default_cache_dir(environ: Mapping[str, str]) -> str:
    """``$XDG_CACHE_HOME/gpudiag/kernels``, defaulting to ``~/.cache`` as XDG says."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpudiag", "kernels")


def compile_cached(source: str, file_name: str, arch: str, timeout_s: float,
                   cache_dir: str | None = None,
                   compiler: Compiler | None = None) -> KernelImage:
    """The image for ``source`` on ``arch``, from the cache or freshly compiled and stored.

    ``compiler`` defaults to :func:`default_compiler`, located only on a cache miss, so a
    node with a warm cache needs no compiler. Raises NoCompiler or CompileError.
    """
    folder = _usable_cache_dir(cache_dir or default_cache_dir(os.environ))
    stem = cache_key(source, arch)
    for kind in (CUBIN, PTX):
        cached = _read_cached(folder, f"{stem}.{kind}", kind)
        if cached is not None:
            return KernelImage(cached, kind, arch, "cache")
    image = (compiler or default_compiler()).compile(source, file_name, arch, timeout_s)
    if folder is not None:
        _write_atomically(os.path.join(folder, f"{stem}.{image.kind}"), image.data)
    return image


def _usable_cache_dir(preferred: str) -> str | None:
    """``preferred``, else a per-user folder in the temp dir; None when neither is writable."""
    fallback = os.path.join(tempfile.gettempdir(), f"gpudiag-kernels-{os.getuid()}")
    for folder in (preferred, fallback):
        if not os.path.isabs(folder):  # no usable $HOME: never litter the working directory
            continue
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError:
            continue
        # A shared folder another user owns could hand us a foreign image: never use it.
        if os.stat(folder).st_uid == os.getuid() and os.access(folder, os.W_OK):
            return folder
    return None


def _read_cached(folder: str | None, name: str, kind: str) -> bytes | None:
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, name), "rb") as handle:
            data = handle.read()
    except OSError:  # not cached yet
        return None
    return data if looks_valid(data, kind) else None


def _write_atomically(path: str, data: bytes) -> None:
    """Write via a temp file and rename, so a concurrent reader never sees half an image."""
    try:
        handle, temp_path = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".part")
    except OSError:  # a read-only cache only costs a recompile next time
        return
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temp_path, path)
    except OSError:  # a full disk: leave no half-written file behind
        with suppress(OSError):
            os.unlink(temp_path)
