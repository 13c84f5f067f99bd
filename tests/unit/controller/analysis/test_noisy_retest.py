"""Noisy keys (gpudiag.analysis.noisy): where one run's noise hides a fail-size deficit, a wider
screen, several re-test runs and a verdict on their mean alone, built here on measurement
documents whose noise is known: per-run noise averages out, noise that stays with a GPU does not."""

import dataclasses
import json
import random
import statistics

import pytest

from gpudiag.analysis import analyse
from gpudiag.analysis.measurements import KeyInfo, Measurement
from gpudiag.analysis.noisy import (
    FAMILY_PER_HOST_KEY,
    LASTING_TOLERANCE,
    LEVEL_ERROR,
    MAD_LOG_VARIANCE,
    MIN_LASTING_RESULTS,
    MIN_RUN_DOF,
    RunNoise,
    confirmation_bar,
    family_size,
    is_noisy,
    judge_runs,
    key_screen,
    lasting_tolerance,
    level_hosts,
    mean_spread,
    planned_runs,
    retest_level,
    run_noise,
    with_fleet_spread,
)
from gpudiag.analysis.reference import BASELINE, FLEET, SIBLINGS, SKU, KeyReferences, Reference
from gpudiag.analysis.thresholds import default_thresholds, load_thresholds

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
        "cuda_version": "12.4", "torch_version": "2.4.0", "gpu_count": 8, "cpu_count": 224,
        "cpu_count_usable": 224, "load_average_1m": 1.5, "memory_total_mib": 2063840,
        "memory_available_mib": 1900000}
GEMM_PARAMS = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}
NOMINAL = 740.0
THRESHOLDS = default_thresholds()


def _gemm(gpu: int, value: float) -> dict:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": "tflops", "value": value,
            "unit": "TFLOP/s", "samples": 20, "cv": 0.002, "status": "ok", "params": GEMM_PARAMS, "details": {}}


def _host(name: str, values: list[float]) -> dict:
    return {"host": name, "status": "ok", "error": None, "duration_s": 1.0, "facts": dict(H100),
            "results": [_gemm(i, v) for i, v in enumerate(values)]}


class _Fleet:
    """``count`` 8-GPU hosts whose GPUs' true rates are ``factors`` (1.0 unless named) times the
    nominal rate times a lasting offset of ``lasting`` CV, each run drawn with ``per_run`` CV."""

    def __init__(self, count: int, per_run: float, lasting: float = 0.0, factors: dict | None = None, seed: int = 1):
        rng = random.Random(f"truth:{seed}")
        self.truth = {(f"node{h:03d}", g): NOMINAL * rng.gauss(1, lasting) * (factors or {}).get((h, g), 1.0)
                      for h in range(count) for g in range(8)}
        self.count, self.per_run, self.seed = count, per_run, seed

    def run(self, number: int, hosts: set[str] | None = None) -> list[dict]:
        rng = random.Random(f"run:{self.seed}:{number}")
        names = [f"node{h:03d}" for h in range(self.count)]
        return [_host(name, [self.truth[(name, g)] * rng.gauss(1, self.per_run) for g in range(8)])
                for name in names if hosts is None or name in hosts]


def _retest(fleet: _Fleet, first: list[dict], runs: int | None = None) -> tuple[list[dict], list]:
    """The re-test the sweep would run: each suspect's host in as many runs as it asks for."""
    suspects = analyse(first, THRESHOLDS).suspects
    wanted = {}
    for s in suspects:
        wanted[s.measurement.host] = max(wanted.get(s.measurement.host, 1), runs or s.runs)
    hosts = []
    for number in range(1, max(wanted.values(), default=0) + 1):
        hosts += fleet.run(100 + number, {h for h, n in wanted.items() if n >= number})
    return hosts, suspects


def _slow_gpus(findings) -> set[tuple[str, int]]:
    return {(f.host, f.gpu) for f in findings if f.kind == "slow_gpu"}


def _reference(spread_pct: float, source: str = FLEET) -> Reference:
    return Reference(NOMINAL, NOMINAL * spread_pct / 100, source, 64)


