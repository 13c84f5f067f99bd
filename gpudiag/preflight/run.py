"""Running a pre-flight: plan it from the budget, run it as a sweep (gpudiag.run.sweep.run_sweep) under
that budget, then drain the nodes of ``fail`` findings that take a node out of service, and
return to service the nodes gpudiag drained that passed again the checks that drained them
(gpudiag.slurm.resume). Every scontrol call runs within what is left of the budget (at least
SCONTROL_FLOOR_S for them all) and is ended at its deadline.

A check holds each real node's lock for its whole length (gpudiag.slurm.nodelock): where another
check holds one, this one probes nothing, drains and resumes nothing, and is inconclusive (exit
3: the node could not be checked now). With ``--undrain`` it asks Slurm for its nodes first, so
that it resumes only drains that predate its measurements.

Three outcomes, never confused: healthy (exit 0), a ``fail`` finding (1: the only outcome that
drains), inconclusive (3: something could not be checked within the budget or at all; 4: gpudiag
itself failed, raised before anything is drained). An interrupted pre-flight (130) drains nothing.
"""

from __future__ import annotations

import dataclasses
import io
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

from ..errors import InputError
from ..exitcodes import ExitCode
from ..fabric.readers import chosen_topology
from ..fabric.schedule import fabric_screen_rounds
from ..findings import Action, Basis, Finding, Kind, Severity
from ..hosts import fold_hosts, load_hosts
from ..links.schedule import FULL
from ..run.fanout import SweepOptions, SweepResult, new_sweep_id
from ..run.hostprobe import ProbeOptions
from ..run.request import Judging, LinkOptions, Reach, SweepRequest
from ..run.runtime import Runtime
from ..run.sweep import run_sweep
from ..slurm.drain import CommandOutcome, UndrainResult, check_start, drain, drain_commands, undrain
from ..slurm.nodelock import Busy, NodeLockError, NodeLocks, lock_nodes
from ..slurm.resume import CheckStart
from .checked import host_checks
from .planner import DEFAULT_PROBES, PreflightPlan, plan_preflight

DEFAULT_BUDGET_S = 120.0
# Seconds the scontrol calls after the run (drain, node query, resume) get together even when the
# budget is spent: a hung scontrol costs at most this much past the budget.
SCONTROL_FLOOR_S = 5.0
# Seconds the node query at a --undrain check's start may take (slurmctld answers in milliseconds):
# a controller that does not answer costs the check no more than this.
START_QUERY_S = 5.0
# Hosts probed at once: every node of a job, up to the sweep's largest fan-out.
MAX_FANOUT = 4096
MIN_FANOUT = 64


@dataclass(frozen=True)
class PreflightRequest:
    """One ``gpudiag preflight``: the hosts (``hosts_argument``, or the nodes of the reach's
    stand-in fleet), the ``budget_s`` in seconds, how the nodes are reached, the results kept
    and judged and the pair tests run (the sweep's own ``Reach``, ``Judging`` and
    ``LinkOptions``: its ``mode`` as a sweep's --links, auto and screen screen, full tests every
    pair), which probes to plan (as a sweep's ``--probes``), what the probes may use, and
    whether to ``drain`` and ``undrain`` through ``scontrol``, and whether to ask Slurm for the
    GPUs each node is configured with (``slurm_gpus``: in a job or a prolog; a node that sees
    fewer is ``missing_gpu``, in a 1-node job with no stored sweep too). The budget plans the rest
    (gpudiag.preflight.planner): the probes' load and deadline, whether the link tests run and
    how long each pair is tested."""

    hosts_argument: str | None
    budget_s: float = DEFAULT_BUDGET_S
    reach: Reach = Reach()
    judging: Judging = Judging()
    links: LinkOptions = LinkOptions()
    python: str = "python3"
    dtype: str = "bf16"
    max_gpu_mem_mib: int | None = None
    probes: tuple[str, ...] = DEFAULT_PROBES  # --probes: the node probes the budget plans
    deadline_s: float | None = None  # --deadline: the bundle's deadline on a node at most this (else planned)
    drain: bool = False
    undrain: bool = False
    scontrol: str = "scontrol"
    slurm_gpus: bool = False


