"""The kernel loader: compiler search, nvcc/NVRTC command lines, the image cache, driver helpers."""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from probes import cuda_driver, kernels
from probes.kernels import CUBIN, PTX, KernelImage

REPO_ROOT = Path(__file__).resolve().parents[3]
SM_CLOCK_SOURCE = REPO_ROOT / "cuda_kernels" / "sm_clock.cu"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


@pytest.mark.parametrize(("capability", "arch"), [((9, 0), "sm_90"), ((8, 6), "sm_86"),
                                                  ((7, 5), "sm_75"), ((10, 0), "sm_100"),
                                                  ((12, 1), "sm_121")])
def test_arch_for_names_the_real_architecture(capability: tuple[int, int], arch: str) -> None:
    assert kernels.arch_for(capability) == arch


def test_arch_for_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        kernels.arch_for((0, 0))


def test_nvcc_argv_compiles_one_file_to_a_cubin() -> None:
    argv = kernels.nvcc_argv("/opt/cuda/bin/nvcc", "/tmp/x/sm_clock.cu", "/tmp/x/k.cubin", "sm_90")
    assert argv == ["/opt/cuda/bin/nvcc", "-cubin", "-arch=sm_90", "-o", "/tmp/x/k.cubin",
                    "/tmp/x/sm_clock.cu"]


def test_nvrtc_options_pick_a_real_target_for_cubin_and_a_virtual_one_for_ptx() -> None:
    assert kernels.nvrtc_options("sm_90", CUBIN) == [b"--gpu-architecture=sm_90"]
    assert kernels.nvrtc_options("sm_90", PTX) == [b"--gpu-architecture=compute_90"]


def test_ptx_fallback_uses_the_newest_architecture_not_newer_than_the_gpu() -> None:
    assert kernels.ptx_fallback_arch("sm_100", [75, 80, 86, 90]) == "sm_90"
    assert kernels.ptx_fallback_arch("sm_90", [75, 80, 90, 100]) == "sm_90"
    assert kernels.ptx_fallback_arch("sm_70", [75, 80]) is None


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