def test_a_key_is_noisy_only_where_one_run_rarely_shows_the_fail_deficit_and_only_for_a_gpus_measured_reference():
    # robust_z 3 and deficit_fail 6 %: above 1.29 % spread (6 / (3 + 1.645)), one run does not show a
    # 6 % deficit past the bar nineteen times in twenty
    assert not is_noisy(_reference(1.25), "gemm", "cuda:0", THRESHOLDS)
    assert is_noisy(_reference(1.35), "gemm", "cuda:0", THRESHOLDS)
    assert is_noisy(_reference(3.0, BASELINE), "membw", "cuda:3", THRESHOLDS)
    for source in (SKU, SIBLINGS):
        assert not is_noisy(_reference(3.0, source), "gemm", "cuda:0", THRESHOLDS)
    assert not is_noisy(_reference(3.0), "gemm", "node median", THRESHOLDS)


def test_a_key_whose_z_cut_lies_deeper_than_deficit_warn_screens_there_without_being_noisy():
    # robust_z 3 and deficit_warn 3 %: over 1 % spread the z cut lies deeper than 3 % (at 1.25 %,
    # 3.75 %), and a GPU 5 % slow at 1 % noise in a 4-node job read above it one run in ten
    tight, between, noisy = (KeyReferences((_reference(spread),)) for spread in (0.95, 1.1, 1.35))
    assert key_screen(tight, "gemm", "cuda:0", THRESHOLDS) is None
    screen = key_screen(between, "gemm", "cuda:0", THRESHOLDS)
    assert screen is not None and not screen.noisy and screen.cutoff == pytest.approx(NOMINAL * 0.97)
    assert key_screen(noisy, "gemm", "cuda:0", THRESHOLDS).noisy
    assert key_screen(between, "gemm", "node median", THRESHOLDS) is None  # a host's own figure has none
    assert key_screen(KeyReferences((_reference(1.1, SKU),)), "gemm", "cuda:0", THRESHOLDS) is None


def test_re_test_runs_are_planned_for_a_deficit_in_the_middle_of_the_warn_band():
    # 4.5 % with the defaults: past the bar, and past retest_deficit (3.5 %) by 1.645 of a mean's spread
    bar = confirmation_bar(2, THRESHOLDS)
    assert planned_runs(_reference(0.5), bar, THRESHOLDS) == 2
    assert planned_runs(_reference(1.0), bar, THRESHOLDS) == 3  # (1.645 x 1 % / 1 %)^2 = 2.7
    assert planned_runs(_reference(1.4), bar, THRESHOLDS) == 6  # 5.4; planned for 6 % alone, 2


def test_a_noisy_p2p_pair_is_judged_on_several_runs_but_has_no_wide_screen():
    # 84 pairs a node at 3 % noise: a screen at deficit_warn would re-test every node for them
    noisy = KeyReferences((_reference(3.0),))
    assert is_noisy(_reference(3.0), "p2p", "cuda:0", THRESHOLDS) and not is_noisy(_reference(1.0), "p2p", "cuda:0",
                                                                                     THRESHOLDS)
    assert key_screen(noisy, "p2p", "cuda:0", THRESHOLDS) is None
    assert key_screen(noisy, "gemm", "cuda:0", THRESHOLDS) is not None


def _pair(src: int, dst: int, value: float, host: str = "a") -> Measurement:
    info = KeyInfo(f"p2p {src}->{dst}", "p2p", "bandwidth", {"src": f"cuda:{src}", "dst": f"cuda:{dst}"}, "GB/s",
                   "H100")
    return Measurement(host, f"cuda:{src}", None, info, value)


def test_a_key_of_one_result_a_host_takes_its_metrics_run_noise_pooled_over_its_keys():
    # One host's six re-test runs of its 56 one-way pairs: each pair's key has 5 degrees of
    # freedom (too few to judge a mean by), the metric's 280
    rng = random.Random(3)
    pairs = [(src, dst) for src in range(8) for dst in range(8) if src != dst]
    runs = {("a", str(pair)): [_pair(*pair, 370 * rng.gauss(1, 0.03)) for _ in range(6)] for pair in pairs}
    runs[("b", "gemm")] = [_m(NOMINAL * rng.gauss(1, 0.01)) for _ in range(6)]
    noise = run_noise(runs)
    assert {noise[f"p2p {src}->{dst}"] for src, dst in pairs} == {noise["p2p 0->1"]}  # one pooled noise
    assert 50 * 5 <= noise["p2p 0->1"].dof <= 56 * 5 and noise["p2p 0->1"].relative_sd == pytest.approx(0.03, rel=0.15)
    # another metric's keys are not pooled with them: a GEMM key keeps its own, thin as it is
    assert noise["k"].dof == 5 and noise["k"].relative_sd < 0.02
    many = {("a", str(i)): [_m(NOMINAL * rng.gauss(1, 0.01)) for _ in range(6)] for i in range(3)}
    assert run_noise(many)["k"].dof == 15  # enough of its own


