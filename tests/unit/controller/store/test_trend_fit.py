"""The trend of a figure over stored sweeps (gpudiag.store.trend): a robust line through every sweep,
its fitted change against the threshold, and the per-sweep noise deciding whether its slope is
real. Series are built as ``Store.host_history`` rows, newest first."""

from __future__ import annotations

import random

import pytest

from gpudiag.analysis.tails import student_bar as slope_bar
from gpudiag.store.trend import host_trends
from gpudiag.store.trendfit import Noise, fit_trend, pooled_noise, theil_sen

LEVEL = 740.0  # TFLOP/s


def _rows(per_gpu_series: dict[int, list[float]]) -> list[dict]:
    """History rows (newest first) of one host whose GPU ``g`` measured ``series[g][i]`` in sweep i."""
    sweeps = len(next(iter(per_gpu_series.values())))
    rows = []
    for index in range(sweeps):
        per_gpu = [[gpu, values[index]] for gpu, values in sorted(per_gpu_series.items()) if index < len(values)]
        figure = {"metric": "gemm.tflops", "params": {"dtype": "bf16"}, "unit": "TFLOP/s", "per_gpu": per_gpu}
        rows.append({"sweep_id": f"2026010{index}T000000Z-{index:04x}", "started_at": f"2026-01-0{index + 1}T00:00:00Z",
                     "status": "ok", "error": None, "figures": [figure]})
    return list(reversed(rows))


def _host(per_gpu_series: dict[int, list[float]]):
    return host_trends("node001", _rows(per_gpu_series), [], threshold_pct=5.0, min_sweeps=3, slope_z=3.0)


def _flagged(per_gpu_series: dict[int, list[float]]) -> set[int | None]:
    return {trend.gpu for trend in _host(per_gpu_series).degradations}


def _noisy(rng: random.Random, factors: list[float], cv: float) -> list[float]:
    return [LEVEL * factor * rng.gauss(1.0, cv) for factor in factors]


def test_theil_sen_is_the_median_pairwise_slope_and_shrugs_off_one_odd_sweep():
    assert theil_sen([10.0, 8.0, 6.0, 4.0]) == pytest.approx((-2.0, 10.0))
    slope, intercept = theil_sen([10.0, 8.0, 60.0, 4.0])  # one wild sweep
    assert slope == pytest.approx(-2.0, abs=1.0) and intercept == pytest.approx(10.0, abs=2.0)
    with pytest.raises(ValueError):
        theil_sen([1.0])


def test_fewer_than_three_sweeps_have_no_line_and_are_said_to_be_too_short():
    assert fit_trend([740.0, 700.0]) is None
    trends = _host({0: [740.0, 741.0, 739.0, 740.0], 3: [740.0, 690.0]})  # GPU 3 gone for two sweeps
    by_gpu = {trend.gpu: trend for trend in trends.figures[0].gpus}
    assert by_gpu[3].fit is None and not by_gpu[3].degraded
    assert [(t["gpu"], t["sweeps"]) for t in trends.to_dict()["unfitted"]] == [(3, 2)]


def test_a_steady_fall_is_flagged_with_its_slope_fitted_change_and_sweeps():
    trends = _host({0: [740.0, 740.0, 740.0, 740.0], 3: [740.0, 725.2, 710.4, 695.6]})
    (flag,) = trends.degradations
    assert flag.gpu == 3 and flag.fit is not None
    assert flag.fit.slope == pytest.approx(-14.8) and flag.fit.slope_pct == pytest.approx(-2.0)
    assert flag.fit.change_pct == pytest.approx(-6.0) and flag.fit.sweeps == 4
    assert flag.to_dict()["fit"]["fitted_change_pct"] == pytest.approx(-6.0)


def test_one_odd_first_sweep_is_no_trend_where_first_against_latest_saw_a_fall():
    # A lucky first sweep 6 % high, then flat: the latest is 5.7 % below the first, and the sweep
    # before it as far, which the first-against-latest rule flagged; the line through all is flat-ish.
    assert _flagged({0: [740.0] * 4, 3: [784.4, 740.0, 739.0, 740.0]}) == set()


def test_a_single_dip_in_the_latest_sweep_is_no_slow_degradation():
    assert _flagged({0: [740.0] * 4, 3: [740.0, 741.0, 739.0, 688.0]}) == set()


def test_the_noise_decides_whether_a_fall_past_the_threshold_is_real():
    # The same 6 % fitted fall: real on a GPU whose sweeps sit on their line, not on one that
    # scatters 5 % a sweep (its own residuals, not its quiet siblings', judge it).
    steady = [740.0, 725.2, 710.4, 695.6, 680.8]
    scattered = [740.0, 770.0, 680.0, 735.0, 690.0]
    quiet = {gpu: [740.0 + gpu * 0.1] * 5 for gpu in range(7)}
    assert _flagged({**quiet, 7: steady}) == {7}
    fit = fit_trend(scattered, pooled_noise(quiet.values()))
    assert fit is not None and fit.change_pct is not None and fit.change_pct <= -5.0 and fit.slope_z > -3.0
    assert _flagged({**quiet, 7: scattered}) == set()