@dataclass(frozen=True)
class PreflightRun:
    """What a pre-flight did: its ``plan``, the sweep ``result``, the drain commands (run with
    ``--drain``, else only said), the undrain's result (None without ``--undrain``), and its
    ``elapsed_s`` seconds from the start."""

    plan: PreflightPlan
    result: SweepResult
    drains: tuple[CommandOutcome, ...]
    undrained: UndrainResult | None
    drain_asked: bool
    elapsed_s: float

    @property
    def exit_code(self) -> ExitCode:
        return self.result.exit_code

    @property
    def drained(self) -> tuple[str, ...]:
        """The node sets (``n[1,3]``) of the drain commands that ran and succeeded."""
        return tuple(outcome.nodes for outcome in self.drains if outcome.ran and outcome.ok)

    def to_dict(self) -> dict[str, Any]:
        """The pre-flight's own part of its JSON document (beside the sweep document's fields)."""
        undrained = None if self.undrained is None else {
            "resumed": list(self.undrained.resumed), "kept": [{"node": n, "why": w} for n, w in self.undrained.kept],
            "commands": [_command_dict(c) for c in self.undrained.commands], "error": self.undrained.error}
        return {"plan": self.plan.to_dict(), "elapsed_s": round(self.elapsed_s, 2),
                "drain": [_command_dict(c) for c in self.drains], "undrain": undrained}


def _command_dict(outcome: CommandOutcome) -> dict[str, Any]:
    return {"command": outcome.command, "ran": outcome.ran, "error": outcome.error}


def host_text(request: PreflightRequest, stdin: TextIO) -> tuple[list[str], TextIO]:
    """The pre-flight's hosts (their labels), and the stdin to read them from again (``-`` is
    read once here). Raises InputError for bad hosts or a bad fleet file."""
    text = stdin.read() if request.hosts_argument == "-" else ""
    if request.hosts_argument is not None:
        specs = load_hosts(request.hosts_argument, io.StringIO(text))
    elif request.reach.stand_in is not None:
        specs = request.reach.stand_in.host_specs()
    else:
        raise InputError("no hosts: give --hosts, run inside a Slurm job ($SLURM_JOB_NODELIST), or --simulate")
    return [spec.label for spec in specs], io.StringIO(text)


def check_request(request: PreflightRequest) -> None:
    """Raises InputError for options that do not go together."""
    if not request.probes:
        raise InputError("--probes names no probe; name at least one, e.g. --probes facts,telemetry,gemm")
    if request.reach.here and request.reach.stand_in is not None:
        raise InputError("--here probes this machine; --simulate a simulated fleet: give one of them")
    if request.reach.here and request.reach.launcher != "ssh":
        raise InputError("--here probes this machine directly: leave out --launcher")


def sweep_request(request: PreflightRequest, plan: PreflightPlan) -> SweepRequest:
    """The sweep that carries out ``plan``."""
    probe = ProbeOptions(names=plan.probes, duration_s=plan.duration_s, max_gpu_mem_mib=request.max_gpu_mem_mib,
                         dtype=request.dtype, deadline_s=plan.deadline_s, python=request.python)
    return SweepRequest(
        hosts_argument=request.hosts_argument,
        sweep=SweepOptions(probe=probe, fanout=min(MAX_FANOUT, max(MIN_FANOUT, plan.hosts)),
                           host_timeout_s=plan.host_timeout_s),
        # The re-test runs whenever asked and the first pass leaves the time it took (gpudiag.run.sweep):
        # the plan only says whether a window is kept for it.
        reach=request.reach, judging=request.judging,
        links=dataclasses.replace(request.links, mode=request.links.mode if plan.links else "none",
                                  pair=dataclasses.replace(request.links.pair, duration_s=plan.net_duration_s)),
        budget_s=request.budget_s)


def make_plan(request: PreflightRequest, hosts: Sequence[str]) -> PreflightPlan:
    """The plan for the ``hosts`` within the request's budget (the link screen and the re-test
    only where asked; the screen's rounds the topology's where there is one). Raises InputError
    for a budget too short for anything, or a topology that cannot be read."""
    links = request.links.mode != "none"
    stand_in = request.reach.stand_in
    topology = chosen_topology(request.links.topology, stand_in.topology() if stand_in is not None else None) \
        if links else None
    screen = len(fabric_screen_rounds(hosts, topology)) if topology is not None and len(hosts) >= 2 else None
    return plan_preflight(request.budget_s, len(hosts), links=links, retest=request.judging.retest,
                          probes=request.probes, full_links=request.links.mode == FULL, deadline_s=request.deadline_s,
                          link_screen_rounds=screen)


