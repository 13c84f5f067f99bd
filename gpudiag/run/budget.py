"""A run-wide time budget (``gpudiag preflight --budget S``): one monotonic deadline that every
remote phase of a sweep checks before it starts and bounds itself by.

What the budget cut short is never a pass: a host whose probes did not finish is ``unchecked``
with the budget named as the reason, a link phase cut short leaves its hosts ``unchecked``, and
a re-test that no longer fits is skipped (its suspects stay unconfirmed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..findings import Action, Basis, Finding, Kind, Severity

# Seconds kept back from the remote phases for the local ones: the analysis, the store's final
# write, the sweep document and the exclude list.
FINISH_RESERVE_S = 3.0
# A remote phase does not start with less than this left (seconds): it could measure nothing.
MIN_PHASE_S = 2.0
BUDGET_STATUS = "budget"
BUDGET_ACTION = "give the check a longer --budget, or look for a slow or hung node"


@dataclass(frozen=True)
class RunBudget:
    """``budget_s`` seconds for the whole run, counted from ``started`` (time.monotonic()).

    ``clock`` is time.monotonic, replaceable in tests."""

    budget_s: float
    started: float
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    @classmethod
    def start(cls, budget_s: float, clock: Callable[[], float] = time.monotonic) -> RunBudget:
        return cls(budget_s, clock(), clock)

    @property
    def deadline(self) -> float:
        """The monotonic time by which the remote phases end (the local ones' reserve kept back)."""
        return self.started + max(0.0, self.budget_s - FINISH_RESERVE_S)

    def remaining_s(self) -> float:
        """Seconds left for remote work (never negative)."""
        return max(0.0, self.deadline - self.clock())

    def fits(self, seconds: float = MIN_PHASE_S) -> bool:
        """True when ``seconds`` of remote work still fit before the deadline."""
        return self.remaining_s() >= seconds

    def reason(self) -> str:
        """``not finished within the --budget 120 s``: what every cut-short result says."""
        return f"not finished within the --budget {self.budget_s:g} s"


def out_of_budget(host: str, what: str, budget: RunBudget) -> Finding:
    """The ``unchecked`` finding for ``what`` on ``host`` (``node probes``, ``pair tests``) that
    the budget cut short: a warning, so the run exits 3 and drains nothing."""
    return Finding(kind=Kind.UNCHECKED, severity=Severity.WARN, host=host,
                   evidence=f"{BUDGET_STATUS}: {what} {budget.reason()}", action=Action.INSPECT,
                   action_detail=BUDGET_ACTION, basis=Basis.HOST_STATUS)
