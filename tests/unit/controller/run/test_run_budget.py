"""The run-wide budget (gpudiag.run.budget) and the link phase cut short by its deadline."""

from __future__ import annotations

import threading
import time

import pytest

from gpudiag.links.attribution import LinkResult
from gpudiag.links.rounds import run_links
from gpudiag.run.budget import FINISH_RESERVE_S, RunBudget, out_of_budget


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

    def round_started(self, pairs: object) -> None:
        return None

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


# --- a whole sweep under a budget that is nearly spent (gpudiag.run.sweep) ------------------------------------
# The run's clock is the test's (gpudiag.run.runtime.Runtime): nothing sleeps. A simulated node's run
# answers at once; here the first pass moves the clock 3.6 s on n2, and each round of pair tests 2 s.
# A pair that finds the clock past the deadline holds on until the run ends it, as a real one would.


def test_a_nearly_spent_budget_skips_the_retest_and_ends_the_link_rounds_leaving_them_unchecked(
        tmp_path, monkeypatch):
    import json

    from gpudiag.run import sweep as plan
    from gpudiag.run.fanout import SweepOptions
    from gpudiag.run.hostprobe import ProbeOptions
    from gpudiag.run.request import LinkOptions, Reach, SweepRequest
    from gpudiag.run.runtime import Runtime
    from gpudiag.sim import FleetFile
    from gpudiag.sim.connector import SimulatedSession
    from gpudiag.sim.pairs import SimulatedPairRunner

    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 4, "name_format": "n{}",
                                 "faults": [{"kind": "slow_gpu", "host": "n2", "gpu": 3, "factor": 0.7}]}))
    left_s = 7.0  # of a 60 s budget
    clock, budgets, ended = _Clock(), [], threading.Event()

    def nearly_spent(budget_s: float, run_clock) -> RunBudget:
        assert run_clock is clock  # the runtime's clock is the budget's
        budgets.append(RunBudget(budget_s, clock() - (budget_s - FINISH_RESERVE_S - left_s), clock))
        return budgets[-1]

    real_run, real_pair = SimulatedSession.run, SimulatedPairRunner.run_pair

    def slow_run(self, argv, timeout_s):
        if self._host == "n2":
            clock.now += 3.6
        return real_run(self, argv, timeout_s)

    def slow_pair(self, a, b):
        if "n1" in (a, b):  # one move per round: the round's pairs run side by side
            clock.now += 2.0
            if not budgets[-1].fits(0.001):
                assert ended.wait(30.0), "the run never ended the pair in flight at its deadline"
        return real_pair(self, a, b)

    monkeypatch.setattr(plan.RunBudget, "start", staticmethod(nearly_spent))
    monkeypatch.setattr(SimulatedSession, "run", slow_run)
    monkeypatch.setattr(SimulatedPairRunner, "run_pair", slow_pair)
    monkeypatch.setattr(SimulatedPairRunner, "cancel", lambda self: ended.set())
    request = SweepRequest(hosts_argument=None, sweep=SweepOptions(ProbeOptions(names=("gemm",), duration_s=0.1)),
                           reach=Reach(stand_in=FleetFile(str(fleet))), links=LinkOptions(mode="screen"),
                           budget_s=60.0)
    started = clock()
    result = plan.run_sweep(request, Runtime(clock=clock))
    assert ended.is_set()  # the second round was ended at the deadline
    assert clock() - started == pytest.approx(3.6 + 2.0 + 2.0)
    assert [host.status for host in result.hosts] == ["ok"] * 4
    assert next(h for h in result.hosts if h.host == "n2").duration_s == pytest.approx(3.6)  # on the run's clock
    # 3.4 s left after the first pass, which took 3.6 s on n2: no re-test, the suspect unconfirmed
    assert any("re-test of 1 suspects was skipped: not finished within the --budget 60 s" in w for w in result.warnings)
    slow = next(f for f in result.findings if f.kind == "slow_gpu")
    assert slow.severity == "warn" and not slow.confirmed  # never drains
    # ... and never healthy: the suspect is a gap of its own (exit 3 even without the link phase)
    gap = next(f for f in result.findings if f.kind == "unchecked" and f.host == "n2" and f.gpu == 3)
    assert "not re-tested (not finished within the --budget 60 s)" in gap.evidence and gap.metric == "gemm.tflops"
    # the first screen round finished and is kept; the second was cut, and of it only the pair that had
    # finished is kept (n1's was ended): no link verdicts, every host unchecked
    assert result.links and {link["phase"] for link in result.links} == {"screen"}
    kept = {(link["a"], link["b"]) for link in result.links}
    assert len(kept) == 3 and sum("n1" in pair for pair in kept) == 1
    unchecked = sorted(f.host for f in result.findings if f.evidence.startswith("budget: pair tests"))
    assert unchecked == ["n1", "n2", "n3", "n4"]
    assert not any(f.kind in ("slow_link", "slow_nic") for f in result.findings)
    assert int(result.exit_code) == 3


