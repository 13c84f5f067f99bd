"""Whether a node gpudiag drained may return to service: NHC's rule, resume only on the check that
drained it.

The drain reason names the checks that drained the node (gpudiag.slurm.reason). A run resumes it
only when the node passes that run as a whole (probed, no ``fail`` or ``unchecked`` finding names
it) and each of those checks ran again on it and passed. A run that could not see the fault (a
budget that planned no GEMM, a one-node run that made no link test, a node that printed no record)
leaves it drained and says why. A node drained by anyone else, or with a gpudiag reason whose
checks cannot be told, is never resumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .nodes import NodeState
from .reason import ALL_CHECKS, read_reason, safe_text

# Characters of a node's reason quoted in a "left drained" line.
QUOTED_REASON_CHARS = 120


@dataclass(frozen=True)
class HostChecks:
    """What one run says about one host, for a resume: the checks (gpudiag.slurm.reason.CHECKS)
    it made on the host and the host passed, and why the host does not pass the run as a whole
    (``failed``: its status or the first finding that names it; None when it passes)."""

    host: str
    passed: frozenset[str]
    failed: str | None = None


def resume_problem(node: NodeState, checks: HostChecks | None) -> str | None:
    """Why the drained ``node`` stays drained after this run (one line, for the output), or None
    when it may be resumed. ``checks``: what the run says about it (None: the run did not
    probe it)."""
    reason = node.reason or ""
    quoted = safe_text(reason, QUOTED_REASON_CHARS)
    read = read_reason(reason)
    if not reason.startswith("gpudiag:"):
        return f'drained by someone else (reason: "{quoted}"): left drained'
    if read is None:
        return (f'drained by gpudiag with a reason this gpudiag cannot read (reason: "{quoted}"), so no run can '
                f"tell which check would clear it: left drained; resume it by hand once it passes")
    if read.checks == (ALL_CHECKS,):
        return (f'drained by gpudiag for a finding no single check clears (reason: "{quoted}"): left drained; '
                f"resume it by hand once it passes")
    drained_for = f"drained by gpudiag for {','.join(read.checks)}"
    if checks is None:
        return f"{drained_for}; this run did not probe it: left drained"
    if checks.failed is not None:
        failed = safe_text(checks.failed, QUOTED_REASON_CHARS)
        return f"{drained_for}; it does not pass this run ({failed}): left drained"
    missing = [check for check in read.checks if check not in checks.passed]
    if missing:
        return (f"{drained_for}; this run made and passed no {','.join(missing)} check on it, so it could not see "
                f"that fault: left drained")
    return None
