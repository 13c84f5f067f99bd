"""NVLink/P2P bandwidth between every ordered pair of the node's GPUs (GB/s).

Unidirectional: copies from GPU i to GPU j, timed with CUDA events on i's stream (the copy
runs on the source device's stream). Bidirectional: i->j and j->i at once on private streams,
timed on the host clock around both; one figure per unordered pair, summing both directions.
Each record says whether peer access is possible between the two devices.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .catalog import SIZING
from .context import ProbeContext
from .devices import CudaDevice, import_torch, require_cuda_devices
from .pergpu import describe_cuda_error
from .rates import transfer_gbps
from .records import Record, failed, measured
from .sizing import MIB, MemoryBudget, MemoryRefusal, choose_size
from .timing import cuda_timer, iterations_for, sample_for, warm_up

PROBE = "p2p"
METRIC = "bandwidth"
UNIT = "GB/s"
# Largest first (catalog.json). Each GPU holds a send and a receive buffer of this size.
BUFFER_MIB = SIZING.p2p_buffer_mib
WARMUP_S = 0.02
# Per direction per pair: an 8-GPU node has 56 ordered pairs and 28 unordered ones.
MAX_PAIR_DURATION_S = 0.2


@dataclass(frozen=True)
class PairBuffers:
    """A send and a receive buffer on every GPU (bytes each: ``buffer_mib`` MiB)."""

    buffer_mib: int
    send: dict[int, Any]
    receive: dict[int, Any]


def run(ctx: ProbeContext) -> Iterator[Record]:
    """Yield unidirectional records for every ordered pair, then bidirectional ones.

    Raises DeviceUnavailable without torch or with fewer than two GPUs.
    """
    torch = import_torch()
    devices = require_cuda_devices(torch, at_least=2)
    try:
        buffers = _allocate(torch, devices, ctx.max_gpu_mem_mib)
    except MemoryRefusal as refusal:
        yield failed(PROBE, "host", METRIC, f"refused: {refusal}")
        return
    try:
        yield from _measure_all(torch, devices, buffers, ctx)
    finally:
        del buffers
        torch.cuda.empty_cache()


def _allocate(torch: ModuleType, devices: Sequence[CudaDevice], max_gpu_mem_mib: int | None) -> PairBuffers:
    tightest = min(torch.cuda.mem_get_info(d.index)[0] for d in devices)
    budget = MemoryBudget.from_mib_cap(tightest, max_gpu_mem_mib)
    buffer_mib = choose_size(BUFFER_MIB, lambda mib: 2 * mib * MIB, budget, "p2p (on the GPU with least free memory)")
    send = {d.index: torch.ones(buffer_mib * MIB, dtype=torch.uint8, device=d.label) for d in devices}
    receive = {d.index: torch.empty(buffer_mib * MIB, dtype=torch.uint8, device=d.label) for d in devices}
    return PairBuffers(buffer_mib, send, receive)


def _measure_all(torch: ModuleType, devices: Sequence[CudaDevice], buffers: PairBuffers,
                 ctx: ProbeContext) -> Iterator[Record]:
    duration_s = min(ctx.duration_s, MAX_PAIR_DURATION_S)
    for source, target in itertools.permutations(devices, 2):
        yield _pair(torch, source, target, "unidirectional", buffers,
                    functools.partial(_unidirectional, torch, source, target, buffers, duration_s, ctx))
    for first, second in itertools.combinations(devices, 2):
        yield _pair(torch, first, second, "bidirectional", buffers,
                    functools.partial(_bidirectional, torch, first, second, buffers, duration_s, ctx))


def _pair(torch: ModuleType, source: CudaDevice, target: CudaDevice, direction: str,
          buffers: PairBuffers, measure: Callable[[], tuple[list[float], int]]) -> Record:
    params = {"direction": direction, "src": source.label, "dst": target.label,
              "buffer_mib": buffers.buffer_mib}
    details = {"peer_access": bool(torch.cuda.can_device_access_peer(source.index, target.index)),
               "peer_uuid": target.gpu_uuid}
    try:
        samples, runs = measure()
    except RuntimeError as error:  # torch raises RuntimeError for CUDA failures
        return failed(PROBE, source.label, METRIC, describe_cuda_error(error),
                      gpu_uuid=source.gpu_uuid, params=params, details=details)
    return measured(PROBE, source.label, METRIC, UNIT, samples, gpu_uuid=source.gpu_uuid,
                    params=params, details={**details, "runs_per_sample": runs})


def _unidirectional(torch: ModuleType, source: CudaDevice, target: CudaDevice, buffers: PairBuffers,
                    duration_s: float, ctx: ProbeContext) -> tuple[list[float], int]:
    send, receive = buffers.send[source.index], buffers.receive[target.index]

    def work() -> None:
        receive.copy_(send, non_blocking=True)

    with torch.cuda.device(source.index):
        per_run_s = warm_up(work, WARMUP_S, ctx.deadline, lambda: _sync(torch, source, target))
        runs = iterations_for(per_run_s)
        seconds = sample_for(cuda_timer(torch, source.index, work, runs), duration_s, ctx.deadline)
    size = buffers.buffer_mib * MIB
    return [transfer_gbps(size, s) for s in seconds], runs


def _bidirectional(torch: ModuleType, first: CudaDevice, second: CudaDevice, buffers: PairBuffers,
                   duration_s: float, ctx: ProbeContext) -> tuple[list[float], int]:
    # Each direction gets its own pair of streams: torch orders a cross-device copy after the
    # current streams of both devices, so shared streams would serialise the two directions.
    forward = (torch.cuda.Stream(device=first.index), torch.cuda.Stream(device=second.index))
    backward = (torch.cuda.Stream(device=second.index), torch.cuda.Stream(device=first.index))

    def both(runs: int) -> float:
        _sync(torch, first, second)
        started = time.perf_counter()
        _queue(torch, forward, buffers.receive[second.index], buffers.send[first.index], runs)
        _queue(torch, backward, buffers.receive[first.index], buffers.send[second.index], runs)
        _sync(torch, first, second)
        return (time.perf_counter() - started) / runs

    per_run_s = both(1)
    runs = iterations_for(per_run_s)
    seconds = sample_for(lambda: both(runs), duration_s, ctx.deadline)
    size = buffers.buffer_mib * MIB
    return [transfer_gbps(2 * size, s) for s in seconds], runs


def _queue(torch: ModuleType, streams: tuple[Any, Any], receive: Any, send: Any, runs: int) -> None:
    with torch.cuda.stream(streams[0]), torch.cuda.stream(streams[1]):
        for _ in range(runs):
            receive.copy_(send, non_blocking=True)


def _sync(torch: ModuleType, *devices: CudaDevice) -> None:
    for device in devices:
        torch.cuda.synchronize(device.index)
