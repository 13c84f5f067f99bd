"""``python -m probes --pause`` on a simulated node: the rules of probes/pauseroom.py and the run of
probes/pause.py, for a node whose GPUs a paused job holds (the ``paused_job`` fault).

The controller never imports the probe bundle (docs/architecture.md, layering rules), so the
rules are written here again,
with the figures both read from the bundle's probes/catalog.json (gpudiag/pause/sizing.py);
tests/unit/controller/sim/test_sim_pause.py holds the refusals and caps equal to probes/pauseroom.py's, word for
word. As on a real node: the probes that need no GPU memory run first; then, per GPU
``torch`` sees, each GPU probe whose smallest size, a CUDA context and the headroom do not fit
what the job left (or every one, where an exclusive compute mode with the job's process forbids
our context) is a ``skipped`` record with the figures, and the rest run in a child that sees
that GPU alone with ``--max-gpu-mem`` sized to the room; the GPUs' children at once (one after
another with ``--sequential``), then p2p over the GPUs with room for it. Each record a child
prints carries ``details.pause``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..pause.sizing import (
    CHILD_MARGIN_S,
    CONTEXT_RESERVE_MIB,
    DTYPE_BYTES,
    GEMM_SIZES,
    GEMM_WORKSPACE_MIB,
    GPU_PROBES,
    HEADROOM_FRACTION,
    HEADROOM_MIN_BYTES,
    MEMBW_BUFFER_MIB,
    MIN_SHARE_S,
    P2P_BUFFER_MIB,
    PCIE_BUFFER_MIB,
    PER_GPU_PROBES,
    SMCLOCK_SEGMENT_MIB,
)
from ..records import HEADLINE_METRICS
from .printed import MIB, BundleCall, not_ok
from .state import Draw, GpuState, NodeState

# As probes/pauseroom.py: the compute modes (NVML's names) that forbid a context of ours.
EXCLUSIVE_MODES = ("exclusive_thread", "exclusive_process")
PROHIBITED = "prohibited"


@dataclass(frozen=True)
class Room:
    """One GPU as the paused job left it (probes/pauseroom.py GpuRoom): memory in MiB."""

    gpu: GpuState
    free_mib: int
    total_mib: int
    compute_mode: str
    processes: int

    @property
    def label(self) -> str:
        return self.gpu.device

    def to_details(self) -> dict[str, int | str | None]:
        """The figures a record carries in ``details.pause``."""
        return {"nvml_index": self.gpu.nvml_index, "free_mib": self.free_mib, "total_mib": self.total_mib,
                "compute_mode": self.compute_mode, "compute_processes": self.processes}


def gpu_room(node: NodeState, gpu: GpuState) -> Room:
    """What NVML says of ``gpu``: the paused job's memory and process, and its compute mode."""
    held = gpu.job_mib > 0 or gpu.exclusive
    return Room(gpu, node.free_mib(gpu), node.gpu_memory_mib, "exclusive_process" if gpu.exclusive else "default",
                1 if held else 0)