def test_the_bar_rises_with_the_results_judged_and_the_runs_with_the_noise_up_to_the_threshold(tmp_path):
    assert 3.0 <= confirmation_bar(1, THRESHOLDS) < 3.1  # never below robust_z
    assert 4.7 < confirmation_bar(1000, THRESHOLDS) < 4.8 < confirmation_bar(100_000, THRESHOLDS)
    bar = confirmation_bar(1000, THRESHOLDS)
    runs = [planned_runs(_reference(spread), bar, THRESHOLDS) for spread in (1.35, 2.0, 2.5, 3.0, 6.0)]
    assert runs == sorted(runs) and runs[0] >= 2 and runs[-1] == THRESHOLDS.retest_max_runs
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"schema": "gpudiag.thresholds/1", "retest_max_runs": {"value": 1, "unit": "count"}}))
    assert planned_runs(_reference(3.0), bar, load_thresholds(str(path))) == 1  # 1: one run, as before


def test_a_means_spread_keeps_what_gpus_differ_by_and_divides_only_the_run_to_run_noise():
    ref = _reference(3.0)
    measured = RunNoise(0.03, 200)
    assert mean_spread(ref, 6, measured, 0.5) == pytest.approx(ref.spread / 6 ** 0.5)
    # GPUs that differ by 3 % and runs that repeat to 1 %: the mean is hardly finer than one run
    assert mean_spread(ref, 6, RunNoise(0.01, 200), 0.5) > 0.9 * ref.spread
    # the noise not yet measured (too few runs): as coarse as one run
    assert mean_spread(ref, 6, RunNoise(0.03, MIN_RUN_DOF - 1), 0.5) == ref.spread
    assert mean_spread(ref, 6, None, 0.5) == ref.spread
    assert mean_spread(_reference(0.1), 6, RunNoise(0.001, 200), 0.5) == pytest.approx(NOMINAL * 0.005)  # MAD floor


def test_a_means_spread_adds_the_level_error_of_a_small_fleet_and_not_of_a_large_one():
    # A 4-node job's level rests on 32 values and is off by a third of a spread: as much as a mean
    # of six runs scatters. A 256-node fleet's 2,048 values add nearly nothing.
    measured = RunNoise(0.03, 200)
    small = dataclasses.replace(_reference(3.0), level_values=32)
    large = dataclasses.replace(_reference(3.0), level_values=2048)
    alone = mean_spread(_reference(3.0), 6, measured, 0.5)
    assert mean_spread(small, 6, measured, 0.5) == pytest.approx(
        (alone ** 2 + (LEVEL_ERROR * small.spread) ** 2 / 32) ** 0.5)
    assert mean_spread(small, 6, measured, 0.5) > 1.25 * alone
    assert mean_spread(large, 6, measured, 0.5) < 1.01 * alone


def test_the_runs_mean_confirms_a_real_deficit_and_clears_a_dip():
    ref, noise = _reference(3.0), RunNoise(0.03, 500)
    slow = judge_runs(ref, [NOMINAL * f for f in (0.93, 0.90, 0.94, 0.92, 0.91, 0.93)], noise, 4.0, THRESHOLDS)
    assert slow.confirmed and 7.5 < slow.deficit_pct < 8.5 and slow.robust_z < -4.0
    assert "the mean of 6 re-test runs" in slow.note and "3.0 %" in slow.note
    healthy = judge_runs(ref, [NOMINAL * f for f in (0.97, 1.02, 0.99, 1.01, 0.96, 1.0)], noise, 4.0, THRESHOLDS)
    assert not healthy.confirmed
    # the same runs, but the noise unmeasured: one run's spread, and 8 % is not 4 of those
    assert not judge_runs(ref, [NOMINAL * 0.92] * 6, None, 4.0, THRESHOLDS).confirmed


def test_at_3_pct_run_noise_an_8_pct_slow_gpu_is_found_in_every_seed_and_no_healthy_gpu_is_named():
    for seed in range(1, 6):
        fleet = _Fleet(48, per_run=0.03, factors={(seed * 7, seed % 8): 0.92}, seed=seed)
        first = fleet.run(1)
        again, suspects = _retest(fleet, first)
        assert max(s.runs for s in suspects) == THRESHOLDS.retest_max_runs
        assert sum(s.screened for s in suspects) > sum(not s.screened for s in suspects)  # the screen is wide
        findings = analyse(first, THRESHOLDS, retest_hosts=again).findings
        assert _slow_gpus(findings) == {(f"node{seed * 7:03d}", seed % 8)}, seed
        (finding,) = [f for f in findings if f.kind == "slow_gpu"]
        assert finding.confirmed and f"the mean of {THRESHOLDS.retest_max_runs} re-test runs" in finding.evidence


