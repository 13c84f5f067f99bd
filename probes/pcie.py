"""Host<->device (PCIe) copy bandwidth per GPU, both directions (GB/s).

Pinned host memory on the GPU's own socket (allocated with the thread on the CPUs NVML names
nearest the GPU: gpudiag's probes/placement.py), CUDA-event timing on the GPU's stream, one GPU
at a time so a GPU's figure is its own link's and not shared with its neighbours under the same
PCIe switch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

from .catalog import SIZING
from .context import ProbeContext
from .devices import CudaDevice, import_torch, require_cuda_devices
from .pergpu import Measure, run_with_evidence
from .placement import near_gpu
from .rates import transfer_gbps
from .records import Record, measured
from .sizing import MIB, MemoryBudget, choose_size
from .timing import cuda_timer, iterations_for, sample_for, warm_up

PROBE = "pcie"
METRIC = "bandwidth"
UNIT = "GB/s"
# Largest first (catalog.json).
BUFFER_MIB = SIZING.pcie_buffer_mib
WARMUP_S = 0.05
MAX_DIRECTION_DURATION_S = 0.5
DIRECTIONS = ("h2d", "d2h")


def run(ctx: ProbeContext) -> Iterator[Record]:
    """Yield an h2d and a d2h record per GPU. Raises DeviceUnavailable without torch or a GPU."""
    torch = import_torch()
    devices = require_cuda_devices(torch)
    for direction in DIRECTIONS:
        yield from run_with_evidence(torch, devices, PROBE, METRIC, _measure(torch, ctx, direction), sequential=True)


def _measure(torch: ModuleType, ctx: ProbeContext, direction: str) -> Measure:
    def measure(device: CudaDevice, start: Callable[[], None]) -> Record:
        free_bytes, _ = torch.cuda.mem_get_info(device.index)
        budget = MemoryBudget.from_mib_cap(free_bytes, ctx.max_gpu_mem_mib)
        buffer_mib = choose_size(BUFFER_MIB, lambda mib: mib * MIB, budget, "pcie")
        # A cached buffer of the GPU before would sit on its socket, maybe not this one's.
        released = release_pinned(torch)
        with near_gpu(device.gpu_uuid) as placement:
            host = torch.empty(buffer_mib * MIB, dtype=torch.uint8, pin_memory=True)
        if not released:
            placement = {**placement, "host_buffer": f"torch {torch.__version__} cannot release its cached pinned "
                                                     "buffers: this one may be an earlier GPU's, on its socket"}
        gpu = torch.empty(buffer_mib * MIB, dtype=torch.uint8, device=device.label)
        source, target = (host, gpu) if direction == "h2d" else (gpu, host)

        def work() -> None:
            target.copy_(source, non_blocking=True)

        start()
        per_run_s = warm_up(work, WARMUP_S, ctx.deadline, lambda: torch.cuda.synchronize(device.index))
        runs = iterations_for(per_run_s)
        duration_s = min(ctx.duration_s, MAX_DIRECTION_DURATION_S)
        seconds = sample_for(cuda_timer(torch, device.index, work, runs), duration_s, ctx.deadline)
        rates = [transfer_gbps(buffer_mib * MIB, s) for s in seconds]
        return measured(PROBE, device.label, METRIC, UNIT, rates, gpu_uuid=device.gpu_uuid,
                        params={"direction": direction, "buffer_mib": buffer_mib, "host_memory": "pinned"},
                        details={"runs_per_sample": runs, **placement})

    return measure


def release_pinned(torch: ModuleType) -> bool:
    """Give torch's cached pinned host buffers back, so the next one is allocated anew where the
    thread now runs. False where this torch cannot (no ``torch.accelerator.empty_host_cache``)."""
    empty_host_cache = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None)
    if empty_host_cache is None:
        return False
    empty_host_cache()
    return True
