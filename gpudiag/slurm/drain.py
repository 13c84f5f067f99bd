"""Draining the nodes a sweep failed, and returning to service only those gpudiag drained.

``drain_commands`` turns ``fail`` findings into ``scontrol update NodeName=<set> State=DRAIN
Reason="gpudiag: ..."`` commands, one per distinct reason with its nodes folded; ``drain`` runs
them (or only says them). ``undrain`` resumes a node only when Slurm has it drained with a
reason that starts ``gpudiag:`` and it is among the nodes that now pass: a node someone drained
by hand stays drained. A failing scontrol is reported in the outcome, never raised.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.fleet import NOT_EXCLUDING
from ..findings import FAIL, Finding
from ..hosts import fold_hosts
from .commands import SlurmCommandError, run_slurm
from .nodes import query_nodes

REASON_PREFIX = "gpudiag:"
# Long enough for the kind, GPU, metric, deficit and the start of the evidence; Slurm keeps
# reasons whole, but sinfo -R and squeue columns are read by people.
MAX_REASON_CHARS = 120
# A Slurm node name (what a finding's host must be for scontrol to take it).
_NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_UNSAFE = re.compile(r"[^\x20-\x7e]")


@dataclass(frozen=True)
class CommandOutcome:
    """One scontrol command: its argv, whether it ran, and its error (None: it ran and
    succeeded, or was not run)."""

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


def finding_words(finding: Mapping[str, Any]) -> list[str]:
    """A finding (its dict) in a few words: ``slow_gpu GPU 3 gemm.tflops -18%`` (its kind, GPU,
    peer, metric and deficit, those it has): drain reasons and one-line summaries."""
    words = [str(finding.get("kind") or "fail")]
    if finding.get("gpu") is not None:
        words.append(f"GPU {finding['gpu']}")
    if finding.get("peer"):
        words.append(f"with {finding['peer']}")
    if finding.get("metric"):
        words.append(str(finding["metric"]))
    if isinstance(finding.get("deficit_pct"), (int, float)):
        words.append(f"-{finding['deficit_pct']:.0f}%")
    return words


def drain_reason(findings: Sequence[Finding | Mapping[str, Any]]) -> str:
    """The drain reason for one node's ``fail`` findings (the first, the costliest, is named; the
    rest counted): ``gpudiag: slow_gpu GPU 3 gemm.tflops -18%: HW thermal slowdown ...``,
    printable ASCII without double quotes, at most MAX_REASON_CHARS characters."""
    first = _fields(findings[0])
    text = " ".join([REASON_PREFIX, *finding_words(first)])
    if first.get("evidence"):
        text += f": {first['evidence']}"
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    text = " ".join(_UNSAFE.sub(" ", text).replace('"', "'").split())
    room = MAX_REASON_CHARS - len(more)
    if len(text) > room:
        text = text[:room - 3].rstrip() + "..."
    return text + more


def fail_findings_by_host(findings: Iterable[Finding | Mapping[str, Any]]
                          ) -> dict[str, list[Finding | Mapping[str, Any]]]:
    """The ``fail`` findings that name one host (not fleet-wide ones), per host in order of first
    appearance: what drains a node."""
    by_host: dict[str, list[Finding | Mapping[str, Any]]] = {}
    for finding in findings:
        fields = _fields(finding)
        if fields.get("severity") == FAIL and fields.get("kind") not in NOT_EXCLUDING and fields.get("host"):
            by_host.setdefault(str(fields["host"]), []).append(finding)
    return by_host


def drain_commands(findings: Iterable[Finding | Mapping[str, Any]], scontrol: str = "scontrol") -> list[list[str]]:
    """``scontrol update NodeName=<set> State=DRAIN Reason=<reason>`` for the hosts of ``fail``
    findings (not fleet-wide ones), one command per distinct reason with its nodes folded, in a
    stable order. Findings of other severities, and hosts that are no Slurm node name (``h:22``),
    drain nothing. Each Reason is one argv element: no shell ever reads it."""
    by_node = {host: mine for host, mine in fail_findings_by_host(findings).items() if _NODE_NAME.fullmatch(host)}
    by_reason: dict[str, list[str]] = {}
    for node, node_findings in by_node.items():
        by_reason.setdefault(drain_reason(node_findings), []).append(node)
    commands = [[scontrol, "update", f"NodeName={fold_hosts(nodes)}", "State=DRAIN", f"Reason={reason}"]
                for reason, nodes in by_reason.items()]
    return sorted(commands, key=lambda argv: (argv[2], argv[4]))


def drain(commands: Iterable[Sequence[str]], run: bool = True) -> list[CommandOutcome]:
    """Run each command (``run``), or only return it to be printed (not ``run``). A command that
    fails is that outcome's error; the others still run."""
    return [_run(tuple(argv)) if run else CommandOutcome(tuple(argv), ran=False) for argv in commands]


def undrain(passed: Iterable[str], run: bool = True, scontrol: str = "scontrol") -> UndrainResult:
    """Return to service the nodes of ``passed`` (nodes that now pass) that Slurm has drained
    with a reason starting ``gpudiag:``; a node drained for any other reason, or not drained,
    is left as it is. Without ``run`` the command is only returned. A failed node query or
    scontrol command is the result's error."""
    names = sorted({name for name in passed if _NODE_NAME.fullmatch(name)})
    try:
        nodes = query_nodes(names, scontrol=scontrol)
    except SlurmCommandError as error:
        return UndrainResult((), (), (), error=str(error))
    ours = [name for name in names if name in nodes and nodes[name].drained
            and (nodes[name].reason or "").startswith(REASON_PREFIX)]
    kept = tuple((name, f'drained by someone else (reason: "{nodes[name].reason or ""}"): left drained')
                 for name in names if name in nodes and nodes[name].drained and name not in ours)
    if not ours:
        return UndrainResult((), kept, ())
    argv = (scontrol, "update", f"NodeName={fold_hosts(ours)}", "State=RESUME")
    outcome = _run(argv) if run else CommandOutcome(argv, ran=False)
    return UndrainResult(tuple(ours) if outcome.ok else (), kept, (outcome,))


def _run(argv: tuple[str, ...]) -> CommandOutcome:
    try:
        run_slurm(argv)
    except SlurmCommandError as error:
        return CommandOutcome(argv, ran=True, error=str(error))
    return CommandOutcome(argv, ran=True)


def _fields(finding: Finding | Mapping[str, Any]) -> Mapping[str, Any]:
    return finding.to_dict() if isinstance(finding, Finding) else finding
