"""Draining the nodes a sweep failed, and returning to service only those gpudiag drained and that
passed again the checks that drained them.

``drain_commands`` turns the findings that take a node out of service (``fail``, with the action
``drain``, ``reset_gpu`` or ``reboot``) into ``scontrol update NodeName=<set> State=DRAIN
Reason="gpudiag: <checks>: ... gpudiag-drain=<time>-<tail>"`` commands, one per distinct reason
with its nodes folded (the reason and its drain marker: gpudiag.slurm.reason); ``drain`` runs
them (or only says them). ``check_start`` asks Slurm for the check's nodes as the check begins;
``undrain`` resumes a node only when Slurm has it drained by gpudiag's own drain, the same drain it
showed at the check's start, and this run made and passed each check the reason names
(gpudiag.slurm.resume): a node someone drained by hand, one drained while the check ran, or one
the run could not see, stays drained and is named with why. Every scontrol runs within a deadline
and is ended at it; a failing or hung scontrol is reported in the outcome, never raised.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..analysis.actions import SERVICE_VERBS
from ..analysis.fleet import NOT_EXCLUDING
from ..findings import Finding, Severity
from ..hosts import fold_hosts
from .commands import NoTimeLeft, SlurmCommandError, run_slurm, time_left_s
from .nodes import query_nodes
from .reason import MAX_REASON_CHARS, REASON_PREFIX, drain_reason, finding_words, mark_reason
from .resume import CheckStart, HostChecks, resume_problem

__all__ = ["MAX_REASON_CHARS", "REASON_PREFIX", "CheckStart", "CommandOutcome", "UndrainResult", "check_start",
           "drain", "drain_commands", "drain_findings_by_host", "drain_reason", "fail_findings_by_host",
           "finding_words", "undrain"]

# A Slurm node name (what a finding's host must be for scontrol to take it).
_NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class CommandOutcome:
    """One scontrol command: its argv, whether it ran, and its error (None: it ran and
    succeeded, or was only to be said; a command not run for want of time has its error)."""

    argv: tuple[str, ...]
    ran: bool
    error: str | None = None

    @property
    def command(self) -> str:
        """The command as a shell would take it (what a dry run prints)."""
        return shlex.join(self.argv)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def nodes(self) -> str:
        """The node set the command names (``n[1,3]``), "" when it names none."""
        return next((word[len("NodeName="):] for word in self.argv if word.startswith("NodeName=")), "")


@dataclass(frozen=True)
class UndrainResult:
    """What ``undrain`` did: the nodes it returned to service (or would, when not run), the
    drained nodes it left alone and why, its commands, and the error of the node query (then
    nothing was resumed)."""

    resumed: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]
    commands: tuple[CommandOutcome, ...]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(command.ok for command in self.commands)


def fail_findings_by_host(findings: Iterable[Finding | Mapping[str, Any]]
                          ) -> dict[str, list[Finding | Mapping[str, Any]]]:
    """The ``fail`` findings that name one host (not fleet-wide ones), per host in order of first
    appearance: the hosts a pre-flight calls FAIL."""
    by_host: dict[str, list[Finding | Mapping[str, Any]]] = {}
    for finding in findings:
        fields = _fields(finding)
        if fields.get("severity") == Severity.FAIL and fields.get("kind") not in NOT_EXCLUDING and fields.get("host"):
            by_host.setdefault(str(fields["host"]), []).append(finding)
    return by_host


def drain_findings_by_host(findings: Iterable[Finding | Mapping[str, Any]]
                           ) -> dict[str, list[Finding | Mapping[str, Any]]]:
    """Of those, the findings whose action takes the node out of service (``drain``,
    ``reset_gpu``, ``reboot``): what drains a node. A ``fail`` that asks to ``inspect`` (a slow
    link that cannot say which end is at fault, a power cap) drains neither end."""
    by_host = {host: [f for f in mine if _fields(f).get("action") in SERVICE_VERBS]
               for host, mine in fail_findings_by_host(findings).items()}
    return {host: mine for host, mine in by_host.items() if mine}


def drain_commands(findings: Iterable[Finding | Mapping[str, Any]], scontrol: str = "scontrol",
                   now: datetime | None = None) -> list[list[str]]:
    """``scontrol update NodeName=<set> State=DRAIN Reason=<reason>`` for the hosts of the findings
    that take a node out of service (drain_findings_by_host), one command per distinct reason with
    its nodes folded, in a stable order; each reason ends with gpudiag's drain marker, written
    ``now`` (default: the present). Other findings, and hosts that are no Slurm node name
    (``h:22``), drain nothing. Each Reason is one argv element: no shell ever reads it."""
    by_node = {host: mine for host, mine in drain_findings_by_host(findings).items() if _NODE_NAME.fullmatch(host)}
    by_reason: dict[str, list[str]] = {}
    for node, host_findings in by_node.items():
        by_reason.setdefault(drain_reason(host_findings), []).append(node)
    commands = sorted(([scontrol, "update", f"NodeName={fold_hosts(nodes)}", "State=DRAIN", f"Reason={reason}"]
                       for reason, nodes in by_reason.items()), key=lambda argv: (argv[2], argv[4]))
    for argv in commands:
        argv[4] = mark_reason(argv[4], now)
    return commands


def drain(commands: Iterable[Sequence[str]], run: bool = True, deadline: float | None = None) -> list[CommandOutcome]:
    """Run each command (``run``), or only return it to be printed (not ``run``). Each must end
    by ``deadline`` (time.monotonic(); None: a minute each) or is ended; a command that fails is
    that outcome's error, and the others still run."""
    return [_run(tuple(argv), deadline) if run else CommandOutcome(tuple(argv), ran=False) for argv in commands]


