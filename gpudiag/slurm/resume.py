"""Whether a node gpudiag drained may return to service: NHC's rule, resume only on the check that
drained it, and only a drain that this check saw before it measured anything.

A run resumes a drained node only when all of these hold:

- the drain is gpudiag's own: its reason ends with gpudiag's drain marker (gpudiag.slurm.reason),
  Slurm's ``[user@time]`` stamp names the user this gpudiag runs as, and Slurm stamped it within
  minutes of the time the marker says gpudiag wrote it. A reason a person typed (``gpudiag: ...``
  without the marker), set by another user, or copied from another node or an older drain (its
  marker far from Slurm's stamp) is never resumed;
- the drain predates the check: Slurm showed this very drain (reason and stamp alike) when the
  check began, before its first measurement (``CheckStart``). A drain set while the check ran
  (another check's, on another machine) is newer than every measurement this check made, and is
  never resumed by it;
- the node passes the run as a whole (probed, no ``fail`` or ``unchecked`` finding names it) and
  each check the reason names ran again on it and passed. A run that could not see the fault (a
  budget that planned no GEMM, a one-node run that made no link test, a node that printed no
  record) leaves it drained and says why. A reason whose checks cannot be told is never resumed.

Times are compared on one clock each: the check's start against Slurm's own state then (no
clock at all), the marker's time against Slurm's stamp with a margin for clocks apart
(STAMP_SKEW_S) and for a slow controller (STAMP_DELAY_S).
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .nodes import NodeState
from .reason import ALL_CHECKS, read_marker, read_reason, safe_text

# Characters of a node's reason quoted in a "left drained" line.
QUOTED_REASON_CHARS = 120
# Seconds Slurm's stamp may fall before the time gpudiag's marker says: the drainer's clock ahead of
# the controller's. munge refuses credentials five minutes off, so a machine further off drains nothing.
STAMP_SKEW_S = 300.0
# Seconds it may fall after: the clocks apart the other way, and the drain commands before it
# (each at most a minute; a controller slow to answer).
STAMP_DELAY_S = 900.0


def current_user() -> str:
    """The name of the user this process runs as (as scontrol names a stamp's uid), or its uid."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@dataclass(frozen=True)
class HostChecks:
    """What one run says about one host, for a resume: the checks (gpudiag.slurm.reason.CHECKS)
    it made on the host and the host passed, and why the host does not pass the run as a whole
    (``failed``: its status or the first finding that names it; None when it passes)."""

    host: str
    passed: frozenset[str]
    failed: str | None = None


@dataclass(frozen=True)
class CheckStart:
    """Slurm's view of a check's nodes when the check began, before its first measurement
    (gpudiag.slurm.drain.check_start): each node Slurm knows, by name; ``at`` when it was asked
    (seconds since the epoch); ``error`` why Slurm did not answer (then no drain can be shown to
    predate the check, and none is resumed); ``user`` the user the check runs as."""

    nodes: Mapping[str, NodeState]
    at: float = field(default_factory=time.time)
    error: str | None = None
    user: str = field(default_factory=current_user)

    def began(self) -> str:
        """When the check began, in words: ``2026-11-29T10:00:00Z``."""
        return _when(self.at)


def resume_problem(node: NodeState, checks: HostChecks | None, start: CheckStart) -> str | None:
    """Why the drained ``node`` stays drained after this run (one line, for the output), or None
    when it may be resumed. ``checks``: what the run says about it (None: the run did not probe
    it); ``start``: Slurm's view when the run began."""
    problem = _not_ours(node, start.user)
    if problem is not None:
        return problem
    reason = node.reason or ""
    quoted = safe_text(reason, QUOTED_REASON_CHARS)
    read = read_reason(reason)
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
    problem = _not_before(node, start)
    if problem is not None:
        return f"{drained_for}; {problem}"
    missing = [check for check in read.checks if check not in checks.passed]
    if missing:
        return (f"{drained_for}; this run made and passed no {','.join(missing)} check on it, so it could not see "
                f"that fault: left drained")
    return None


def _not_ours(node: NodeState, user: str) -> str | None:
    """Why the node's reason is not one gpudiag, running as ``user``, wrote, or None."""
    reason = node.reason or ""
    quoted = safe_text(reason, QUOTED_REASON_CHARS)
    if not reason.startswith("gpudiag:"):
        return f'drained by someone else (reason: "{quoted}"): left drained'
    marker = read_marker(reason)
    if marker is None:
        return (f'a reason that reads as gpudiag\'s but carries no drain marker of gpudiag\'s (reason: "{quoted}"): '
                f"set by a person, or by a gpudiag older than the marker: left drained; resume it by hand once it "
                f"passes")
    stamp = node.stamp
    if stamp is None or stamp.epoch is None:
        return (f'Slurm shows no readable [user@time] for the reason (reason: "{quoted}"), so it cannot say who set '
                f"it: left drained")
    if stamp.user != user:
        return (f"the reason was set by {safe_text(stamp.user)}, not by {safe_text(user)}, the user this gpudiag "
                f'runs as (reason: "{quoted}"): left drained')
    if not -STAMP_SKEW_S <= stamp.epoch - marker.written <= STAMP_DELAY_S:
        return (f"Slurm stamped the reason at {_when(stamp.epoch)}, but its drain marker says gpudiag wrote it at "
                f"{_when(marker.written)}: a copy of gpudiag's reason, set by hand (reason: \"{quoted}\"): "
                f"left drained")
    return None


def _not_before(node: NodeState, start: CheckStart) -> str | None:
    """Why the node's drain cannot be shown to predate the check's first measurement, or None."""
    if start.error is not None:
        return (f"Slurm did not answer when this check began ({safe_text(start.error, QUOTED_REASON_CHARS)}), so it "
                f"cannot tell that drain predates its measurements: left drained")
    before = start.nodes.get(node.name)
    if before is None or not before.drained or (before.reason, before.stamp) != (node.reason, node.stamp):
        stamp = node.stamp
        when = f" at {_when(stamp.epoch)}" if stamp is not None and stamp.epoch is not None else ""
        return (f"that drain was set{when}, after this check began ({start.began()}): its measurements predate "
                f"it and cannot clear it: left drained")
    return None


def _when(epoch: float) -> str:
    return f"{datetime.fromtimestamp(epoch, timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
