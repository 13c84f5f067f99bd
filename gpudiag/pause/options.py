"""What ``--pause`` changes in a sweep's options: a short default deadline, a run-wide budget
(gpudiag.run.budget), and no NCCL links."""

from __future__ import annotations

from ..errors import InputError

# The probes' overall deadline on a node (s) with --pause and no --deadline: the job is paused,
# every minute of it costs the whole job. The host's time limit follows it (deadline + start-up).
PAUSE_DEADLINE_S = 60.0
# The whole sweep's budget (s) with --pause and no --budget: the node probes (deadline, start-up),
# a re-test where it fits, and the pair tests; what it cuts short is unchecked, never passed.
PAUSE_BUDGET_S = 180.0
NCCL = "nccl"


def pause_deadline_s(pause: bool, deadline_s: float, deadline_given: bool) -> float:
    """The probes' deadline (s): ``deadline_s`` as given, or PAUSE_DEADLINE_S for a pause that named none."""
    return PAUSE_DEADLINE_S if pause and not deadline_given else deadline_s


def pause_budget_s(pause: bool, budget_s: float | None) -> float | None:
    """The sweep's run-wide budget (s): ``budget_s`` as given, else PAUSE_BUDGET_S for a pause, else none."""
    if budget_s is not None:
        return budget_s
    return PAUSE_BUDGET_S if pause else None


def check_pause_backend(pause: bool, net_backend: str) -> None:
    """Raises InputError for ``--net-backend nccl`` with ``--pause``: NCCL moves GPU memory, which
    the paused job holds (pair tests then run over host memory: perftest or tcp)."""
    if pause and net_backend == NCCL:
        raise InputError("--net-backend nccl with --pause: NCCL moves GPU memory, which the paused job holds; "
                         "fix: use --net-backend perftest, tcp or auto (pair tests run over host memory "
                         "with --pause), or --links none")
