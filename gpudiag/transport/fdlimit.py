"""Open files a sweep needs, against the process's limit (RLIMIT_NOFILE).

A sweep keeps one SSH connection per host from its node probes to its last link round (a
socket; three pipes more where a ProxyCommand carries it). With the common soft limit of 1,024,
a 1,000-node sweep would run out of descriptors and call the hosts it could not connect to
``unreachable`` — a false finding about healthy nodes. So the soft limit is raised to what the
sweep needs (up to the hard limit, which a user may do without privileges); where even the hard
limit is too low, the fan-out is capped and connections beyond what fits are closed between
phases (and opened again when needed), and the sweep says so.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

# Descriptors beyond those open when the sweep starts and its connections: the store and its
# WAL, the JSON being written, a file lock, a ProxyCommand starting.
MARGIN = 16
# Descriptors one `ssh -G` child takes while it starts: both ends of its stdout, stderr and
# exec-error pipes, and /dev/null for its stdin.
FDS_PER_CHILD = 7
# Descriptors a host being probed holds beyond its connection: a bundle file being copied, the
# known_hosts file being read.
IN_USE_EXTRA = 2


def open_now() -> int:
    """Descriptors this process has open (its /proc or /dev/fd listing; 16 where neither exists)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 16


def children_at_once(wanted: int) -> int:
    """How many ``ssh -G`` children may run at once under the open-file limit (1 at least)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, (soft - open_now() - MARGIN) // FDS_PER_CHILD))


@dataclass(frozen=True)
class FdPlan:
    """How the sweep fits the open-file limit: hosts probed at once (``fanout``), pair tests run
    at once (``pairs_at_once``: two connections each), connections kept open at most
    (``max_open``; None: one per host, as many as there are), and ``notes`` to tell the user."""

    fanout: int
    pairs_at_once: int
    max_open: int | None
    notes: tuple[str, ...] = ()


def plan_open_files(hosts: int, fds_per_connection: int, fanout: int) -> FdPlan:
    """Raise the soft limit where the sweep needs it, else fit the sweep to the limit. ``hosts``:
    the remote hosts; ``fds_per_connection``: descriptors one connection takes (1, or 4 with a
    ProxyCommand)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    reserve = open_now() + MARGIN
    need = reserve + hosts * fds_per_connection + min(fanout, hosts) * IN_USE_EXTRA
    notes: list[str] = []
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        if raised > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            notes.append(f"raised the open-file limit from {soft} to {raised} for {hosts} connections")
            soft = raised
    if soft == resource.RLIM_INFINITY or soft >= need:
        return FdPlan(fanout, fanout, None, tuple(notes))
    # A connection in use (a host being probed, an end of a pair test, one being opened again)
    # holds IN_USE_EXTRA descriptors more than an idle one: half the budget goes to those.
    budget = max(0, soft - reserve)
    in_use = fds_per_connection + IN_USE_EXTRA
    capped = max(2, min(fanout, budget // (2 * in_use)))
    connections = max(2, (budget - capped * IN_USE_EXTRA) // fds_per_connection)
    fewer = f"fan-out {capped} instead of {fanout}, and " if capped < fanout else ""
    notes.append(f"the open-file limit ({soft}, hard {hard}) holds {connections} connections, not the {hosts} this "
                 f"sweep keeps: {fewer}connections are closed between phases and opened again (raise the limit with "
                 f"`ulimit -n {need}` or in limits.conf)")
    return FdPlan(capped, max(1, capped // 2), connections, tuple(notes))