def check_start(names: Iterable[str], scontrol: str = "scontrol", deadline: float | None = None) -> CheckStart:
    """Slurm's view of the nodes ``names`` (those that are node names) as a check begins, before
    its first measurement: what ``undrain`` holds each drain against. A failed or hung query is
    the result's error (then ``undrain`` resumes nothing); it ends by ``deadline``
    (time.monotonic(); None: a minute)."""
    wanted = sorted(name for name in set(names) if _NODE_NAME.fullmatch(name))
    try:
        return CheckStart(query_nodes(wanted, scontrol=scontrol, timeout_s=time_left_s(deadline)))
    except SlurmCommandError as error:
        return CheckStart({}, error=str(error))


def undrain(checked: Mapping[str, HostChecks], start: CheckStart, run: bool = True, scontrol: str = "scontrol",
            deadline: float | None = None) -> UndrainResult:
    """Return to service the nodes of ``checked`` (what this run says about each host it was
    given) that Slurm has drained by gpudiag's own drain, shown alike at ``start`` (check_start,
    asked before the run measured anything), and that passed again each check the reason names
    (gpudiag.slurm.resume); every other drained node is kept, with why. Without ``run`` the
    command is only returned. The query and the resume end by ``deadline`` (time.monotonic();
    None: a minute each). A failed or hung node query or scontrol command is the result's error,
    as is one at the start (then Slurm is not asked again)."""
    if start.error is not None:  # no drain can be shown to predate the run: none is resumed
        return UndrainResult((), (), (), error=f"at this check's start: {start.error}")
    names = sorted(name for name in checked if _NODE_NAME.fullmatch(name))
    try:
        nodes = query_nodes(names, scontrol=scontrol, timeout_s=time_left_s(deadline))
    except SlurmCommandError as error:
        return UndrainResult((), (), (), error=str(error))
    drained = [name for name in names if name in nodes and nodes[name].drained]
    problems = {name: resume_problem(nodes[name], checked.get(name), start) for name in drained}
    ours = [name for name in drained if problems[name] is None]
    kept = tuple((name, problem) for name, problem in problems.items() if problem is not None)
    if not ours:
        return UndrainResult((), kept, ())
    argv = (scontrol, "update", f"NodeName={fold_hosts(ours)}", "State=RESUME")
    outcome = _run(argv, deadline) if run else CommandOutcome(argv, ran=False)
    return UndrainResult(tuple(ours) if outcome.ok else (), kept, (outcome,))


def _run(argv: tuple[str, ...], deadline: float | None) -> CommandOutcome:
    try:
        timeout_s = time_left_s(deadline)
    except NoTimeLeft as error:
        return CommandOutcome(argv, ran=False, error=str(error))
    try:
        run_slurm(argv, timeout_s=timeout_s)
    except SlurmCommandError as error:
        return CommandOutcome(argv, ran=True, error=str(error))
    return CommandOutcome(argv, ran=True)


def _fields(finding: Finding | Mapping[str, Any]) -> Mapping[str, Any]:
    return finding.to_dict() if isinstance(finding, Finding) else finding
