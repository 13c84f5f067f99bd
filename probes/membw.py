"""Memory copy bandwidth (GB/s): device memory per GPU, host memory without a GPU.

Bandwidth counts every byte moved: a copy of N bytes reads N and writes N, so 2N bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

from .catalog import SIZING
from .context import ProbeContext
from .devices import CudaDevice, cuda_devices, import_torch
from .pergpu import Measure, run_on_each
from .rates import copy_bandwidth_gbps
from .records import Record, measured
from .sizing import MIB, MemoryBudget, choose_size
from .timing import cpu_timer, cuda_timer, iterations_for, sample_for, warm_up

PROBE = "membw"
METRIC = "bandwidth"
UNIT = "GB/s"

# Largest first (catalog.json); even the smallest is well past the L2 cache of current GPUs
# (50-60 MB), so the copy measures device memory, not cache.
GPU_BUFFER_MIB = SIZING.membw_buffer_mib
HOST_BUFFER_MIB = 256
WARMUP_S = 0.2


def gpu_bytes_needed(buffer_mib: int) -> int:
    """Device bytes for a source and a destination buffer of ``buffer_mib`` each."""
    return 2 * buffer_mib * MIB


def run(ctx: ProbeContext) -> Iterator[Record]:
    """Yield one record per GPU, or one for host memory when there is no CUDA device.

    Raises DeviceUnavailable when torch is missing.
    """
    torch = import_torch()
    devices = cuda_devices(torch)
    if not devices:
        yield _measure_host(torch, ctx)
        return
    yield from run_on_each(torch, devices, PROBE, METRIC, _gpu_measure(torch, ctx), ctx.sequential)


def _gpu_measure(torch: ModuleType, ctx: ProbeContext) -> Measure:
    def measure(device: CudaDevice, start: Callable[[], None]) -> Record:
        free_bytes, _ = torch.cuda.mem_get_info(device.index)
        budget = MemoryBudget.from_mib_cap(free_bytes, ctx.max_gpu_mem_mib)
        buffer_mib = choose_size(GPU_BUFFER_MIB, gpu_bytes_needed, budget, "membw")
        source = torch.empty(buffer_mib * MIB, dtype=torch.uint8, device=device.label).fill_(1)
        target = torch.empty_like(source)

        def work() -> None:
            target.copy_(source)

        start()
        per_run_s = warm_up(work, WARMUP_S, ctx.deadline, lambda: torch.cuda.synchronize(device.index))
        iterations = iterations_for(per_run_s)
        samples = sample_for(cuda_timer(torch, device.index, work, iterations), ctx.duration_s, ctx.deadline)
        return _record(device.label, device.gpu_uuid, buffer_mib, samples, iterations, "device")

    return measure


def _measure_host(torch: ModuleType, ctx: ProbeContext) -> Record:
    source = torch.ones(HOST_BUFFER_MIB * MIB, dtype=torch.uint8)
    target = torch.empty_like(source)

    def work() -> None:
        target.copy_(source)

    per_run_s = warm_up(work, WARMUP_S, ctx.deadline, lambda: None)
    iterations = iterations_for(per_run_s)
    samples = sample_for(cpu_timer(work, iterations), ctx.duration_s, ctx.deadline)
    return _record("cpu", None, HOST_BUFFER_MIB, samples, iterations, "host",
                   threads=torch.get_num_threads())


def _record(device: str, gpu_uuid: str | None, buffer_mib: int, samples: list[float],
            iterations: int, memory: str, **details: int) -> Record:
    rates = [copy_bandwidth_gbps(buffer_mib * MIB, seconds) for seconds in samples]
    return measured(PROBE, device, METRIC, UNIT, rates, gpu_uuid=gpu_uuid,
                    params={"memory": memory, "buffer_mib": buffer_mib},
                    details={"runs_per_sample": iterations, **details})
