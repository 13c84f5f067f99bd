"""What ``gpudiag preflight`` prints: the plan first, then the report, what was drained (or would
be), and one last summary line for a Slurm log. Plain lines everywhere (a prolog's output goes
to slurmd's log); the rich per-host table only on a terminal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..exitcodes import ExitCode
from ..hosts import fold_hosts
from ..slurm.drain import fail_findings_by_host, finding_words
from ..sweep import NOT_CHECKED
from .run import PreflightRun

PREFIX = "gpudiag preflight"
# Reasons named in the summary line (the rest are counted).
REASONS_NAMED = 2
# Characters of each reason kept in the summary line.
REASON_CHARS = 160


def action_lines(run: PreflightRun) -> list[str]:
    """What was drained, would be drained, returned to service or left drained, one line each."""
    lines = []
    for outcome in run.drains:
        if not outcome.ran:
            lines.append(f"would run: {outcome.command}")
        elif outcome.ok:
            lines.append(f"drained: {outcome.command}")
        else:
            lines.append(f"drain failed: {outcome.command}: {outcome.error}")
    undrained = run.undrained
    if undrained is not None:
        if undrained.error is not None:
            lines.append(f"undrain: nothing returned to service: {undrained.error}")
        for command in undrained.commands:
            if command.ok:
                lines.append(f"returned to service: {command.command}")
            else:
                lines.append(f"undrain failed: {command.command}: {command.error}")
        lines += [f"left drained: {node}: {why}" for node, why in undrained.kept]
    return lines


def summary_line(run: PreflightRun) -> str:
    """One line for a Slurm log: the outcome, the nodes it concerns and why, and the time taken.

    ``gpudiag preflight: FAIL n2 (exit 1): gpudiag: slow_gpu GPU 3 ...; drained``
    ``gpudiag preflight: healthy n[1-4] (exit 0) in 12 s of a 120 s budget``
    ``gpudiag preflight: inconclusive (exit 3): n3 unchecked: ...; nothing drained``"""
    document = run.result.to_dict(records=False)
    code = run.exit_code
    hosts = [host["host"] for host in document["hosts"]]
    timing = f"in {run.elapsed_s:.0f} s of a {run.plan.budget_s:g} s budget"
    if code == ExitCode.OK:
        warnings = [_finding_text(f) + (" (not re-tested)" if not f.get("confirmed") else "")
                    for f in document["findings"] if f["severity"] == "warn"]
        watch = f"; {len(warnings)} to watch: {_reasons(warnings)}" if warnings else ""
        return f"{PREFIX}: healthy {fold_hosts(hosts)} (exit 0) {timing}{watch}"
    if code == ExitCode.INTERRUPTED:
        return f"{PREFIX}: interrupted (exit 130) {timing}; nothing drained"
    if code == ExitCode.FAIL:
        failed = list(fail_findings_by_host(document["findings"]))
        reasons = [_finding_text(f) for f in document["findings"] if f["severity"] == "fail"]
        return (f"{PREFIX}: FAIL {fold_hosts(failed)} (exit 1) {timing}: {_reasons(reasons)}; "
                f"{_drain_state(run)}")
    unchecked = [f for f in document["findings"] if f["kind"] in NOT_CHECKED]
    reasons = [f"{f['host']} {f['kind']}: {f['evidence']}" for f in unchecked]
    return f"{PREFIX}: inconclusive (exit {int(code)}) {timing}: {_reasons(reasons)}; nothing drained"


def _finding_text(finding: Mapping[str, Any]) -> str:
    return " ".join([str(finding["host"]), *finding_words(finding)])


def _reasons(reasons: list[str]) -> str:
    if not reasons:
        return "no reason recorded"
    more = len(reasons) - REASONS_NAMED
    shown = [text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3].rstrip() + "..."
             for text in reasons[:REASONS_NAMED]]
    return "; ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def _drain_state(run: PreflightRun) -> str:
    if not run.drains:
        return "nothing to drain"
    if not run.drain_asked:
        return "not drained (without --drain)"
    failed = [outcome for outcome in run.drains if not outcome.ok]
    return "drained" if not failed else f"drain failed: {failed[0].error}"