def test_one_re_test_run_as_before_misses_most_8_pct_slow_gpus_at_3_pct_noise():
    # the check above is not the simulator's luck: one run each, the same fleets lose most of them
    found = 0
    for seed in range(1, 6):
        fleet = _Fleet(48, per_run=0.03, factors={(seed * 7, seed % 8): 0.92}, seed=seed)
        first = fleet.run(1)
        again, _ = _retest(fleet, first, runs=1)
        found += bool(_slow_gpus(analyse(first, THRESHOLDS, retest_hosts=again).findings))
    assert found <= 2


def test_gpus_that_differ_by_themselves_are_not_blamed_for_the_fleets_scatter():
    # 3 % lasting offsets, 0.3 % run noise: the runs repeat each GPU's own rate, and a GPU 2 sigma
    # below its fleet stays 2 sigma below however often it runs; no healthy GPU is named
    fleet = _Fleet(48, per_run=0.003, lasting=0.03, seed=4)
    first = fleet.run(1)
    again, suspects = _retest(fleet, first)
    assert any(s.runs > 1 for s in suspects)
    assert not _slow_gpus(analyse(first, THRESHOLDS, retest_hosts=again).findings)


def test_a_screen_alone_is_no_finding_without_its_runs_and_not_unchecked_with_no_retest():
    fleet = _Fleet(48, per_run=0.03, seed=2)
    first = fleet.run(1)
    suspects = analyse(first, THRESHOLDS).suspects
    screened = [s for s in suspects if s.screened]
    assert screened
    # re-tested once only: the screened are dropped, never confirmed on one more run
    once = analyse(first, THRESHOLDS, retest_hosts=fleet.run(2)).suspects
    assert not [s for s in once if s.screened]
    # not re-tested at all: no screened suspect becomes a finding
    shown = analyse(first, THRESHOLDS, retested=True).findings
    screened_places = {(s.measurement.host, s.measurement.gpu) for s in screened}
    assert not {(f.host, f.gpu) for f in shown} & screened_places


def test_a_screened_gpu_whose_host_fails_its_re_test_is_unchecked():
    fleet = _Fleet(48, per_run=0.03, seed=3)
    first = fleet.run(1)
    again, suspects = _retest(fleet, first)
    host = next(s.measurement.host for s in suspects if s.screened)
    failed = [h for h in again if h["host"] != host] + [
        {"host": host, "status": "timeout", "error": "probe timed out", "duration_s": 9.0, "facts": dict(H100),
         "results": []}]
    findings = analyse(first, THRESHOLDS, retest_hosts=failed).findings
    assert any(f.kind == "unchecked" and f.host == host and "re-test timeout" in f.evidence for f in findings)


def test_at_1_pct_noise_nothing_changes_one_run_re_tests_as_before():
    fleet = _Fleet(48, per_run=0.01, factors={(5, 3): 0.92}, seed=5)
    first = fleet.run(1)
    again, suspects = _retest(fleet, first)
    assert suspects and all(s.runs == 1 and not s.screened for s in suspects)
    assert _slow_gpus(analyse(first, THRESHOLDS, retest_hosts=again).findings) == {("node005", 3)}


def test_one_node_printing_wild_figures_run_after_run_neither_hides_a_slow_gpu_nor_lifts_the_bar():
    fleet = _Fleet(48, per_run=0.03, factors={(9, 5): 0.92}, seed=1)
    first = fleet.run(1)
    again, _ = _retest(fleet, first)
    liar = "node030"
    rng = random.Random(7)
    for host in again:  # run to run, its GPUs swing by half their rate; and it claims 1,000 GPUs
        if host["host"] == liar:
            host["results"] = [_gemm(i, NOMINAL * rng.uniform(0.5, 1.5)) for i in range(1000)]
    findings = analyse(first, THRESHOLDS, retest_hosts=again).findings
    assert ("node009", 5) in _slow_gpus(findings)
    assert not {place for place in _slow_gpus(findings) if place[0] not in ("node009", liar)}
    runs = {("a", str(i)): [_m(NOMINAL * rng.gauss(1, 0.03)) for _ in range(6)] for i in range(300)}
    noise = run_noise(runs)["k"]
    runs[("a", "0")] = [_m(NOMINAL * factor) for factor in (0.1, 3.0, 0.2, 2.5, 0.1, 3.0)]  # one result gone wild
    assert noise.relative_sd == pytest.approx(0.03, rel=0.1) and noise.dof == 300 * 5
    assert run_noise(runs)["k"].relative_sd == pytest.approx(noise.relative_sd, rel=0.02)
    assert family_size([("a", "k")] * 1000 + [("b", "k")] * 8) == FAMILY_PER_HOST_KEY + 8