def run_preflight(request: PreflightRequest, plan: PreflightPlan, runtime: Runtime, started: float) -> PreflightRun:
    """Carry out ``plan`` in ``runtime`` (gpudiag.run.runtime) holding each node's lock, then
    drain (``fail`` findings only) and undrain as asked. ``started``: time.monotonic() when the
    command began (scontrol's calls are timed on it). A node another check holds (or a lock
    folder that cannot be used) makes the run refused: nothing probed, inconclusive. Raises
    InputError or StoreError before any node is touched when an input is bad."""
    names, stdin = host_text(request, runtime.stdin)
    runtime = dataclasses.replace(runtime, stdin=stdin)
    try:
        locks = _lock(request, names)
    except NodeLockError as error:
        return refused(request, plan, names, str(error), "fix the node lock folder, then check again", started)
    if isinstance(locks, Busy):
        return refused(request, plan, names, locks.describe(),
                       "two checks never run on one node at once: check again once the other has ended", started)
    with locks:
        deadline = scontrol_deadline(request.budget_s, started)
        # Slurm's view before the first measurement: a drain newer than it is never resumed by this
        # run; each node's configured GPUs
        start = check_start(names, request.scontrol, min(deadline, time.monotonic() + START_QUERY_S)) \
            if request.undrain or request.slurm_gpus else None
        result = _run_sweep(request, plan, runtime, start)
        interrupted = result.interrupted or runtime.gate.received
        deadline = scontrol_deadline(request.budget_s, started)
        commands = drain_commands(result.findings, scontrol=request.scontrol) if not interrupted else []
        drains = tuple(drain(commands, run=request.drain, deadline=deadline))
        undrained = None
        if start is not None and request.undrain and not interrupted:
            undrained = undrain(host_checks(result), start, run=True, scontrol=request.scontrol, deadline=deadline)
    return PreflightRun(plan, result, drains, undrained, request.drain, time.monotonic() - started)


def _run_sweep(request: PreflightRequest, plan: PreflightPlan, runtime: Runtime, start: CheckStart | None
               ) -> SweepResult:
    """The plan's sweep, each node judged with the GPUs Slurm is configured to give it where it
    was asked (``start``); a question Slurm did not answer is a warning, and the GPU counts are
    judged without it."""
    sweep = sweep_request(request, plan)
    asked = start is not None and request.slurm_gpus
    if asked and start.error is None:
        configured = {name: node.gpus for name, node in start.nodes.items() if node.gpus is not None}
        sweep = dataclasses.replace(sweep, judging=dataclasses.replace(sweep.judging, slurm_gpus=configured))
    result = run_sweep(sweep, runtime)
    if not asked or start.error is None:
        return result
    warning = (f"Slurm did not say how many GPUs each node is configured with ({start.error}): the GPU counts "
               "are judged without it")
    return dataclasses.replace(result, warnings=(*result.warnings, warning))


def _lock(request: PreflightRequest, names: Sequence[str]) -> NodeLocks | Busy:
    """The locks of the check's nodes (none for a simulated fleet: it loads no GPU), or the node
    another check holds. Raises NodeLockError."""
    if request.reach.stand_in is not None:
        return NodeLocks({}, None)
    return lock_nodes(names, holder=f"gpudiag preflight {fold_hosts(names)}")


def refused(request: PreflightRequest, plan: PreflightPlan, names: Sequence[str], why: str, fix: str,
            started: float) -> PreflightRun:
    """The pre-flight that did not run: no node probed, drained or resumed; one ``unchecked``
    finding names the hosts, ``why`` and the ``fix``, so it is inconclusive (exit 3), never a pass."""
    now = datetime.now(timezone.utc)
    finding = Finding(kind=Kind.UNCHECKED, severity=Severity.WARN, host=fold_hosts(names),
                      evidence=f"not probed, nothing loaded: {why}", action=Action.INSPECT,
                      action_detail=fix, basis=Basis.HOST_STATUS)
    result = SweepResult(new_sweep_id(now), now, now, (), (finding,))
    return PreflightRun(plan, result, (), None, request.drain, time.monotonic() - started)


def scontrol_deadline(budget_s: float, started: float) -> float:
    """The time.monotonic() by which every scontrol call of a pre-flight that began at
    ``started`` ends: the end of its budget, or SCONTROL_FLOOR_S from now where that is later."""
    return max(started + budget_s, time.monotonic() + SCONTROL_FLOOR_S)
