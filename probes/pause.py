"""``python -m probes --pause``: the probes while a training job is paused for mitigation.

The paused job keeps its processes, its CUDA contexts and most of each GPU's memory. So:

1. Before any CUDA context of ours exists, NVML says each GPU's free memory, compute mode and how
   many compute processes it has (probes/pauseroom.py). Those processes are only counted: nothing
   here touches, signals or waits on them.
2. The probes that need no GPU memory (facts, telemetry, xid) run here, as without ``--pause``.
3. Each GPU's memory probes (gemm, membw, pcie, smclock) run in a child process of ours that sees
   that GPU alone (``CUDA_VISIBLE_DEVICES=<its UUID>``), so no context is made on the others, with
   ``--max-gpu-mem`` set to what the paused job left (probes/pauseroom.py). The GPUs' children
   run at once, as the probes load every GPU at once without ``--pause`` (the pause's budget is
   short); with ``--sequential`` one after another. A probe that does not fit, or a GPU whose
   compute mode forbids a context, gets a ``skipped`` record naming the GPU and the figures:
   never a pass.
4. P2P runs in one child, after them, that sees the GPUs with room for it; each GPU without is a
   ``skipped`` record of its own (its pairs are not measured).

The time left before the run's deadline (less a margin) is shared equally between the batches
of children (the GPUs' children at once, then p2p; or each child alone with ``--sequential``);
a child's share is its own ``--deadline``, its own watchdog ends it after that, and this process
kills it (it is our child) should it still run ``ChildTiming.kill_after_s`` seconds past it. A probe a child
never printed a record for gets an ``error`` record saying how the child ended. Records come back
with the run's own names: ``cuda:0`` of a child is the GPU's ``cuda:`` number here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from .catalog import CATALOG, PAUSE
from .context import ProbeContext
from .hostfacts import SYSFS_ROOT, count_pci_gpus
from .nvml import NvmlUnavailable, open_nvml
from .pauseroom import GPU_PROBES, GpuRoom, RoomUnreadable, child_cap_mib, read_rooms, refusal
from .records import Record, failed, skipped

# The GPU probes each GPU's child runs, in run order (catalog.json); p2p runs in a child of its own, last.
PER_GPU_PROBES = PAUSE.per_gpu_probes
# The metric a probe's records are named by when it has none of its own (its headline, catalog.json).
PROBE_METRICS = {name: CATALOG.metrics[name] for name in GPU_PROBES}
P2P_METRIC = PROBE_METRICS["p2p"]


class ProbeHead(Protocol):
    """What this module needs of a probe: its name and headline metric (probes/runner.py ProbeSpec)."""

    @property
    def name(self) -> str: ...

    @property
    def metric(self) -> str: ...


class LineWriter(Protocol):
    """Where records go: whole records, or lines a child printed (relayed as they are); written
    to from several threads at once (the children of a batch)."""

    def write(self, record: Record) -> None: ...

    def write_line(self, line: str) -> None: ...


RunInProcess = Callable[[Sequence[Any], ProbeContext, Any], None]


@dataclass(frozen=True)
class ChildTiming:
    """How the children share the run's deadline (seconds): ``margin_s`` is kept back from the
    shares (a child's watchdog ends it 5 s past its share, and this process kills it
    ``kill_after_s`` past, still before its own deadline); a share under ``min_share_s`` is not
    worth a child's start-up (Python, torch, a CUDA context). The defaults of ``margin_s`` and
    ``min_share_s`` are catalog.json's."""

    margin_s: float = PAUSE.child_margin_s
    kill_after_s: float = 10.0
    min_share_s: float = PAUSE.min_share_s


@dataclass(frozen=True)
class Child:
    """One child process: the probes it runs, the GPUs it sees (its ``cuda:i`` is ``rooms[i]``),
    and its ``--max-gpu-mem`` (MiB)."""

    names: tuple[str, ...]
    rooms: tuple[GpuRoom, ...]
    cap_mib: int

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(room.gpu_uuid for room in self.rooms)

    def relabel(self, data: dict[str, Any]) -> dict[str, Any]:
        """A record the child printed, with this run's GPU names and the pause figures in ``details``."""
        labels = {f"cuda:{index}": room.label for index, room in enumerate(self.rooms)}
        single = self.rooms[0] if len(self.rooms) == 1 else None
        device = data.get("device")
        if device in labels:
            data["device"] = labels[device]
        elif device == "host" and single is not None:
            data["device"], data["gpu_uuid"] = single.label, data.get("gpu_uuid") or single.gpu_uuid
        params = data.get("params")
        if isinstance(params, dict):
            for key in ("src", "dst"):
                if params.get(key) in labels:
                    params[key] = labels[params[key]]
        figures: dict[str, Any] = {"max_gpu_mem_mib": self.cap_mib, "gpus_visible": len(self.rooms)}
        if single is not None:
            figures.update(single.to_details())
        details = data.get("details") if isinstance(data.get("details"), dict) else {}
        data["details"] = {**details, "pause": figures}
        return data