def _m(value: float) -> Measurement:
    return Measurement("a", "cuda:0", None, KeyInfo("k", "gemm", "tflops", {}, "TFLOP/s", "H100"), value)


def test_a_models_one_gemm_key_sits_at_its_median_when_a_crowd_at_its_top_set_values_aside():
    # A model's one GEMM key is its metric's only key, so no typical spread sets values aside: by
    # the spread above a crowd at its top, 16 hosts' 128 healthy values at 2 % noise sat up to
    # half a spread over their median (9 keys of 200 over a fifth), and a healthy GPU's re-test
    # mean, 3.6 sigma low by chance among a thousand judged, was confirmed slow. Found again by
    # the spread of the values it kept, the level sits at the median.
    for seed in range(1, 201):
        first = _Fleet(16, per_run=0.02, seed=seed).run(1)
        values = [r["value"] for host in first for r in host["results"]]
        (entry,) = [e for e in analyse(first, THRESHOLDS).references if e["probe"] == "gemm"]
        assert entry["reference"] - statistics.median(values) < 0.1 * NOMINAL * 0.02, seed


def _found_in_every_seed(count: int, per_run: float, slow: dict, seeds: range) -> list[str]:
    """Each seed whose re-tested sweep did not name exactly the GPUs of ``slow`` (and nothing else)."""
    wrong = []
    for seed in seeds:
        fleet = _Fleet(count, per_run=per_run, factors=slow, seed=seed)
        first = fleet.run(1)
        again, _ = _retest(fleet, first)
        findings = analyse(first, THRESHOLDS, retest_hosts=again).findings
        named = {(f.kind, f.host, f.gpu) for f in findings if f.severity in ("fail", "warn")}
        if named != {("slow_gpu", f"node{h:03d}", g) for h, g in slow}:
            wrong.append(f"seed {seed}: {sorted(named, key=str)}")
    return wrong


def test_a_small_fleets_spread_counts_as_run_to_run_noise_within_its_own_sampling_error():
    # A MAD over 32 values is off by a fifth: a 4-node job's spread read 4.9 % at 3 % run noise,
    # kept 1.2 points of it as lasting, and a 10 %-slow GPU's mean of six runs passed.
    small = lasting_tolerance(32, 160)
    assert 1.35 < small < 1.5
    assert lasting_tolerance(8192, 160) == LASTING_TOLERANCE == lasting_tolerance(0, 160)
    assert lasting_tolerance(32, 10) > small  # a noise of fewer degrees of freedom is less sure too
    noise = RunNoise(0.03, 160)
    job = dataclasses.replace(_reference(4.0), level_values=32)
    fleet = dataclasses.replace(_reference(4.0), level_values=8192)
    level = (LEVEL_ERROR * job.spread) ** 2 / 32
    assert mean_spread(job, 6, noise, 0.5) == pytest.approx(((NOMINAL * 0.03) ** 2 / 6 + level) ** 0.5)
    # the same spread over 8,192 values is past 1.15 times the noise: part of it lasts
    assert mean_spread(fleet, 6, noise, 0.5) > 1.3 * mean_spread(job, 6, noise, 0.5)
    # a spread past even a small fleet's error still lasts
    wide = dataclasses.replace(_reference(8.0), level_values=32)
    assert mean_spread(wide, 6, noise, 0.5) > NOMINAL * 0.06


def test_the_fleets_spread_lends_its_degrees_of_freedom_to_a_thinly_measured_noise_it_agrees_with():
    # Two re-tested hosts measure the run noise with 15 degrees of freedom (a 3.4-sigma bar
    # becomes 4.3); a fleet of 128 values whose spread is that noise knows it with 47 more.
    ref = dataclasses.replace(_reference(1.25), level_values=128)
    pooled = with_fleet_spread(ref, RunNoise(0.0127, 15))
    assert pooled.dof == 15 + int(128 / (2 * MAD_LOG_VARIANCE)) and 0.0125 <= pooled.relative_sd <= 0.0127
    assert judge_runs(ref, [NOMINAL * 0.947], RunNoise(0.0127, 15), 3.4, THRESHOLDS).confirmed
    # a spread that outlasts the noise, runs noisier than the fleet, too few runs, no count: as measured
    for other, noise in ((dataclasses.replace(_reference(3.0), level_values=128), RunNoise(0.0127, 15)),
                         (dataclasses.replace(_reference(0.5), level_values=128), RunNoise(0.025, 15)),
                         (ref, RunNoise(0.0127, MIN_RUN_DOF - 1)), (_reference(1.25), RunNoise(0.0127, 15))):
        assert with_fleet_spread(other, noise) == noise


