"""What ``gpudiag preflight`` prints: the plan first, then the report, what was drained (or would
be), and one last summary line for a Slurm log. Plain lines everywhere (a prolog's output goes
to slurmd's log); the rich per-host table only on a terminal.

The summary line is the pre-flight's verdict for a hook (examples/slurm/prolog.sh reads it): one
line of safe characters (gpudiag.slurm.reason.safe_line), whatever a node's error text held, that
starts ``gpudiag preflight: <outcome>`` and says which nodes were drained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..exitcodes import ExitCode
from ..findings import Severity
from ..hosts import fold_hosts
from ..report.folding import fold_findings
from ..report.phrasing import finding_location
from ..run.fanout import NOT_CHECKED, UNSETTLED_KINDS
from ..slurm.drain import fail_findings_by_host, finding_words
from ..slurm.reason import safe_line, safe_text
from .run import PreflightRun

PREFIX = "gpudiag preflight"
# Reasons named in the summary line (the rest are counted).
REASONS_NAMED = 2
# Characters of each reason, and of each node set, kept in the summary line.
REASON_CHARS = 160
HOSTS_CHARS = 120
# The summary line is at most this long.
SUMMARY_CHARS = 1000


def action_lines(run: PreflightRun) -> list[str]:
    """What was drained, would be drained, returned to service or left drained, one line each."""
    lines = []
    for outcome in run.drains:
        if not outcome.ran and outcome.ok:
            lines.append(f"would run: {outcome.command}")
        elif outcome.ok:
            lines.append(f"drained: {outcome.command}")
        else:
            lines.append(f"drain failed: {outcome.command}: {safe_text(outcome.error)}")
    undrained = run.undrained
    if undrained is not None:
        if undrained.error is not None:
            lines.append(f"undrain: nothing returned to service: {safe_text(undrained.error)}")
        for command in undrained.commands:
            if command.ok:
                lines.append(f"returned to service: {command.command}")
            else:
                lines.append(f"undrain failed: {command.command}: {safe_text(command.error)}")
        lines += [f"left drained: {node}: {why}" for node, why in undrained.kept]
    return lines


def summary_line(run: PreflightRun, output_errors: Sequence[str] = ()) -> str:
    """One line for a Slurm log: the outcome, the nodes it concerns and why, the time taken, what
    was drained or returned to service, and any output that could not be written.

    ``gpudiag preflight: FAIL n2, exit 1, in 41 s of a 60 s budget: n2 slow_gpu GPU 3 gemm.tflops -30%. Drained n2``
    ``gpudiag preflight: healthy n[1-4], exit 0, in 12 s of a 120 s budget``
    ``gpudiag preflight: inconclusive, exit 3, in 55 s of a 60 s budget: n3 unchecked: .... Nothing drained``"""
    document = run.result.summary()
    code = run.exit_code
    timing = f"in {run.elapsed_s:.0f} s of a {run.plan.budget_s:g} s budget"
    if code == ExitCode.OK:
        hosts = [host["host"] for host in document["hosts"]]
        warnings = [_finding_text(f) + (" not re-tested" if not f.get("confirmed") else "")
                    for f in document["findings"] if f["severity"] == Severity.WARN]
        watch = f", {len(warnings)} to watch: {_reasons(warnings)}" if warnings else ""
        parts = [f"{PREFIX}: healthy {_hosts(hosts)}, exit 0, {timing}{watch}"]
    elif code == ExitCode.INTERRUPTED:
        parts = [f"{PREFIX}: interrupted, exit 130, {timing}", "Nothing drained"]
    elif code == ExitCode.FAIL:
        # a failing pair names both its ends (neither is blamed alone)
        failed = [name for host, mine in fail_findings_by_host(document["findings"]).items()
                  for name in (host, *(str(f["peer"]) for f in mine if f.get("peer")))]
        reasons = [_finding_text(f) for f in document["findings"] if f["severity"] == Severity.FAIL]
        parts = [f"{PREFIX}: FAIL {_hosts(failed) or 'no single node (a cause they share)'}, exit 1, {timing}: "
                 f"{_reasons(reasons)}", _drain_state(run)]
    else:
        unchecked = fold_findings(f for f in document["findings"] if f["kind"] in NOT_CHECKED
                                  or (f["kind"] in UNSETTLED_KINDS and not f.get("confirmed")))
        reasons = [f"{_where(f)} {f['kind']}: {f['evidence']}" for f in unchecked]  # alike hosts folded
        parts = [f"{PREFIX}: inconclusive, exit {int(code)}, {timing}: {_reasons(reasons)}", "Nothing drained"]
    parts += _undrain_state(run)
    parts += [f"Not written: {error}" for error in output_errors]
    return safe_line(". ".join(parts), SUMMARY_CHARS)


def _finding_text(finding: Mapping[str, Any]) -> str:
    return " ".join([_where(finding), *finding_words(finding)])


def _where(finding: Mapping[str, Any]) -> str:
    """The finding's host, or where a finding of no host is (the fabric's part, the network)."""
    return str(finding["host"]) if finding.get("host") is not None else finding_location(finding)


def _hosts(hosts: Sequence[str]) -> str:
    return safe_line(fold_hosts(hosts), HOSTS_CHARS)


def _reasons(reasons: list[str]) -> str:
    if not reasons:
        return "no reason recorded"
    more = len(reasons) - REASONS_NAMED
    shown = [safe_text(text, REASON_CHARS) for text in reasons[:REASONS_NAMED]]
    return " / ".join(shown) + (f" / and {more} more" if more > 0 else "")


def _drain_state(run: PreflightRun) -> str:
    if not run.drains:
        return "Nothing drained: no fail finding asks for it, only for inspection"
    if not run.drain_asked:
        would = [outcome.nodes for outcome in run.drains]
        return f"Not drained without --drain: {_hosts(would)}"
    drained = _hosts(run.drained) if run.drained else ""
    failed = [outcome for outcome in run.drains if not outcome.ok]
    state = f"Drained {drained}" if drained else "Nothing drained"
    if failed:
        state += f", drain failed for {_hosts([outcome.nodes for outcome in failed])}: {safe_text(failed[0].error)}"
    return state


def _undrain_state(run: PreflightRun) -> list[str]:
    undrained = run.undrained
    if undrained is None:
        return []
    parts = []
    if undrained.resumed:
        parts.append(f"Returned to service {_hosts(undrained.resumed)}")
    if undrained.kept:
        parts.append(f"Left drained {_hosts([node for node, _ in undrained.kept])}")
    if undrained.error is not None:
        parts.append(f"Undrain failed: {safe_text(undrained.error, REASON_CHARS)}")
    failed = [command for command in undrained.commands if not command.ok]
    if failed:
        parts.append(f"Resume failed for {_hosts([command.nodes for command in failed])}: {safe_text(failed[0].error)}")
    return parts