def smallest_need_mib(probe: str, dtype: str) -> int:
    """Device memory (MiB, rounded up) the smallest size of ``probe`` takes on one GPU."""
    needs: dict[str, Callable[[], int]] = {
        "gemm": lambda: 3 * min(GEMM_SIZES) ** 2 * DTYPE_BYTES[dtype] + GEMM_WORKSPACE_MIB * MIB,
        "membw": lambda: 2 * min(MEMBW_BUFFER_MIB) * MIB,
        "p2p": lambda: 2 * min(P2P_BUFFER_MIB) * MIB,
        "pcie": lambda: min(PCIE_BUFFER_MIB) * MIB,
        "smclock": lambda: SMCLOCK_SEGMENT_MIB * MIB,
    }
    return -(-needs[probe]() // MIB)


def _after_context(free_mib: int) -> tuple[int, int]:
    """(usable, headroom) bytes a probe in a fresh child finds: free less a context and headroom."""
    free_bytes = max(0, free_mib - CONTEXT_RESERVE_MIB) * MIB
    headroom = max(HEADROOM_MIN_BYTES, int(free_bytes * HEADROOM_FRACTION))
    return max(0, free_bytes - headroom), headroom


def child_cap_mib(free_mib: int, user_cap_mib: int | None) -> int:
    """``--max-gpu-mem`` of a child: free less context and headroom, within the user's cap."""
    usable = _after_context(free_mib)[0] // MIB
    return usable if user_cap_mib is None else min(usable, user_cap_mib)


def mode_refusal(compute_mode: str, processes: int) -> str | None:
    """Why the compute mode forbids any probe on the GPU; None when it allows one."""
    if compute_mode == PROHIBITED:
        return "pause: compute mode prohibited (no CUDA context may be made on this GPU): not measured"
    if compute_mode in EXCLUSIVE_MODES and processes != 0:
        held = f"{processes} compute process{'es' if processes != 1 else ''}"
        return (f"pause: compute mode {compute_mode} with {held} on this GPU (the paused job's): a probe's "
                "CUDA context would be refused or would take the GPU from the job: not measured")
    return None


def refusal(room: Room, probe: str, dtype: str) -> str | None:
    """Why ``probe`` may not run on ``room`` (mode or memory, with the figures); None when it may."""
    blocked = mode_refusal(room.compute_mode, room.processes)
    if blocked is not None:
        return blocked
    need = smallest_need_mib(probe, dtype)
    usable, headroom = _after_context(room.free_mib)
    if need * MIB <= usable:
        return None
    needed = need + CONTEXT_RESERVE_MIB + headroom // MIB
    return (f"pause: {room.free_mib} MiB free of {room.total_mib} MiB (the paused job holds the rest); {probe} "
            f"needs {needed} MiB ({need} MiB for its smallest size, {CONTEXT_RESERVE_MIB} MiB for a CUDA context, "
            f"{headroom // MIB} MiB headroom): not measured, the job's memory left untouched")


@dataclass(frozen=True)
class Child:
    """A child process: its probes, the GPUs it sees, its ``--max-gpu-mem`` (MiB)."""

    names: tuple[str, ...]
    rooms: tuple[Room, ...]
    cap_mib: int

    @property
    def where(self) -> str:
        return ", ".join(room.label for room in self.rooms)

    def relabel(self, data: dict[str, Any]) -> dict[str, Any]:
        """A record the child printed, with the pause figures in ``details`` (its GPUs keep their
        ``cuda:`` names here: the child's node holds them with this run's numbers)."""
        single = self.rooms[0] if len(self.rooms) == 1 else None
        figures: dict[str, Any] = {"max_gpu_mem_mib": self.cap_mib, "gpus_visible": len(self.rooms)}
        if single is not None:
            figures.update(single.to_details())
            if data.get("device") == "host":
                data["device"], data["gpu_uuid"] = single.label, data.get("gpu_uuid") or single.gpu.gpu_uuid
        data["details"] = {**(data.get("details") or {}), "pause": figures}
        return data


Step = dict[str, Any] | Child


def plan_pause(rooms: Sequence[Room], names: Sequence[str], dtype: str, user_cap_mib: int | None) -> list[Step]:
    """As probes/pause.py plan_pause: per GPU its refusals then its child, then p2p's."""
    steps: list[Step] = []
    per_gpu = [name for name in PER_GPU_PROBES if name in names]
    for room in rooms if per_gpu else ():
        fitting = []
        for name in per_gpu:
            reason = refusal(room, name, dtype)
            if reason is None:
                fitting.append(name)
            else:
                steps.append(_refused(name, room, reason))
        if fitting:
            steps.append(Child(tuple(fitting), (room,), child_cap_mib(room.free_mib, user_cap_mib)))
    if "p2p" in names:
        steps += _p2p_steps(rooms, dtype, user_cap_mib)
    return steps


def _p2p_steps(rooms: Sequence[Room], dtype: str, user_cap_mib: int | None) -> list[Step]:
    if len(rooms) < 2:
        return [not_ok("skipped", "p2p", "host", "bandwidth",
                       f"needs at least 2 GPUs; this machine has {len(rooms)} visible to torch")]
    steps: list[Step] = []
    fitting = []
    for room in rooms:
        reason = refusal(room, "p2p", dtype)
        if reason is None:
            fitting.append(room)
        else:
            steps.append(_refused("p2p", room, f"{reason}; its pairs are not measured"))
    if len(fitting) >= 2:
        steps.append(Child(("p2p",), tuple(fitting), min(child_cap_mib(r.free_mib, user_cap_mib) for r in fitting)))
    return steps


def _refused(probe: str, room: Room, reason: str) -> dict[str, Any]:
    return not_ok("skipped", probe, room.label, HEADLINE_METRICS[probe], reason, gpu_uuid=room.gpu.gpu_uuid,
                  details={"pause": room.to_details()})


class ChildRun(Protocol):
    """What a simulated child printed (gpudiag/sim/runner.py BundleRun)."""

    @property
    def lines(self) -> tuple[tuple[float, str], ...]: ...

    @property
    def exit_status(self) -> int: ...

    @property
    def duration_s(self) -> float: ...


RunChild = Callable[[BundleCall, NodeState, Draw], ChildRun]


def run_paused(call: BundleCall, node: NodeState, draw: Draw, start_s: float, startup_s: float,
               run_child: RunChild) -> tuple[list[tuple[float, dict[str, Any]]], float]:
    """The GPU probes of ``call`` on ``node`` in pause mode, from simulated second ``start_s`` (the
    run's deadline counts from ``startup_s``): each record with the second it appeared, and the
    second the last child ended. ``run_child`` runs a child's ``python -m probes``."""
    names = [name for name in GPU_PROBES if name in (set(call.names) or set(GPU_PROBES))]
    rooms = [gpu_room(node, gpu) for gpu in node.cuda_gpus]
    steps = plan_pause(rooms, names, call.dtype, call.max_gpu_mem_mib)
    out = [(start_s, step) for step in steps if isinstance(step, dict)]
    children = [step for step in steps if isinstance(step, Child)]
    batches = ([[child] for child in children] if call.sequential else
               [b for b in ([c for c in children if "p2p" not in c.names], [c for c in children if "p2p" in c.names])
                if b])
    clock_s = start_s
    for left, batch in zip(range(len(batches), 0, -1), batches, strict=True):
        share_s = max(0.0, call.deadline_s - (clock_s - startup_s) - CHILD_MARGIN_S) / left
        ends = [clock_s]
        for child in batch:
            records, end_s = _child(call, node, draw, child, clock_s, share_s, run_child)
            out += records
            ends.append(end_s)
        clock_s = max(ends)
    return out, clock_s


def _child(call: BundleCall, node: NodeState, draw: Draw, child: Child, clock_s: float, share_s: float,
           run_child: RunChild) -> tuple[list[tuple[float, dict[str, Any]]], float]:
    if share_s < MIN_SHARE_S:
        reason = ("deadline: the run's overall deadline left no time for the pause child process measuring "
                  f"{child.where}")
        return [(clock_s, _child_record("skipped", child, name, reason)) for name in child.names], clock_s
    sub = BundleCall(child.names, call.duration_s, child.cap_mib, call.dtype, True, share_s)
    ran = run_child(sub, replace(node, gpus=tuple(room.gpu for room in child.rooms)), draw)
    records = [(clock_s + at_s, child.relabel(json.loads(line))) for at_s, line in ran.lines]
    printed = {data["probe"] for _, data in records}
    end_s = clock_s + ran.duration_s
    records += [(end_s, _child_record("error", child, name, f"pause: the child process measuring {child.where} ended "
                                      f"(exit status {ran.exit_status}) before it printed a record of this probe"))
                for name in child.names if name not in printed]
    return records, end_s


def _child_record(status: str, child: Child, name: str, reason: str) -> dict[str, Any]:
    single = child.rooms[0] if len(child.rooms) == 1 else None
    return not_ok(status, name, single.label if single else "host", HEADLINE_METRICS[name], reason,
                  gpu_uuid=single.gpu.gpu_uuid if single else None)