def test_a_gpu_5_pct_slow_at_1_pct_noise_is_re_tested_in_runs_for_the_warn_band_and_confirmed_whenever_chosen():
    # Below deficit_fail, one re-test run read under retest_deficit one time in fifteen and the GPU
    # passed. The runs are planned to show a 4.5 % deficit past retest_deficit (3.5 %) nineteen
    # times in twenty: at 1 % spread, three. The first pass still misses one now and then: noise.
    slow = {(3, 2): 0.95, (9, 5): 0.95}
    fleet = _Fleet(16, per_run=0.01, factors=slow, seed=1)
    suspects = analyse(fleet.run(1), THRESHOLDS).suspects
    assert [s.runs for s in suspects if s.measurement.host == "node003" and s.measurement.gpu == 2] == [3]
    chosen, lost = 0, []
    for seed in range(1, 41):
        fleet = _Fleet(16, per_run=0.01, factors=slow, seed=seed)
        first = fleet.run(1)
        again, suspects = _retest(fleet, first)
        picked = {(s.measurement.host, s.measurement.gpu) for s in suspects} & {
            (f"node{h:03d}", g) for h, g in slow}
        named = _slow_gpus(analyse(first, THRESHOLDS, retest_hosts=again).findings)
        chosen += len(picked)
        lost += [f"seed {seed}: {place}" for place in picked - named]
    assert chosen >= 72 and len(lost) <= 1, lost  # one run each lost one in fifteen
    assert _found_in_every_seed(16, 0.015, {}, range(1, 21)) == []  # and a healthy fleet names nothing


def test_a_key_measured_on_a_few_hosts_takes_its_metrics_noise_where_its_own_is_within_it():
    # Four re-tested hosts' six runs of each of their 56 pairs: each pair's key has 20 degrees of
    # freedom of its own, where the metric pooled over the pairs has 1,120. Its Student bar at 20
    # was 6.0 where the metric's is 4.6, and a pair 10 % slow at 3 % noise passed in half the sweeps.
    rng = random.Random(5)
    pairs = [(src, dst) for src in range(8) for dst in range(8) if src != dst]
    runs = {(host, str(pair)): [_pair(*pair, 370 * rng.gauss(1, 0.03), host) for _ in range(6)]
            for host in "abcd" for pair in pairs}
    noise = run_noise(runs)
    assert {noise[f"p2p {src}->{dst}"] for src, dst in pairs} == {noise["p2p 0->1"]}  # the metric's, one noise
    assert noise["p2p 0->1"].dof >= 4 * 50 * 5 and noise["p2p 0->1"].relative_sd == pytest.approx(0.03, rel=0.1)
    # a key far noisier than its metric allows keeps its own: four hosts' runs of it at 9 %
    runs.update({(host, "(0, 1)"): [_pair(0, 1, 370 * rng.gauss(1, 0.09), host) for _ in range(6)] for host in "abcd"})
    wild = run_noise(runs)
    assert wild["p2p 0->1"].dof == 20 and wild["p2p 0->1"].relative_sd > 1.5 * wild["p2p 0->2"].relative_sd
    assert wild["p2p 0->2"].dof > 20  # and the others keep the metric's


def _gpu_runs(count: int, per_run: float, lasting: float, seed: int, runs: int = 6) -> dict:
    """Re-test runs of ``count`` GPU results of one key (``k``) whose true rates differ by
    ``lasting`` CV, each run drawn with ``per_run`` CV."""
    rng = random.Random(seed)
    truths = [NOMINAL * rng.gauss(1, lasting) for _ in range(count)]
    return {(f"h{index // 8}", f"cuda:{index % 8}"):
            [_m(truth * rng.gauss(1, per_run))._replace(host=f"h{index // 8}", device=f"cuda:{index % 8}")
             for _ in range(runs)] for index, truth in enumerate(truths)}


def _centre(lasting) -> float:
    """The median of every re-tested host's means."""
    return statistics.median(mean for host in lasting.hosts for mean in host)


