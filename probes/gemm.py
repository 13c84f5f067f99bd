"""GEMM throughput per GPU (TFLOP/s), the first thing a slow GPU costs a training job.

On a GPU: ``torch.matmul`` of square matrices in bf16 (fp16, tf32, fp32 selectable), large
enough that one launch is far past launch overhead; warm-up, then CUDA-event timed samples;
the median TFLOP/s and its CV. All GPUs run at once unless ``sequential``; NVML clocks and
clocks-event reasons seen during the run are attached as evidence.

Without CUDA: fp32 on the CPU, sized so that the probe runs about ``duration_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .catalog import SIZING
from .context import ProbeContext
from .devices import CudaDevice, cuda_devices, import_torch
from .pergpu import Measure, run_with_evidence
from .rates import gemm_flops, tflops
from .records import Record, measured
from .sizing import MIB, MemoryBudget, choose_size
from .timing import cpu_timer, cuda_timer, iterations_for, sample_for, warm_up

PROBE = "gemm"
METRIC = "tflops"
UNIT = "TFLOP/s"

DTYPE_BYTES = SIZING.dtype_bytes
# Largest first (catalog.json); 8192^3 in bf16 is ~1.1 TFLOP, ~1.5 ms on an H100: far past launch overhead.
GPU_SIZES = SIZING.gemm_sizes
# cuBLAS keeps a workspace per handle and stream besides the three matrices.
CUBLAS_WORKSPACE_BYTES = SIZING.gemm_workspace_mib * MIB
GPU_WARMUP_S = 0.5

CPU_START_SIZE = 256
CPU_MAX_SIZE = 4096
CPU_TARGET_RUN_S = 0.05
CPU_WARMUP_S = 0.1


@dataclass(frozen=True)
class GemmShape:
    """An (m x k) @ (k x n) product."""

    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        """Floating-point operations of one product."""
        return gemm_flops(self.m, self.n, self.k)

    def to_params(self) -> dict[str, int]:
        return {"m": self.m, "n": self.n, "k": self.k}


def gpu_bytes_needed(size: int, dtype: str) -> int:
    """Device bytes for A, B and C of a ``size``-square GEMM in ``dtype``, plus cuBLAS workspace."""
    return 3 * size * size * DTYPE_BYTES[dtype] + CUBLAS_WORKSPACE_BYTES


def cpu_size_for(seconds_per_run: float, size: int, target_s: float = CPU_TARGET_RUN_S,
                 max_size: int = CPU_MAX_SIZE) -> int:
    """The square size whose product takes about ``target_s``, from one timed at ``size``.

    GEMM time grows with the cube of the size; the result is a multiple of 64, at least 64.
    """
    if seconds_per_run <= 0:
        return max_size
    scaled = size * (target_s / seconds_per_run) ** (1 / 3)
    return int(min(max_size, max(64, 64 * round(scaled / 64))))


def run(ctx: ProbeContext) -> Iterator[Record]:
    """Yield one record per GPU, or one for the CPU when there is no CUDA device.

    Raises DeviceUnavailable when torch is missing.
    """
    torch = import_torch()
    devices = cuda_devices(torch)
    if not devices:
        yield _measure_cpu(torch, ctx)
        return
    yield from _measure_gpus(torch, devices, ctx)


def _measure_gpus(torch: ModuleType, devices: list[CudaDevice], ctx: ProbeContext) -> Iterator[Record]:
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = ctx.dtype == "tf32"
    try:
        yield from run_with_evidence(torch, devices, PROBE, METRIC, _gpu_measure(torch, ctx), ctx.sequential)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32


def _gpu_measure(torch: ModuleType, ctx: ProbeContext) -> Measure:
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16,
                   "tf32": torch.float32, "fp32": torch.float32}[ctx.dtype]

    def measure(device: CudaDevice, start: Callable[[], None]) -> Record:
        free_bytes, _ = torch.cuda.mem_get_info(device.index)
        budget = MemoryBudget.from_mib_cap(free_bytes, ctx.max_gpu_mem_mib)
        size = choose_size(GPU_SIZES, lambda s: gpu_bytes_needed(s, ctx.dtype), budget, "gemm")
        shape = GemmShape(size, size, size)
        a = torch.randn(size, size, device=device.label, dtype=torch_dtype)
        b = torch.randn(size, size, device=device.label, dtype=torch_dtype)
        c = torch.empty(size, size, device=device.label, dtype=torch_dtype)

        def work() -> None:
            torch.matmul(a, b, out=c)

        start()
        per_run_s = warm_up(work, GPU_WARMUP_S, ctx.deadline, lambda: torch.cuda.synchronize(device.index))
        iterations = iterations_for(per_run_s)
        samples = sample_for(cuda_timer(torch, device.index, work, iterations), ctx.duration_s, ctx.deadline)
        return _record(device.label, device.gpu_uuid, shape, ctx.dtype, samples, iterations,
                       mode="sequential" if ctx.sequential else "concurrent")

    return measure


def _measure_cpu(torch: ModuleType, ctx: ProbeContext) -> Record:
    size = CPU_START_SIZE
    per_run_s = _time_cpu_product(torch, size)
    while size < CPU_MAX_SIZE and per_run_s < CPU_TARGET_RUN_S / 2:
        size = cpu_size_for(per_run_s, size)
        per_run_s = _time_cpu_product(torch, size)
    a = torch.randn(size, size, dtype=torch.float32)
    b = torch.randn(size, size, dtype=torch.float32)
    c = torch.empty(size, size, dtype=torch.float32)

    def work() -> None:
        torch.matmul(a, b, out=c)

    per_run_s = warm_up(work, CPU_WARMUP_S, ctx.deadline, _nothing)
    iterations = max(1, min(iterations_for(per_run_s), 4))
    samples = sample_for(cpu_timer(work, iterations), ctx.duration_s, ctx.deadline)
    return _record("cpu", None, GemmShape(size, size, size), "fp32", samples, iterations,
                   mode="cpu", threads=torch.get_num_threads())


def _time_cpu_product(torch: ModuleType, size: int) -> float:
    a = torch.randn(size, size, dtype=torch.float32)
    b = torch.randn(size, size, dtype=torch.float32)
    torch.matmul(a, b)  # first call pays one-time costs (thread pool, page faults)
    return cpu_timer(lambda: torch.matmul(a, b), 1)()


def _record(device: str, gpu_uuid: str | None, shape: GemmShape, dtype: str, samples: list[float],
            iterations: int, mode: str, **details: Any) -> Record:
    rates = [tflops(shape.flops, seconds) for seconds in samples]
    return measured(PROBE, device, METRIC, UNIT, rates, gpu_uuid=gpu_uuid,
                    params={"dtype": dtype, **shape.to_params(), "mode": mode},
                    details={"runs_per_sample": iterations, "tflops_min": min(rates),
                             "tflops_max": max(rates), **details})


def _nothing() -> None:
    return None