class _StuckConnector:
    """Connecting to ``stuck`` hangs (an SSH handshake that never ends) until the test is over;
    every other host is this machine."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def connect(self, host, within_s=None):
        from gpudiag.transport.local import LocalSession

        if host.host == "stuck":
            self.release.wait(30.0)
        return LocalSession()

    def close(self) -> None:
        self.release.set()


def test_a_host_still_connecting_at_the_runs_deadline_is_ended_as_a_timeout():
    import sys

    from gpudiag.bundle import locate_bundle
    from gpudiag.hosts import HostSpec
    from gpudiag.run.fanout import SweepOptions, probe_hosts
    from gpudiag.run.hostprobe import ProbeOptions
    from gpudiag.run.progress import QuietProgress

    connector = _StuckConnector()
    # The run's clock is the test's: it reaches the deadline when "here" (the real facts probe on this
    # machine) has finished; "stuck" never connects, and is ended then rather than when it gives up.
    clock = _Clock()

    def done(outcome) -> None:
        if outcome.host == "here":
            clock.now += 20.0

    options = SweepOptions(ProbeOptions(names=("facts",), python=sys.executable))
    try:
        result = probe_hosts([HostSpec("here"), HostSpec("stuck")], options, connector, locate_bundle(),
                             QuietProgress(), on_host_done=done, clock=clock, deadline=clock.now + 15.0)
    finally:
        connector.close()
    assert [(h.host, h.status) for h in result.hosts] == [("here", "ok"), ("stuck", "timeout")]
    assert "not finished by the run's deadline" in (result.hosts[1].error or "")
    assert result.hosts[1].duration_s == pytest.approx(20.0)  # on the run's clock
    assert not result.interrupted and int(result.exit_code) == 3


def _noisy_sweep(tmp_path, monkeypatch, budget_s: float, retest_run_s: float):
    """A 16-node sweep at GEMM CV 3 % (a noisy key, whose suspects ask for 6 re-test runs) with a
    25 % slow GPU on n2, under ``budget_s``, on a clock only n2 moves: 3 s for its first pass and
    ``retest_run_s`` for each re-test run. Returns the result and every host's calls in order."""
    import json

    from gpudiag.run import sweep as plan
    from gpudiag.run.fanout import SweepOptions
    from gpudiag.run.hostprobe import ProbeOptions
    from gpudiag.run.request import Reach, SweepRequest
    from gpudiag.run.runtime import Runtime
    from gpudiag.sim import FleetFile
    from gpudiag.sim.connector import SimulatedSession

    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 16, "name_format": "n{}", "seed": 2,
                                 "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.01},
                                 "faults": [{"kind": "slow_gpu", "host": "n2", "gpu": 3, "factor": 0.75}]}))
    clock, calls = _Clock(), []
    real_run = SimulatedSession.run

    def slow_run(self, argv, timeout_s):
        calls.append(self._host)
        if self._host == "n2":
            clock.now += 3.0 if calls.count("n2") == 1 else retest_run_s
        return real_run(self, argv, timeout_s)

    monkeypatch.setattr(SimulatedSession, "run", slow_run)
    request = SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(fleet))), budget_s=budget_s,
                           sweep=SweepOptions(ProbeOptions(names=("facts", "gemm"), duration_s=0.1)))
    return plan.run_sweep(request, Runtime(clock=clock)), calls


def test_a_budget_too_short_for_a_noisy_keys_runs_re_tests_once_what_one_run_flagged(tmp_path, monkeypatch):
    # the first pass on n2 takes 3 s on the run's clock; its 6 planned re-test runs would take 18 s
    result, calls = _noisy_sweep(tmp_path, monkeypatch, budget_s=16.0, retest_run_s=0.0)
    # 10 s left after the first pass: not 18 s of runs, but n2's one run (3 s) fits
    assert any("re-test of noisy results in several runs was skipped: not finished within the --budget 16 s" in w
               for w in result.warnings)
    assert calls.count("n2") == 2  # the first pass and one re-test run
    slow = [f for f in result.findings if f.kind == "slow_gpu"]
    assert [(f.host, f.gpu, f.severity, f.confirmed) for f in slow] == [("n2", 3, "fail", True)]
    # the screen alone was never re-tested: no finding, not even unchecked, for it
    assert not [f for f in result.findings if f.kind == "unchecked"]


def test_re_test_runs_that_overrun_the_budget_stop_and_those_that_finished_judge(tmp_path, monkeypatch):
    # 3 s for the first pass, then 3.5 s each re-test run: slower than planned
    result, calls = _noisy_sweep(tmp_path, monkeypatch, budget_s=25.0, retest_run_s=3.5)
    # 19 s left after the first pass fit 6 runs of 3 s; at 3.5 s the sixth would start 2 s before the deadline
    assert not [w for w in result.warnings if "skipped" in w]
    assert calls.count("n2") == 1 + 5
    (slow,) = [f for f in result.findings if f.kind == "slow_gpu"]
    assert (slow.host, slow.gpu, slow.severity) == ("n2", 3, "fail") and "the mean of 5 re-test runs" in slow.evidence