def _results(lasting) -> int:
    return sum(len(host) for host in lasting.hosts)


def _moved(noise, factor: float):
    """``noise`` with every re-tested mean ``factor`` times what it was."""
    hosts = tuple(tuple(mean * factor for mean in host) for host in noise.lasting.hosts)
    return dataclasses.replace(noise, lasting=dataclasses.replace(noise.lasting, hosts=hosts))


def test_the_re_test_measures_what_of_a_spread_outlasts_the_runs_and_the_level_its_gpus_run_at():
    firsts: dict = {}  # with the first pass's results (a sweep's re-test): the lasting part is measured
    quiet = [run_noise(_gpu_runs(32, 0.03, 0.0, seed), firsts)["k"].lasting for seed in range(20)]
    # GPUs that differ by nothing: their means of six runs scatter by 3 % / sqrt(6) alone
    assert statistics.median(q.relative_variance for q in quiet) < 0.005 ** 2
    assert all(_results(q) >= 28 and q.noise_share == pytest.approx(0.03 ** 2 / 6, rel=0.35) for q in quiet)
    assert all(abs(_centre(q) / NOMINAL - 1) < 0.01 for q in quiet)
    lasting = [run_noise(_gpu_runs(32, 0.01, 0.03, seed), firsts)["k"].lasting for seed in range(20)]
    assert 0.025 < statistics.median(q.relative_variance for q in lasting) ** 0.5 < 0.035
    # too few results to tell (one host's seven GPUs), or no sweep's re-test: nothing measured
    assert run_noise(_gpu_runs(MIN_LASTING_RESULTS - 1, 0.03, 0.0, 1), firsts)["k"].lasting is None
    assert run_noise(_gpu_runs(32, 0.03, 0.0, 1))["k"].lasting is None
    # four GPUs 10 % slow among 28 (those the re-test was for) widen neither the lasting part nor move the level
    runs = _gpu_runs(32, 0.03, 0.0, 2)
    for place in (("h0", "cuda:1"), ("h0", "cuda:5"), ("h2", "cuda:0"), ("h3", "cuda:7")):
        runs[place] = [m._replace(value=m.value * 0.9) for m in runs[place]]
    slowed = run_noise(runs, firsts)["k"].lasting
    assert _results(slowed) == 28 and slowed.relative_variance < 0.005 ** 2
    assert abs(_centre(slowed) / NOMINAL - 1) < 0.01
    # a host 40 % slow on every GPU beside a healthy one (a paused job's suspect and a reference):
    # each GPU against its own host's median, nothing lasts (both hosts' means together spread 38 %)
    runs = _gpu_runs(16, 0.02, 0.0, 4)
    for index in range(8):
        runs[("h0", f"cuda:{index}")] = [m._replace(value=m.value * 0.6) for m in runs[("h0", f"cuda:{index}")]]
    assert run_noise(runs, firsts)["k"].lasting.relative_variance < 0.005 ** 2


def test_a_small_fleets_spread_high_by_chance_does_not_hide_a_slow_gpu_its_re_test_shows():
    # 32 values at 3 % noise spread 4.65 % by chance: from the fleet alone 3.4 % of it was taken to
    # last, and a GPU 10 % slow, 9.7 % below on six runs, stood 2.6 sigma of such a mean below
    job = dataclasses.replace(_reference(4.65), level_values=32)
    runs = _gpu_runs(32, 0.03, 0.0, 7)
    noise = run_noise(runs, {})["k"]
    slow = [NOMINAL * 0.903 * f for f in (1.01, 0.98, 1.0, 0.97, 1.03, 1.01)]
    alone = judge_runs(job, slow, dataclasses.replace(noise, lasting=None), 4.3, THRESHOLDS)
    judged = judge_runs(job, slow, noise, 4.3, THRESHOLDS)
    assert not alone.confirmed and judged.confirmed and judged.robust_z < 1.5 * alone.robust_z
    # a healthy GPU's six runs are no closer to a finding for it
    healthy = [NOMINAL * f for f in (0.98, 0.97, 1.0, 0.99, 1.01, 0.98)]
    assert not judge_runs(job, healthy, noise, 4.3, THRESHOLDS).confirmed


