"""The run-wide budget (gpudiag.budget) and the link phase cut short by its deadline."""

from __future__ import annotations

import threading
import time

from gpudiag.budget import FINISH_RESERVE_S, RunBudget, out_of_budget
from gpudiag.links.attribution import LinkResult
from gpudiag.links.rounds import run_links


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_keeps_back_the_finish_and_counts_down_to_zero():
    clock = _Clock()
    budget = RunBudget.start(30.0, clock)
    assert budget.remaining_s() == 30.0 - FINISH_RESERVE_S
    clock.now += 20.0
    assert budget.remaining_s() == 10.0 - FINISH_RESERVE_S and budget.fits(5.0) and not budget.fits(8.0)
    clock.now += 60.0
    assert budget.remaining_s() == 0.0 and not budget.fits()


def test_what_the_budget_cut_short_is_unchecked_never_a_pass():
    finding = out_of_budget("n3", "pair tests", RunBudget.start(45.0))
    assert (finding.kind, finding.severity, finding.host) == ("unchecked", "warn", "n3")
    assert finding.evidence == "budget: pair tests not finished within the --budget 45 s"


class _SlowPairs:
    """A pair runner whose every pair takes ``pair_s`` seconds, unless cancelled."""

    def __init__(self, pair_s: float) -> None:
        self.pair_s = pair_s
        self.cancelled = threading.Event()
        self.started: list[tuple[str, str]] = []

    def run_pair(self, a: str, b: str) -> list[LinkResult]:
        self.started.append((a, b))
        if self.cancelled.wait(self.pair_s):
            return [LinkResult(a, b, "tcp", 0, None, None, "cancelled")]
        return [LinkResult(a, b, "tcp", 0, 9.4, 10.0, None)]

    def cancel(self) -> None:
        self.cancelled.set()


def test_a_link_round_running_at_the_deadline_is_ended_and_the_run_cut_short():
    runner = _SlowPairs(pair_s=0.3)
    hosts = [f"n{index}" for index in range(1, 5)]
    started = time.monotonic()
    run = run_links(hosts, "screen", runner, deadline=started + 0.45)
    elapsed = time.monotonic() - started
    assert run.cut_short and not run.interrupted
    assert elapsed < 1.5  # ended at the deadline, not after the schedule's every round
    assert not run.attribution.suspects  # no verdicts from an unfinished schedule
    # the first round (two pairs) finished whole and is kept; the second was ended
    assert [(r.result.a, r.result.b, r.result.gbps) for r in run.records[:2]] == [("n1", "n2", 9.4), ("n3", "n4", 9.4)]
    assert runner.cancelled.is_set()


def test_no_round_starts_after_the_deadline():
    runner = _SlowPairs(pair_s=0.0)
    run = run_links(["a", "b", "c", "d"], "screen", runner, deadline=time.monotonic() - 1.0)
    assert run.cut_short and run.records == () and runner.started == []


def test_without_a_deadline_the_schedule_runs_whole():
    run = run_links(["a", "b", "c", "d"], "screen", _SlowPairs(pair_s=0.0))
    assert not run.cut_short and run.rounds == 2