def test_nvrtc_candidates_search_system_names_then_toolkit_then_wheels(tmp_path: Path) -> None:
    toolkit = tmp_path / "cuda" / "lib64"
    site = tmp_path / "site-packages"
    _touch(toolkit / "libnvrtc.so.12")
    _touch(toolkit / "libnvrtc-builtins.so.12.4")
    _touch(site / "nvidia" / "cuda_nvrtc" / "lib" / "libnvrtc.so.12")
    _touch(site / "nvidia" / "cuda_nvrtc" / "lib" / "libnvrtc-builtins.so.12.4")
    _touch(site / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13")
    candidates = kernels.nvrtc_candidates([str(toolkit), str(tmp_path / "missing"), str(site)],
                                          ["libnvrtc.so.12"])
    assert candidates == [
        "libnvrtc.so.12",
        str(toolkit / "libnvrtc.so.12"),
        str(site / "nvidia" / "cuda_nvrtc" / "lib" / "libnvrtc.so.12"),
        str(site / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13"),
    ]


def test_system_nvrtc_names_try_every_soname_once() -> None:
    names = kernels.system_nvrtc_names()
    for soname in kernels.NVRTC_SONAMES:
        assert names.count(soname) == 1
    assert names.index("libnvrtc.so.13") < names.index("libnvrtc.so.12") < names.index("libnvrtc.so.11.2")


def test_default_library_dirs_put_cuda_home_before_site_packages() -> None:
    dirs = kernels.default_library_dirs(["/venv/site-packages"], {"CUDA_HOME": "/opt/cuda-12.4"})
    assert dirs[0] == "/opt/cuda-12.4/lib64"
    assert "/usr/local/cuda/lib64" in dirs
    assert dirs[-1] == "/venv/site-packages"


def test_nvcc_search_path_adds_toolkit_bin_folders_after_path() -> None:
    search = kernels.nvcc_search_path({"PATH": "/usr/bin", "CUDA_HOME": "/opt/cuda"}).split(os.pathsep)
    assert search == ["/usr/bin", "/opt/cuda/bin", "/usr/local/cuda/bin"]


def test_no_compiler_gives_the_skip_reason(tmp_path: Path) -> None:
    not_a_library = tmp_path / "libnvrtc.so.12"
    not_a_library.write_text("not an ELF file")
    with pytest.raises(kernels.NoCompiler) as caught:
        kernels.locate_compiler(search_path=str(tmp_path), nvrtc_paths=[str(not_a_library)])
    assert str(caught.value) == "no CUDA compiler: neither libnvrtc nor nvcc found"
    assert str(caught.value) == kernels.NO_COMPILER_REASON


def _fake_nvcc(folder: Path, script: str) -> Path:
    nvcc = folder / "nvcc"
    nvcc.write_text("#!/bin/sh\n" + script)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return nvcc


def test_nvcc_on_the_search_path_is_found_when_nvrtc_is_absent(tmp_path: Path) -> None:
    nvcc = _fake_nvcc(tmp_path, "exit 0\n")
    compiler = kernels.locate_compiler(search_path=str(tmp_path), nvrtc_paths=[])
    assert isinstance(compiler, kernels.NvccCompiler)
    assert compiler.nvcc == str(nvcc)


def test_nvcc_failure_becomes_a_compile_error_with_its_message(tmp_path: Path) -> None:
    _fake_nvcc(tmp_path, "echo 'error: unsupported gpu architecture' >&2\nexit 1\n")
    compiler = kernels.locate_compiler(search_path=str(tmp_path), nvrtc_paths=[])
    with pytest.raises(kernels.CompileError, match="unsupported gpu architecture"):
        compiler.compile("__global__ void f() {}", "f.cu", "sm_90", timeout_s=30)


def test_nvcc_that_hangs_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    _fake_nvcc(tmp_path, "sleep 30\n")
    compiler = kernels.locate_compiler(search_path=str(tmp_path), nvrtc_paths=[])
    with pytest.raises(kernels.CompileError, match="did not finish"):
        compiler.compile("__global__ void f() {}", "f.cu", "sm_90", timeout_s=1)


@needs_nvcc
def test_real_nvcc_compiles_sm_clock_to_a_cubin() -> None:
    compiler = kernels.locate_compiler(kernels.nvcc_search_path(os.environ), nvrtc_paths=[])
    assert isinstance(compiler, kernels.NvccCompiler)
    image = compiler.compile(SM_CLOCK_SOURCE.read_text(), "sm_clock.cu", "sm_90", timeout_s=120)
    assert image.kind == CUBIN and image.arch == "sm_90"
    assert image.data.startswith(b"\x7fELF") and len(image.data) > 1000
    assert b"gpudiag_sm_clock" in image.data
    assert kernels.looks_valid(image.data, CUBIN)


@needs_nvcc
def test_real_nvcc_rejects_a_broken_source() -> None:
    compiler = kernels.locate_compiler(kernels.nvcc_search_path(os.environ), nvrtc_paths=[])
    with pytest.raises(kernels.CompileError, match="nvcc failed"):
        compiler.compile('extern "C" __global__ void f() { undefined_call(); }', "bad.cu",
                         "sm_90", timeout_s=120)


def _find_nvrtc() -> kernels.NvrtcCompiler | None:
    dirs = kernels.default_library_dirs([entry for entry in sys.path if entry], os.environ)
    try:
        compiler = kernels.locate_compiler("", kernels.nvrtc_candidates(dirs, kernels.system_nvrtc_names()))
    except kernels.NoCompiler:
        return None
    assert isinstance(compiler, kernels.NvrtcCompiler)
    return compiler


NVRTC = _find_nvrtc()
# The test extra installs nvidia-cuda-nvrtc-cu12, so CI runs these; a bare checkout may not.
needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason="libnvrtc (CUDA's runtime compiler) not installed")


def _nvrtc() -> kernels.NvrtcCompiler:
    assert NVRTC is not None
    return NVRTC


@needs_nvrtc
def test_real_nvrtc_compiles_sm_clock_to_a_cubin() -> None:
    image = _nvrtc().compile(SM_CLOCK_SOURCE.read_text(), "sm_clock.cu", "sm_90", timeout_s=120)
    assert image.kind == CUBIN and image.data.startswith(b"\x7fELF")
    assert b"gpudiag_sm_clock" in image.data


@needs_nvrtc
def test_real_nvrtc_reports_a_compilation_error_with_its_log() -> None:
    with pytest.raises(kernels.CompileError, match="undefined_call"):
        _nvrtc().compile('extern "C" __global__ void f() { undefined_call(); }', "bad.cu",
                                 "sm_90", timeout_s=120)


class CountingCompiler:
    """A compiler that records its calls and returns a minimal valid CUBIN."""

    name = "counting"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def compile(self, source: str, file_name: str, arch: str, timeout_s: float) -> KernelImage:
        self.calls.append(arch)
        return KernelImage(b"\x7fELF" + source.encode(), CUBIN, arch, self.name)


def test_compiled_images_are_cached_per_source_and_arch(tmp_path: Path) -> None:
    compiler = CountingCompiler()
    first = kernels.compile_cached("src-a", "a.cu", "sm_90", 10, str(tmp_path), compiler)
    again = kernels.compile_cached("src-a", "a.cu", "sm_90", 10, str(tmp_path), compiler)
    kernels.compile_cached("src-a", "a.cu", "sm_80", 10, str(tmp_path), compiler)
    kernels.compile_cached("src-b", "a.cu", "sm_90", 10, str(tmp_path), compiler)
    assert compiler.calls == ["sm_90", "sm_80", "sm_90"]
    assert again.data == first.data and again.compiler == "cache"


def test_a_cache_hit_needs_no_compiler(tmp_path: Path) -> None:
    kernels.compile_cached("src", "a.cu", "sm_90", 10, str(tmp_path), CountingCompiler())
    image = kernels.compile_cached("src", "a.cu", "sm_90", 10, str(tmp_path))
    assert image.compiler == "cache"


def test_a_truncated_cache_file_is_ignored_and_recompiled(tmp_path: Path) -> None:
    (tmp_path / f"{kernels.cache_key('src', 'sm_90')}.cubin").write_bytes(b"\x7fE")
    compiler = CountingCompiler()
    image = kernels.compile_cached("src", "a.cu", "sm_90", 10, str(tmp_path), compiler)
    assert compiler.calls == ["sm_90"] and image.data.startswith(b"\x7fELF")


def test_a_relative_cache_dir_falls_back_to_a_private_temp_folder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # the stdlib's temp root
    kernels.compile_cached("src", "a.cu", "sm_90", 10, "relative/cache", CountingCompiler())
    assert not (tmp_path / "relative").exists()
    fallback = tmp_path / "tmp" / f"gpudiag-kernels-{os.getuid()}"
    assert [path.name for path in fallback.iterdir()] == [f"{kernels.cache_key('src', 'sm_90')}.cubin"]
    assert stat.S_IMODE(fallback.stat().st_mode) == 0o700


def test_cache_dir_follows_xdg() -> None:
    assert kernels.default_cache_dir({"XDG_CACHE_HOME": "/c"}) == "/c/gpudiag/kernels"


def test_driver_errors_carry_the_error_name() -> None:
    names = {700: "CUDA_ERROR_ILLEGAL_ADDRESS"}
    error = cuda_driver.describe_result("cuLaunchKernel", 700, names.get)
    assert error.name == "CUDA_ERROR_ILLEGAL_ADDRESS" and error.call == "cuLaunchKernel"
    assert str(error) == "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"
    assert cuda_driver.describe_result("cuInit", 9999, names.get).name == "CUresult 9999"


def test_kernel_parameter_array_points_at_each_argument() -> None:
    args = [ctypes.c_uint64(0xDEAD0000), ctypes.c_int32(42), ctypes.c_float(1.5)]
    array = cuda_driver.kernel_parameter_array(args)
    assert ctypes.cast(array[0], ctypes.POINTER(ctypes.c_uint64)).contents.value == 0xDEAD0000
    assert ctypes.cast(array[1], ctypes.POINTER(ctypes.c_int32)).contents.value == 42
    assert ctypes.cast(array[2], ctypes.POINTER(ctypes.c_float)).contents.value == 1.5


@pytest.mark.parametrize(("per_sm", "optin", "reserved"), [(233472, 232448, 1024),  # H100
                                                          (167936, 166912, 1024),  # A100
                                                          (102400, 101376, 1024)])  # sm_89
def test_exclusive_shared_memory_leaves_no_room_for_a_second_block(per_sm: int, optin: int,
                                                                    reserved: int) -> None:
    shared = cuda_driver.exclusive_shared_bytes(per_sm, optin, reserved)
    assert shared is not None and shared <= optin
    assert 2 * (shared + reserved) > per_sm


def test_exclusive_shared_memory_is_none_when_the_opt_in_limit_is_too_small() -> None:
    assert cuda_driver.exclusive_shared_bytes(233472, 49152, 0) is None


def test_a_missing_driver_library_is_a_kernel_error() -> None:
    with pytest.raises(kernels.KernelError, match="cannot be loaded"):
        cuda_driver.CudaDriver.load("libgpudiag-no-such-driver.so.1")