def test_the_level_a_re_test_found_is_weighed_in_where_it_agrees_and_never_raises_the_level():
    job = dataclasses.replace(_reference(3.0), level_values=32)
    noise = run_noise(_gpu_runs(32, 0.03, 0.0, 3), {})["k"]
    warn = THRESHOLDS.deficit_warn_pct
    for factor in (0.995, 1.004):
        moved = _moved(noise, factor * NOMINAL / _centre(noise.lasting))
        centre = _centre(moved.lasting)
        level, variance = retest_level(job, moved, warn)
        assert variance < (LEVEL_ERROR * job.spread) ** 2 / 32 / 3  # far surer than 32 single values
        if centre < NOMINAL:  # pooled, nearer the re-test's than the fleet's
            assert centre < level.value < (centre + NOMINAL) / 2
        else:  # never raised
            assert level.value == NOMINAL
    # a re-test far from the fleet's level (its hosts 4 % low, not slow as a whole), a baseline,
    # no re-test: as it was
    far = _moved(noise, 0.96 * NOMINAL / _centre(noise.lasting))
    assert retest_level(job, far, warn) == (job, None)
    assert retest_level(dataclasses.replace(job, source=BASELINE), noise, warn) == (
        dataclasses.replace(job, source=BASELINE), None)
    assert retest_level(job, dataclasses.replace(noise, lasting=None), warn) == (job, None)


@pytest.mark.parametrize("slowdown", [0.90, 0.92, 0.60])
def test_a_host_slow_as_a_whole_gives_the_re_test_no_level(slowdown):
    # A 3-node job, one node slow on every GPU, re-tested with one reference: the median of their
    # 16 means fell between the two hosts, 3.7 % under the fleet's level, and the node, judged
    # against that, was named by one GPU of eight (seed 20 of the detection benchmark's job3 at 3 %).
    job = dataclasses.replace(_reference(3.0), level_values=3)
    runs = _gpu_runs(16, 0.03, 0.0, 11)
    for index in range(8):
        runs[("h0", f"cuda:{index}")] = [m._replace(value=m.value * slowdown) for m in runs[("h0", f"cuda:{index}")]]
    noise = run_noise(runs, {})["k"]
    slow, healthy = noise.lasting.hosts
    assert statistics.median(slow) < statistics.median(healthy) * slowdown * 1.01
    assert _centre(noise.lasting) < statistics.median(healthy) * 0.985  # both hosts' means: pulled down
    assert [len(host) for host in level_hosts(noise.lasting, NOMINAL, THRESHOLDS.deficit_warn_pct)] == [8]
    level, _ = retest_level(job, noise, THRESHOLDS.deficit_warn_pct)
    assert level.value > NOMINAL * 0.985  # the reference's level, not between the two
    # the same host only 3 % low is at the fleet's level within the warn band: it gives its means
    runs = _gpu_runs(16, 0.03, 0.0, 11)
    for index in range(8):
        runs[("h0", f"cuda:{index}")] = [m._replace(value=m.value * 0.97) for m in runs[("h0", f"cuda:{index}")]]
    assert len(level_hosts(run_noise(runs, {})["k"].lasting, NOMINAL, THRESHOLDS.deficit_warn_pct)) == 2


def test_in_a_small_fleet_whose_gpus_differ_by_themselves_as_much_as_their_runs_no_healthy_gpu_is_named():
    # 8 nodes, GPUs 2 % apart for good and runs 2 % apart: taken from the fleet's 64 single values
    # alone the lasting part came out short, and a GPU 2 to 5 % under the median of the true rates
    # was named in 16 of 40 such sweeps. Now in two, each GPU named 3 % or more under (a GPU at
    # 2.5 sigmas of what they differ by is a warning's worth slower than its fleet).
    named = []
    for seed in range(1, 41):
        fleet = _Fleet(8, per_run=0.02, lasting=0.02, seed=seed)
        first = fleet.run(1)
        again, _ = _retest(fleet, first)
        median = statistics.median(fleet.truth.values())
        named += [(seed, f.host, f.gpu, round(100 * (1 - fleet.truth[(f.host, f.gpu)] / median), 1))
                  for f in analyse(first, THRESHOLDS, retest_hosts=again).findings if f.kind == "slow_gpu"]
    assert len({seed for seed, *_ in named}) <= 2 and all(deficit >= 3 for *_, deficit in named), named


def test_at_3_pct_noise_two_gpus_10_pct_slow_in_8_node_runs_are_named_in_every_seed():
    wrong = []
    for seed in range(1, 41):
        slow = {(seed % 8, seed % 8): 0.9, ((seed + 1) % 8, (seed * 3) % 8): 0.9}
        wrong += _found_in_every_seed(8, 0.03, slow, range(seed, seed + 1))
    assert wrong == []