# A step of a paused run: a record written at once (a refusal), or a child to run.
Step = Record | Child


def plan_pause(rooms: Sequence[GpuRoom], names: Sequence[str], dtype: str, user_cap_mib: int | None) -> list[Step]:
    """What a paused run does on the GPUs of ``rooms`` (in ``cuda:`` order) for the probes ``names``.

    Per GPU: a ``skipped`` record for each of its probes that may not run there, then a child
    for those that may; then, for p2p, a ``skipped`` record per GPU without room for it and one
    child over the GPUs with room (when at least two have it).
    """
    steps: list[Step] = []
    per_gpu = [name for name in PER_GPU_PROBES if name in names]
    for room in rooms if per_gpu else ():
        fitting = []
        for name in per_gpu:
            reason = refusal(room, name, dtype)
            if reason is None:
                fitting.append(name)
            else:
                steps.append(_refused(name, PROBE_METRICS[name], room, reason))
        if fitting:
            steps.append(Child(tuple(fitting), (room,), child_cap_mib(room, user_cap_mib)))
    if "p2p" in names:
        steps += _p2p_steps(rooms, dtype, user_cap_mib)
    return steps


def _p2p_steps(rooms: Sequence[GpuRoom], dtype: str, user_cap_mib: int | None) -> list[Step]:
    if len(rooms) < 2:
        return [skipped("p2p", "host", P2P_METRIC,
                        f"needs at least 2 GPUs; this machine has {len(rooms)} visible to torch")]
    steps: list[Step] = []
    fitting = []
    for room in rooms:
        reason = refusal(room, "p2p", dtype)
        if reason is None:
            fitting.append(room)
        else:
            steps.append(_refused("p2p", P2P_METRIC, room, f"{reason}; its pairs are not measured"))
    if len(fitting) >= 2:
        steps.append(Child(("p2p",), tuple(fitting), min(child_cap_mib(room, user_cap_mib) for room in fitting)))
    return steps


def _refused(probe: str, metric: str, room: GpuRoom, reason: str) -> Record:
    return skipped(probe, room.label, metric, reason, gpu_uuid=room.gpu_uuid, details={"pause": room.to_details()})


def run_paused(specs: Sequence[ProbeHead], ctx: ProbeContext, writer: LineWriter, run_in_process: RunInProcess, *,
               nvml_module: ModuleType | None = None, child_command: Sequence[str] | None = None,
               cuda_visible: str | None = None, sysfs_root: str = SYSFS_ROOT,
               timing: ChildTiming = ChildTiming()) -> None:
    """Run ``specs`` (probes/runner.py ProbeSpecs, in run order) in pause mode (module docstring).

    ``run_in_process(specs, ctx, writer)`` runs probes in this process (runner.run_probes);
    ``nvml_module`` replaces pynvml, ``child_command`` the ``python -m probes`` of a child, and
    ``sysfs_root`` /sys (test doubles); ``cuda_visible`` is this run's CUDA_VISIBLE_DEVICES;
    ``timing`` how the children share the deadline.
    """
    gpu_specs = [spec for spec in specs if spec.name in GPU_PROBES]
    rooms = _read_rooms(nvml_module, cuda_visible)  # before facts imports torch: no context of ours yet
    run_in_process([spec for spec in specs if spec.name not in GPU_PROBES], ctx, writer)
    if not gpu_specs:
        return
    if isinstance(rooms, str):
        if count_pci_gpus(sysfs_root) == 0:
            run_in_process(gpu_specs, ctx, writer)  # no GPU on this node: nothing of a job's to keep clear of
            return
        for spec in gpu_specs:
            writer.write(skipped(spec.name, "host", spec.metric, rooms))
        return
    if not rooms:
        run_in_process(gpu_specs, ctx, writer)  # torch sees no GPU: the probes run on the CPU, or skip
        return
    steps = plan_pause(rooms, [spec.name for spec in gpu_specs], ctx.dtype, ctx.max_gpu_mem_mib)
    command = list(child_command) if child_command is not None else [sys.executable, "-m", "probes"]
    for step in steps:
        if isinstance(step, Record):
            writer.write(step)
    batches = child_batches([step for step in steps if isinstance(step, Child)], ctx.sequential)
    for left, batch in zip(range(len(batches), 0, -1), batches, strict=True):
        share_s = child_share_s(ctx.deadline.left_s(), left, timing)
        with ThreadPoolExecutor(max_workers=len(batch), thread_name_prefix="pause-child") as workers:
            for done in [workers.submit(run_child, child, ctx, writer, command, share_s, timing) for child in batch]:
                done.result()


