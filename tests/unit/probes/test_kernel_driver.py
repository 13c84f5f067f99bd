"""CudaDriver's ctypes bindings against a fake libcuda built from C here.

Without a GPU the real driver cannot run, but argument marshalling can still be checked:
handles are not truncated, kernelParams point at the values, contexts and modules are
released even when a call fails, and CUresults come back as named errors.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from probes.cuda_driver import CudaDriver
from probes.kernels import CudaDriverError

FAKE_LIBCUDA = r"""
#include <stdint.h>
#include <string.h>
typedef int CUresult;
static void *current_ctx = 0;
static int retained = 0, loaded = 0, func_attr = -1;
static uint64_t last_ptr = 0; static int last_iterations = 0; static float last_seed = 0;
static unsigned last_grid = 0, last_block = 0, last_shared = 0; static void *last_stream = 0;

CUresult cuGetErrorName(CUresult r, const char **name) {
    if (r == 200) { *name = "CUDA_ERROR_INVALID_IMAGE"; return 0; }
    return 1;
}
CUresult cuInit(unsigned flags) { return 0; }
CUresult cuDeviceGet(int *device, int ordinal) { *device = ordinal; return ordinal > 1 ? 101 : 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) { *v = attr * 1000 + dev; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    *ctx = (void *)(uintptr_t)(0x7f0000001000ULL + dev); retained++; return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { retained--; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = current_ctx; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { current_ctx = ctx; return 0; }
CUresult cuModuleLoadData(void **module, const void *image) {
    if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200;
    *module = (void *)(uintptr_t)0x7f0000002000ULL; loaded++; return 0;
}
CUresult cuModuleUnload(void *module) { loaded--; return 0; }
CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
    if (module != (void *)(uintptr_t)0x7f0000002000ULL || strcmp(name, "gpudiag_sm_clock")) return 500;
    *f = (void *)(uintptr_t)0x7f0000003000ULL; return 0;
}
CUresult cuFuncSetAttribute(void *f, int attr, int value) { func_attr = value; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    if (f != (void *)(uintptr_t)0x7f0000003000ULL || extra) return 1;
    last_ptr = *(uint64_t *)params[0]; last_iterations = *(int *)params[1];
    last_seed = *(float *)params[2]; last_grid = gx * gy * gz; last_block = bx * by * bz;
    last_shared = shared; last_stream = stream; return 0;
}
uint64_t fake_last_ptr(void) { return last_ptr; }
int fake_last_iterations(void) { return last_iterations; }
float fake_last_seed(void) { return last_seed; }
unsigned fake_last_grid(void) { return last_grid; }
unsigned fake_last_block(void) { return last_block; }
unsigned fake_last_shared(void) { return last_shared; }
uint64_t fake_last_stream(void) { return (uint64_t)(uintptr_t)last_stream; }
uint64_t fake_current_ctx(void) { return (uint64_t)(uintptr_t)current_ctx; }
int fake_retained(void) { return retained; }
int fake_loaded(void) { return loaded; }
int fake_func_attr(void) { return func_attr; }
"""

CUBIN_BYTES = b"\x7fELF fake cubin"


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The fake driver is C so that ctypes calls it exactly as it calls libcuda; gcc is on every
    # machine of this project (and CI), so a missing compiler is a failure, not a skip.
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler is not None, "a C compiler (cc or gcc) is needed to build the fake libcuda"
    folder = tmp_path_factory.mktemp("fake_libcuda")
    (folder / "fake_cuda.c").write_text(FAKE_LIBCUDA)
    library = folder / "libcuda_fake.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(folder / "fake_cuda.c")],
                   check=True, capture_output=True)
    return library


def _probe_of(library: Path) -> ctypes.CDLL:
    probe = ctypes.CDLL(str(library))
    for name in ("fake_last_ptr", "fake_last_stream", "fake_current_ctx"):
        getattr(probe, name).restype = ctypes.c_uint64
    probe.fake_last_seed.restype = ctypes.c_float
    return probe


def test_a_launch_passes_every_argument_and_releases_what_it_took(fake_libcuda: Path) -> None:
    driver, probe = CudaDriver.load(str(fake_libcuda)), _probe_of(fake_libcuda)
    with driver.primary_context(1), driver.module(CUBIN_BYTES) as module:
        assert probe.fake_current_ctx() == 0x7F0000001001 and probe.fake_loaded() == 1
        function = driver.function(module, "gpudiag_sm_clock")
        driver.launch(function, 132, 512, 117_249, 0x7F00_DEAD_BEEF,
                      [ctypes.c_uint64(0x7F12_3456_7800), ctypes.c_int32(40_000), ctypes.c_float(1.5)])
    assert probe.fake_last_ptr() == 0x7F12_3456_7800
    assert probe.fake_last_iterations() == 40_000 and probe.fake_last_seed() == 1.5
    assert (probe.fake_last_grid(), probe.fake_last_block(), probe.fake_last_shared()) == (132, 512, 117_249)
    assert probe.fake_last_stream() == 0x7F00_DEAD_BEEF
    assert probe.fake_retained() == 0 and probe.fake_loaded() == 0 and probe.fake_current_ctx() == 0


def test_stream_zero_is_the_default_stream(fake_libcuda: Path) -> None:
    driver, probe = CudaDriver.load(str(fake_libcuda)), _probe_of(fake_libcuda)
    with driver.primary_context(0), driver.module(CUBIN_BYTES) as module:
        driver.launch(driver.function(module, "gpudiag_sm_clock"), 1, 32, 0, 0,
                      [ctypes.c_uint64(1), ctypes.c_int32(1), ctypes.c_float(1.0)])
    assert probe.fake_last_stream() == 0


def test_a_failed_call_is_a_named_error_and_the_context_is_still_released(fake_libcuda: Path) -> None:
    driver, probe = CudaDriver.load(str(fake_libcuda)), _probe_of(fake_libcuda)
    with pytest.raises(CudaDriverError) as caught:
        with driver.primary_context(0), driver.module(b"not a cubin"):
            pass
    assert caught.value.call == "cuModuleLoadData" and caught.value.name == "CUDA_ERROR_INVALID_IMAGE"
    assert probe.fake_retained() == 0


def test_an_unknown_result_code_is_still_reported(fake_libcuda: Path) -> None:
    driver = CudaDriver.load(str(fake_libcuda))
    with pytest.raises(CudaDriverError, match=r"cuDeviceGet failed: CUresult 101 \(101\)"):
        driver.device_attribute(97, ordinal=5)


def test_device_attributes_and_the_shared_memory_opt_in(fake_libcuda: Path) -> None:
    driver, probe = CudaDriver.load(str(fake_libcuda)), _probe_of(fake_libcuda)
    assert driver.device_attribute(97, ordinal=1) == 97_001
    with driver.primary_context(0), driver.module(CUBIN_BYTES) as module:
        function = driver.function(module, "gpudiag_sm_clock")
        driver.allow_dynamic_shared(function, 48 * 1024)
        assert probe.fake_func_attr() == -1  # within the default, no opt-in needed
        driver.allow_dynamic_shared(function, 117_249)
        assert probe.fake_func_attr() == 117_249