def test_a_figure_back_at_its_level_in_the_latest_sweep_is_no_slow_degradation():
    # A healthy GPU's memory bandwidth in 5 sweeps at 1 % noise (bench/detection.py's history row,
    # seed 11): 1.5, 3.6 and 4.7 % low, then 1.3 %. Its line fell 5.2 %, 4 sigma of its slope.
    rng = random.Random(11)
    back = [LEVEL * value / 2961.9 for value in (2961.9, 2916.6, 2855.3, 2823.5, 2923.0)]
    series = {gpu: _noisy(rng, [1.0] * 5, 0.01) for gpu in range(7)}
    fit = fit_trend(back, pooled_noise(series.values()))
    assert fit is not None and fit.change_pct is not None and fit.change_pct < -5.0 and fit.slope_z < -3.5
    assert _flagged({**series, 7: back}) == set()
    # the same fall with its latest sweep still 5 % low is one
    assert _flagged({**series, 7: [*back[:4], back[0] * 0.95]}) == {7}


@pytest.mark.parametrize("seed", range(1, 11))
def test_flat_gpus_with_sweep_noise_are_never_flagged(seed: int):
    rng = random.Random(seed)
    assert _flagged({gpu: _noisy(rng, [1.0] * 5, 0.01) for gpu in range(8)}) == set()


@pytest.mark.parametrize("seed", range(1, 11))
def test_a_gpu_losing_2_percent_a_sweep_for_4_sweeps_is_flagged_alone(seed: int):
    rng = random.Random(seed)
    series = {gpu: _noisy(rng, [1.0] * 5, 0.01) for gpu in range(7)}
    series[7] = _noisy(rng, [1.0, 0.98, 0.96, 0.94, 0.92], 0.01)
    assert _flagged(series) == {7}


def test_the_slope_bar_is_the_student_t_quantile_of_the_same_tail():
    assert slope_bar(3.0, 0) == 3.0  # a known noise: the sigmas themselves
    assert slope_bar(3.0, 500) == pytest.approx(3.0, abs=0.02) and slope_bar(3.0, 500) > slope_bar(3.0, 5000) > 3.0
    # Exact for 1 and 2 degrees of freedom (Cauchy; t with 2: (2p - 1) / sqrt(2p(1 - p))), tail 0.00135.
    assert slope_bar(3.0, 1) == pytest.approx(235.8, rel=0.01)
    assert slope_bar(3.0, 2) == pytest.approx(19.2, rel=0.01)
    # Student t's 0.99865 quantile: 4.3 with 8 degrees of freedom, 3.55 with 16, nearer 3 with more.
    assert slope_bar(3.0, 8) == pytest.approx(4.3, abs=0.1)
    assert slope_bar(3.0, 16) == pytest.approx(3.55, abs=0.05)
    assert 3.0 < slope_bar(3.0, 60) < slope_bar(3.0, 16) < slope_bar(3.0, 8)


def test_the_pooled_noise_is_unbiased_and_counts_its_degrees_of_freedom():
    rng = random.Random(5)
    estimates = [pooled_noise([[rng.gauss(0.0, 1.0) for _ in range(4)] for _ in range(8)]) for _ in range(2000)]
    assert {noise.dof for noise in estimates} == {16}  # 8 series of 4 sweeps, 2 for each line
    assert sum(noise.sigma ** 2 for noise in estimates) / len(estimates) == pytest.approx(1.0, abs=0.05)
    assert pooled_noise([[1.0, 2.0]]) == Noise(0.0, 0)  # too short to fit: no noise, never a guess


def test_a_flat_host_swept_four_times_at_two_percent_noise_is_rarely_flagged():
    # 8 GPUs of one host, 4 sweeps of 2 % noise: the fall threshold is 1.8 sigma of the fitted
    # change, so the slope's bar decides; estimated from 16 degrees of freedom, it must be raised.
    rng = random.Random(11)
    flagged = sum(len(_flagged({gpu: _noisy(rng, [1.0] * 4, 0.02) for gpu in range(8)})) for _ in range(400))
    assert flagged <= 4  # of 3,600 trends (400 hosts × 8 GPUs and their median)


def test_a_steady_fall_whose_own_steps_look_loose_by_luck_is_judged_by_its_hosts_noise():
    # GPU 7 loses 2 % a sweep at 1 % noise, its own residuals 2.4 times its siblings' by luck:
    # judged by its own, the slope was not real; judged by its host's pool, it is.
    rng = random.Random(3)
    series = {gpu: _noisy(rng, [1.0] * 5, 0.01) for gpu in range(7)}
    series[7] = [LEVEL * f for f in (1.0, 0.965, 0.975, 0.925, 0.928)]
    own = fit_trend(series[7])
    assert own is not None and own.slope_z > -slope_bar(3.0, own.dof)
    assert _flagged(series) == {7}
