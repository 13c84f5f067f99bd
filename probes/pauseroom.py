"""What a paused job left free on each GPU, read through NVML, and what a probe may take there.

``python -m probes --pause`` (probes/pause.py) runs while a training job is paused for
mitigation: the job still holds most of each GPU's memory and its CUDA contexts. Before any CUDA
context of ours exists, NVML says each GPU's free memory, its compute mode and how many compute
processes it has (counted only: nothing here touches, signals or waits on them). From that:

- a GPU in ``prohibited`` compute mode, or in an exclusive mode with a process on it (or a count
  NVML cannot give), is not probed: a context of ours would be refused, or would take the GPU
  from the job when it resumes;
- a probe runs on a GPU only when its smallest size, a CUDA context (:data:`CONTEXT_RESERVE_MIB`)
  and the headroom of probes/sizing.py fit the free memory; its ``--max-gpu-mem`` is what is left
  after the context and the headroom (never above the user's own ``--max-gpu-mem``).

The figures (the context's memory, the headroom, each probe's sizes) are catalog.json's, which
the simulated fleet (gpudiag/sim/pause.py) reads too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import gemm, membw, p2p, pcie, smclock
from .catalog import PAUSE, PROBE_NAMES
from .nvml import Nvml
from .sizing import MIB, MemoryBudget

# Device memory (MiB) a CUDA context with torch's kernels and cuBLAS's takes before any buffer:
# about 530 MiB on an H100 with CUDA 12 and lazy module loading; a little more, to be safe (catalog.json).
CONTEXT_RESERVE_MIB = PAUSE.context_reserve_mib
# NVML compute modes (nvmlComputeMode_t) by number, as pynvml's NVML_COMPUTEMODE_* say them.
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
EXCLUSIVE_MODES = ("exclusive_thread", "exclusive_process")
PROHIBITED = "prohibited"
# The probes that take GPU memory, each measured in a child process that sees only its GPUs:
# each GPU's own (catalog.json) and p2p, in run order.
GPU_PROBES = tuple(name for name in PROBE_NAMES if name in PAUSE.per_gpu_probes or name == "p2p")


class RoomUnreadable(Exception):
    """NVML could not say which GPUs the run sees (the message says why): no GPU is probed."""


@dataclass(frozen=True)
class GpuRoom:
    """One GPU as the paused job left it: ``label`` is its torch name (``cuda:<n>``) in this run,
    ``free_mib``/``total_mib`` its memory (MiB, None where NVML could not read it),
    ``compute_mode`` a name of :data:`COMPUTE_MODES` (``unknown`` where unread), ``processes``
    the compute processes on it (None: unknown), ``unread`` why NVML could not read it (None: read)."""

    nvml_index: int
    gpu_uuid: str
    label: str
    free_mib: int | None
    total_mib: int | None
    compute_mode: str
    processes: int | None
    unread: str | None = None

    def to_details(self) -> dict[str, int | str | None]:
        """The figures a record carries in ``details.pause``."""
        return {"nvml_index": self.nvml_index, "free_mib": self.free_mib, "total_mib": self.total_mib,
                "compute_mode": self.compute_mode, "compute_processes": self.processes}


def smallest_need_mib(probe: str, dtype: str) -> int:
    """Device memory (MiB, rounded up) the smallest size of ``probe`` takes on one GPU."""
    needs: dict[str, Callable[[], int]] = {
        "gemm": lambda: gemm.gpu_bytes_needed(min(gemm.GPU_SIZES), dtype),
        "membw": lambda: membw.gpu_bytes_needed(min(membw.GPU_BUFFER_MIB)),
        "p2p": lambda: 2 * min(p2p.BUFFER_MIB) * MIB,
        "pcie": lambda: min(pcie.BUFFER_MIB) * MIB,
        "smclock": lambda: smclock.ALLOCATOR_SEGMENT_MIB * MIB,
    }
    return -(-needs[probe]() // MIB)


def budget_after_context(free_mib: int) -> MemoryBudget:
    """The budget a probe in a fresh child finds: the free memory less a CUDA context."""
    return MemoryBudget(free_bytes=max(0, free_mib - CONTEXT_RESERVE_MIB) * MIB)


def child_cap_mib(room: GpuRoom, user_cap_mib: int | None) -> int:
    """``--max-gpu-mem`` of a child on ``room``: free less context and headroom, within the user's cap."""
    usable = budget_after_context(room.free_mib or 0).usable_bytes // MIB
    return usable if user_cap_mib is None else min(usable, user_cap_mib)