def child_batches(children: Sequence[Child], sequential: bool) -> list[list[Child]]:
    """The children in the batches that run at once: every GPU's child, then p2p's; with
    ``sequential`` each child alone."""
    if sequential:
        return [[child] for child in children]
    per_gpu = [child for child in children if "p2p" not in child.names]
    pairs = [child for child in children if "p2p" in child.names]
    return [batch for batch in (per_gpu, pairs) if batch]


def _read_rooms(nvml_module: ModuleType | None, cuda_visible: str | None) -> list[GpuRoom] | str:
    """Every GPU's room, or why NVML cannot say."""
    try:
        with open_nvml(nvml_module) as nvml:
            return read_rooms(nvml, cuda_visible)
    except (NvmlUnavailable, RoomUnreadable) as error:
        return (f"pause: each GPU's free memory is read through NVML before any CUDA context is made, and "
                f"that failed: {error}; no GPU probe ran")


def child_share_s(left_s: float, batches_left: int, timing: ChildTiming = ChildTiming()) -> float:
    """A batch's share of the ``left_s`` seconds before the deadline: equal among those left, less the margin."""
    return max(0.0, left_s - timing.margin_s) / max(1, batches_left)


def child_argv(command: Sequence[str], child: Child, ctx: ProbeContext, share_s: float) -> list[str]:
    """The child's command line: its probes, one GPU at a time, its share as deadline, its cap."""
    argv = [*command, *child.names, "--duration", f"{ctx.duration_s:g}", "--dtype", ctx.dtype, "--sequential",
            "--deadline", f"{share_s:.3f}", "--max-gpu-mem", str(child.cap_mib)]
    return argv + (["--kernel-dir", ctx.kernel_dir] if ctx.kernel_dir else [])


def run_child(child: Child, ctx: ProbeContext, writer: LineWriter, command: Sequence[str], share_s: float,
              timing: ChildTiming = ChildTiming(), environ: Mapping[str, str] | None = None) -> None:
    """Run ``child`` under its share of the deadline (``share_s`` seconds) and relay its records
    (renamed) to ``writer`` (thread-safe: children of a batch run at once)."""
    where = ", ".join(room.label for room in child.rooms)
    if share_s < timing.min_share_s:
        for name in child.names:
            writer.write(_child_record(skipped, child, name, f"deadline: the run's overall deadline left no time "
                                       f"for the pause child process measuring {where}"))
        return
    env = {**(os.environ if environ is None else environ), "CUDA_VISIBLE_DEVICES": child.cuda_visible_devices,
           "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    limit_s = share_s + timing.kill_after_s
    try:
        done = subprocess.run(child_argv(command, child, ctx, share_s), env=env, cwd=_bundle_root(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, timeout=limit_s, check=False)
        output, ended = done.stdout, f"exit status {done.returncode}"
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout or b""
        ended = f"killed {limit_s:.1f} s after it started, past its {share_s:.1f} s share of the deadline"
    except OSError as error:
        output, ended = b"", f"could not start: {error}"
    printed = relay(output, child, writer)
    for name in child.names:
        if name not in printed:
            writer.write(_child_record(failed, child, name, f"pause: the child process measuring {where} "
                                       f"ended ({ended}) before it printed a record of this probe"))


def relay(output: bytes | str, child: Child, writer: LineWriter) -> set[str]:
    """Write every line of a child's ``output``: records renamed (Child.relabel), other lines as they are.
    Returns the probes it printed a record of."""
    text = output.decode("utf-8", errors="replace") if isinstance(output, bytes) else output
    printed: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("probe"), str):
            printed.add(data["probe"])
            writer.write_line(json.dumps(child.relabel(data), allow_nan=False))
        else:
            writer.write_line(line)  # a stray line: the controller counts and keeps it
    return printed


def _child_record(make: Callable[..., Record], child: Child, name: str, reason: str) -> Record:
    single = child.rooms[0] if len(child.rooms) == 1 else None
    device = single.label if single is not None else "host"
    return make(name, device, PROBE_METRICS[name], reason, gpu_uuid=single.gpu_uuid if single else None)


def _bundle_root() -> str:
    """The folder that holds probes/, where ``python -m probes`` finds it."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