def mode_refusal(room: GpuRoom) -> str | None:
    """Why the compute mode (or an unread GPU) forbids any probe on ``room``; None when it allows one."""
    if room.unread is not None:
        return f"pause: NVML could not read this GPU's free memory or compute mode ({room.unread}): not measured"
    if room.compute_mode == PROHIBITED:
        return "pause: compute mode prohibited (no CUDA context may be made on this GPU): not measured"
    if room.compute_mode in EXCLUSIVE_MODES and room.processes != 0:
        held = "an unknown number of processes" if room.processes is None else _processes(room.processes)
        return (f"pause: compute mode {room.compute_mode} with {held} on this GPU (the paused job's): a probe's "
                "CUDA context would be refused or would take the GPU from the job: not measured")
    return None


def refusal(room: GpuRoom, probe: str, dtype: str) -> str | None:
    """Why ``probe`` may not run on ``room`` (mode or memory, with the figures); None when it may."""
    blocked = mode_refusal(room)
    if blocked is not None:
        return blocked
    need = smallest_need_mib(probe, dtype)
    free = room.free_mib or 0
    budget = budget_after_context(free)
    if need * MIB <= budget.usable_bytes:
        return None
    headroom = budget.headroom_bytes // MIB
    needed = need + CONTEXT_RESERVE_MIB + headroom
    return (f"pause: {free} MiB free of {room.total_mib} MiB (the paused job holds the rest); {probe} needs "
            f"{needed} MiB ({need} MiB for its smallest size, {CONTEXT_RESERVE_MIB} MiB for a CUDA context, "
            f"{headroom} MiB headroom): not measured, the job's memory left untouched")


def visible_order(count: int, uuids: Sequence[str | None], cuda_visible: str | None) -> list[int]:
    """The NVML indices torch numbers ``cuda:0..``, in that order, as CUDA reads CUDA_VISIBLE_DEVICES
    (None: every GPU, in PCI bus order as CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them; indices and
    ``GPU-`` UUID prefixes, up to the first entry that names no GPU). ``uuids[i]`` is GPU i's UUID.

    Raises RoomUnreadable for a MIG entry (pause mode sizes whole GPUs)."""
    if cuda_visible is None:
        return list(range(count))
    order: list[int] = []
    for entry in (part.strip() for part in cuda_visible.split(",")):
        if entry.startswith("MIG-"):
            raise RoomUnreadable(f"CUDA_VISIBLE_DEVICES names a MIG instance ({entry}); pause mode sizes whole GPUs")
        index = _visible_index(entry, count, uuids)
        if index is None or index in order:
            break  # CUDA ignores the entries from the first one that names no GPU
        order.append(index)
    return order


def _visible_index(entry: str, count: int, uuids: Sequence[str | None]) -> int | None:
    if entry.isdigit():
        return int(entry) if int(entry) < count else None
    if entry.startswith("GPU-"):
        matches = [i for i, uuid in enumerate(uuids) if uuid is not None and uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None


def read_rooms(nvml: Nvml, cuda_visible: str | None) -> list[GpuRoom]:
    """Every GPU this run's torch would see, in ``cuda:`` order, with what NVML says of it.

    A GPU NVML reports lost is left out (CUDA does not see it: telemetry reports it). Raises
    RoomUnreadable when NVML cannot count the GPUs, or CUDA_VISIBLE_DEVICES names a MIG instance.
    """
    try:
        count = nvml.device_count()
    except nvml.NVMLError as error:
        raise RoomUnreadable(f"NVML could not count the GPUs: {nvml.error_name(error)}") from error
    handles: list[object | None] = []
    uuids: list[str | None] = []
    for index in range(count):
        try:
            handle = nvml.handle(None, index)
            uuids.append(nvml.uuid(handle))
            handles.append(handle)
        except nvml.NVMLError:
            handles.append(None)  # lost or unreadable: CUDA cannot use it either
            uuids.append(None)
    order = [i for i in visible_order(count, uuids, cuda_visible) if handles[i] is not None]
    return [_room(nvml, index, handles[index], uuids[index] or "", f"cuda:{position}")
            for position, index in enumerate(order)]


def _room(nvml: Nvml, index: int, handle: object, gpu_uuid: str, label: str) -> GpuRoom:
    try:
        free_bytes, total_bytes = nvml.memory_info(handle)
        mode = COMPUTE_MODES.get(nvml.compute_mode(handle), "unknown")
    except nvml.NVMLError as error:
        return GpuRoom(index, gpu_uuid, label, None, None, "unknown", None, unread=nvml.error_name(error))
    try:
        processes: int | None = nvml.compute_process_count(handle)
    except nvml.NVMLError:
        processes = None  # only an exclusive mode asks; there an unknown count is taken as busy
    return GpuRoom(index, gpu_uuid, label, free_bytes // MIB, total_bytes // MIB, mode, processes)


def _processes(count: int) -> str:
    return f"{count} compute process{'es' if count != 1 else ''}"
