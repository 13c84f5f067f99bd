"""A GPU's slide against its siblings, and a node median's own noise (gpudiag.store.trend): a GPU's
own line cannot tell where it started, so at 2 % noise a slide of 2 % a sweep over four sweeps is
2.2 standard errors and was watched 8 times in 20; against its siblings, with its start held to
their level, it is 3.4. A node's median scatters 1.25 / √8 of one GPU, and was judged with one
GPU's noise. Series are built as ``Store.host_history`` rows, newest first."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from gpudiag.analysis.noisy import MEDIAN_EFFICIENCY
from gpudiag.store.trend import fleet_trends, host_trends
from gpudiag.store.trendfit import (
    HOST_NOISE_TOLERANCE,
    Noise,
    TrendPoint,
    fit_trend,
    median_noise,
    ratio_noise,
    residual_squares,
    sibling_ratios,
    sibling_slopes,
    theil_sen,
    theil_sen_spread,
)
from gpudiag.store.trendseries import FLEET_NOISE_HOSTS, fleet_noise, fleet_ratio_noise, noise_hosts
from gpudiag.store.trendwords import trend_findings

LEVEL = 740.0


def _rows(series: dict[int, list[float]], model: str | None = None) -> list[dict]:
    sweeps = len(next(iter(series.values())))
    rows = []
    for index in range(sweeps):
        per_gpu = [[gpu, values[index]] for gpu, values in sorted(series.items())]
        figure = {"metric": "gemm.tflops", "params": {"dtype": "bf16"}, "unit": "TFLOP/s", "per_gpu": per_gpu}
        if model is not None:
            figure["model"] = model
        rows.append({"sweep_id": f"2026010{index}T000000Z-{index:04x}", "started_at": f"2026-01-0{index + 1}T00:00:00Z",
                     "status": "ok", "error": None, "figures": [figure]})
    return list(reversed(rows))


def _trends(series: dict[int, list[float]]):
    return _trends_of(_rows(series))


def _trends_of(rows: list[dict]):
    return host_trends("node001", rows, [], threshold_pct=5.0, min_sweeps=3, slope_z=3.0, warn_pct=3.0)


def _noisy(rng: random.Random, factors: list[float], cv: float) -> list[float]:
    return [LEVEL * factor * rng.gauss(1.0, cv) for factor in factors]


def _points(values: list[float]) -> list[TrendPoint]:
    return [TrendPoint(f"sweep{index}", f"2026-01-0{index + 1}T00:00:00Z", value) for index, value in enumerate(values)]


def _watched(series: dict[int, list[float]]) -> set[int | None]:
    return {trend.gpu for trend in _trends(series).watches}


def test_a_gpu_falling_away_from_flat_siblings_is_watched_and_says_so_against_them():
    rng = random.Random(2)
    series = {gpu: _noisy(rng, [1.0] * 4, 0.002) for gpu in range(7)}
    series[7] = [LEVEL * f for f in (1.0, 0.98, 0.96, 0.94)]
    assert sibling_ratios([(7, _points(series[7]))]) == {}  # alone, it has no siblings
    slide = _trends(series).figures[0].gpus[7]
    assert slide.siblings is not None and slide.siblings.held
    assert slide.siblings.slope * 100 == pytest.approx(-2.0, abs=0.15) and slide.siblings.z < -10
    assert slide.to_dict()["siblings"]["held_to_siblings"] is True


def test_a_gpu_whose_own_line_rises_while_it_falls_away_from_its_siblings_is_watched_against_them():
    # Its siblings 3 % faster each sweep (a driver's gain it does not share), itself a little up:
    # its own line rises, and it falls 2.5 % a sweep away from them. Its own line's sign decided
    # before its siblings were asked: no watch. The finding's figures are the siblings' too.
    series = {gpu: [LEVEL * f * (1 + 0.001 * gpu) for f in (1.0, 1.03, 1.06, 1.09)] for gpu in range(7)}
    series[7] = [LEVEL * f for f in (1.0, 1.005, 1.01, 1.015)]
    trends = _trends(series)
    slide = trends.figures[0].gpus[7]
    assert slide.fit is not None and slide.fit.slope > 0
    assert slide.by_siblings and slide.verdict == "watch"
    (finding,) = trend_findings(trends)
    siblings = statistics.median(values[-1] for gpu, values in series.items() if gpu != 7)
    assert (finding.gpu, finding.reference_source) == (7, "siblings")
    assert finding.value == pytest.approx(series[7][-1], abs=1e-3)
    assert finding.reference == pytest.approx(siblings, abs=1e-3)
    assert finding.deficit_pct == pytest.approx(100 * (1 - series[7][-1] / siblings), abs=0.01)
    assert finding.deficit_pct > 6


def _slides(cv: float, fleet_hosts: int, fleet_cv: float | None = None, seeds: int = 40) -> tuple[int, int]:
    """Of ``seeds`` hosts whose GPU 7 loses 2 % a sweep over 4 sweeps at ``cv`` noise: how many
    have it watched or failed, and how many flat GPUs are, judged with the noise of a fleet of
    ``fleet_hosts`` more flat hosts at ``fleet_cv`` (default ``cv``; 0 hosts: the host's own)."""
    watched, flat = 0, 0
    for seed in range(seeds):
        rng = random.Random(seed)
        series = {gpu: _noisy(rng, [1.0] * 4, cv) for gpu in range(7)}
        series[7] = _noisy(rng, [1.0, 0.98, 0.96, 0.94], cv)
        histories = {f"node{100 + host}": _rows({gpu: _noisy(rng, [1.0] * 4, fleet_cv or cv) for gpu in range(8)})
                     for host in range(fleet_hosts)}
        histories["node001"] = _rows(series)
        fleet = fleet_noise(histories, {}) if fleet_hosts else None
        trends = host_trends("node001", _rows(series), [], threshold_pct=5.0, min_sweeps=3, slope_z=3.0,
                             warn_pct=3.0, fleet_noise=fleet)
        gpus = {trend.gpu for trend in trends.watches + trends.degradations}
        watched += 7 in gpus
        flat += len(gpus - {7, None})
    return watched, flat


def test_at_1_pct_noise_a_gpu_losing_2_pct_a_sweep_over_4_sweeps_is_watched_nearly_always():
    # Against its siblings its slope is 6.8 standard errors (its own line's: 4.4).
    assert _slides(0.01, fleet_hosts=15) >= (38, 0)


def test_the_fleets_noise_lowers_a_gpus_bar_to_the_sigma_it_means():
    # A host's own 16 degrees of freedom raise the 3.5-sigma bar to 4.4: at 1.5 % noise (the slide
    # 4.5 standard errors) a 16-host fleet's noise finds it 33 times in 40, the host's own 20.
    with_fleet, flat = _slides(0.015, fleet_hosts=15)
    alone, _ = _slides(0.015, fleet_hosts=0)
    assert with_fleet >= 30 and with_fleet >= alone + 8 and flat == 0
    assert fleet_ratio_noise({"node001": _rows({0: [1.0] * 4})}, {}) == {}  # one GPU has no siblings


def test_a_host_noisier_than_its_fleet_is_judged_by_its_own_noise():
    # Flat GPUs at 2 % noise among hosts at 0.5 %: judged by the fleet's, flat GPUs of the host
    # would slide; past HOST_NOISE_TOLERANCE times it, the host's own decides.
    rng = random.Random(9)
    noisy = {gpu: _noisy(rng, [1.0] * 4, 0.02) for gpu in range(8)}
    quiet = {f"node{100 + host}": _rows({gpu: _noisy(rng, [1.0] * 4, 0.005) for gpu in range(8)})
             for host in range(15)}
    fleet = fleet_ratio_noise({**quiet, "node001": _rows(noisy)}, {})
    own = ratio_noise(sibling_ratios([(gpu, _points(values)) for gpu, values in noisy.items()]))
    assert own.sigma > HOST_NOISE_TOLERANCE * fleet[(None, "gemm.tflops bf16")].sigma
    slopes = sibling_slopes(sibling_ratios([(gpu, _points(values)) for gpu, values in noisy.items()]),
                            fleet[(None, "gemm.tflops bf16")])
    assert all(slope.noise == pytest.approx(own.sigma) and slope.dof == own.dof for slope in slopes.values())
    # A host as quiet as its fleet takes the fleet's noise, with its degrees of freedom.
    (name, pooled), = fleet_ratio_noise(quiet, {}).items()
    host_rows = quiet["node100"]
    ratios = sibling_ratios([(gpu, _points([row["figures"][0]["per_gpu"][gpu][1] for row in reversed(host_rows)]))
                             for gpu in range(8)])
    assert ratio_noise(ratios).dof < pooled.dof and ratio_noise(ratios).sigma <= HOST_NOISE_TOLERANCE * pooled.sigma
    assert all(slope.dof == pooled.dof for slope in sibling_slopes(ratios, pooled).values())


def test_a_gpu_that_started_below_its_siblings_and_stays_there_is_no_slide():
    # Held to its siblings' level, a GPU 5 % under them on every sweep would fit a fall; its free
    # line starts far off them, so it is not held, and a flat line is flat.
    rng = random.Random(4)
    series = {gpu: _noisy(rng, [1.0] * 4, 0.005) for gpu in range(7)}
    series[7] = _noisy(rng, [0.95] * 4, 0.005)
    slow = _trends(series).figures[0].gpus[7]
    assert slow.siblings is not None and not slow.siblings.held and abs(slow.siblings.z) < 3
    assert slow.verdict == "none"


def test_the_siblings_spread_of_gpus_that_differ_by_themselves_loosens_the_hold():
    # GPUs 2 % apart by themselves at 0.3 % noise: the hold is as loose as they differ.
    rng = random.Random(6)
    offsets = [rng.gauss(1.0, 0.02) for _ in range(8)]
    series = {gpu: _noisy(rng, [offsets[gpu]] * 4, 0.003) for gpu in range(8)}
    slopes = sibling_slopes(sibling_ratios([(gpu, _points(values)) for gpu, values in series.items()]))
    assert all(0.01 < slope.spread < 0.04 for slope in slopes.values())
    assert _watched(series) == set()


def test_a_sibling_watch_is_a_watch_finding_of_that_gpu_that_drains_nothing():
    for seed in range(40):
        rng = random.Random(seed)
        series = {gpu: _noisy(rng, [1.0] * 4, 0.02) for gpu in range(7)}
        series[7] = _noisy(rng, [1.0, 0.98, 0.96, 0.94], 0.02)
        trends = _trends(series)
        if any(trend.by_siblings for trend in trends.watches):
            break
    (finding,) = trend_findings(trends)
    assert (finding.kind, finding.gpu, finding.severity, finding.action) == (
        "slow_degradation", 7, "watch", "watch")
    assert "against the median of its siblings" in finding.evidence and "its start held" in finding.evidence


def test_a_node_median_is_judged_by_a_medians_noise_not_one_gpus():
    assert median_noise(Noise(0.02, 16), [8, 8, 8]).sigma == pytest.approx(0.02 * MEDIAN_EFFICIENCY / math.sqrt(8))
    assert median_noise(Noise(0.02, 16), [1]).sigma == 0.02  # a median of one is that one
    # A whole node losing 2 % a sweep over 4 sweeps at 2 % noise, in a fleet of 8 nodes: watched
    # or failed as a node, judged with the fleet's GPUs' noise (a bar of 3.5 on hundreds of
    # degrees of freedom); alone, with its own 16 degrees of freedom (3.5 sigma raised to 4.4),
    # less often; and a flat node's median seldom.
    found, alone, flat = 0, 0, 0
    for seed in range(20):
        rng = random.Random(100 + seed)
        histories = {f"node{host:03d}": _rows({gpu: _noisy(rng, [1.0] * 4, 0.02) for gpu in range(8)})
                     for host in range(1, 8)}
        histories["node008"] = _rows({gpu: _noisy(rng, [1.0, 0.98, 0.96, 0.94], 0.02) for gpu in range(8)})
        trends = fleet_trends(histories, {}, 5.0, 3, 3.0, warn_pct=3.0)
        found += trends["node008"].figures[0].median.verdict in ("watch", "fail")
        flat += sum(trends[f"node{host:03d}"].figures[0].median.verdict != "none" for host in range(1, 8))
        alone += _trends_of(histories["node008"]).figures[0].median.verdict in ("watch", "fail")
    assert found >= 19 and alone < found and flat == 0, (found, alone, flat)


def test_a_theil_sen_slope_is_judged_by_its_own_spread_not_the_least_squares_one():
    # Over 60,000 flat normal series of 5 sweeps, Theil–Sen's slope scattered 1.07 times the
    # least-squares slope's error; judged by that error, flat parts crossed the bar more often
    # than it says. The fit's z carries the factor; three sweeps have none (1.00).
    rng = random.Random(4)
    slopes = []
    for _ in range(4000):
        slope, _ = theil_sen([rng.gauss(0, 1) for _ in range(5)])
        slopes.append(slope)
    least_squares = 1 / math.sqrt(10)  # 1 / √Σ(x − x̄)² at five sweeps
    assert 1.02 < statistics.pstdev(slopes) / least_squares < 1.12
    assert theil_sen_spread(3) == 1.0 and 1.05 < theil_sen_spread(5) < 1.09 and theil_sen_spread(40) > 1.04
    fit = fit_trend([100.0, 99.0, 98.0, 97.0, 96.0], Noise(1.0, 1000))
    assert fit.slope_z == pytest.approx(-1.0 * math.sqrt(10) / theil_sen_spread(5))


def test_a_flat_gpu_with_siblings_is_watched_against_them_only_not_on_its_own_line():
    # 8 flat GPUs at 2 % noise over 4 sweeps: a GPU's own line, which cannot tell where it
    # started, watched about as many flat GPUs again as its siblings did (0.9 % of them, where
    # 0.5 % against its siblings alone), and found almost no slide the siblings missed
    rng = random.Random(11)
    watched = judged = own_alone = 0
    for _ in range(400):
        series = {gpu: _noisy(rng, [1.0] * 4, 0.02) for gpu in range(8)}
        for trend in _trends(series).figures[0].gpus:
            judged += 1
            watched += trend.watched
            own_alone += trend.watched and not trend.by_siblings
    assert own_alone == 0  # every GPU here has siblings: none is watched on its own line
    assert watched / judged < 0.008, (watched, judged)


def test_a_gpus_slow_degradation_is_a_fall_against_its_siblings_too():
    # A flat GPU's own line crosses the 3-sigma bar about as often as the bar says (0.12 % of
    # GPUs at 2 % noise over 4 sweeps: 29 of these 24,000), mostly where its first sweep was high
    # by chance; against its siblings, its start held to their level, few of those fall at all.
    rng = random.Random(7)
    hosts = [{gpu: _noisy(rng, [1.0] * 4, 0.02) for gpu in range(8)} for _ in range(3000)]
    fleet = fleet_noise({f"node{index:04d}": _rows(series) for index, series in enumerate(hosts[:64])}, {})
    failed = own_line = 0
    for series in hosts:
        trends = host_trends("node001", _rows(series), [], threshold_pct=5.0, min_sweeps=3, slope_z=3.0,
                             warn_pct=3.0, fleet_noise=fleet)
        failed += len(trends.degradations)
        own_line += sum(1 for trend in trends.figures[0].gpus if trend.fit.slope_z <= -3.54
                        and -trend.fit.change_pct >= 5.0 and trend.points[-1].value <= trend.fit.first * 0.975)
    assert own_line >= 15 and failed <= 4
    # A GPU losing 3 % a sweep among flat siblings is one; a whole node losing 3 % a sweep is its
    # median's, each GPU flat against the others.
    slide = {gpu: _noisy(rng, [1.0] * 4, 0.01) for gpu in range(7)}
    slide[7] = _noisy(rng, [1.0, 0.97, 0.94, 0.91], 0.01)
    assert [trend.gpu for trend in _trends(slide).degradations] == [7]
    node = _trends({gpu: _noisy(rng, [1.0, 0.97, 0.94, 0.91], 0.01) for gpu in range(8)})
    assert [trend.gpu for trend in node.degradations] == [None]
    (finding,) = trend_findings(node)
    assert finding.gpu is None and finding.host == "node001"


def test_a_sweep_judges_each_host_as_history_does_with_the_fleets_noise_from_256_hosts_at_most():
    rng = random.Random(11)
    histories = {f"node{index:03d}": _rows({gpu: _noisy(rng, [1.0] * 4, 0.01) for gpu in range(8)})
                 for index in range(300)}
    histories["node007"] = _rows({**{gpu: _noisy(rng, [1.0] * 4, 0.01) for gpu in range(7)},
                                  7: _noisy(rng, [1.0, 0.98, 0.96, 0.94], 0.01)})
    fleet = fleet_noise(histories, {})
    (noise,) = fleet.ratios.values()
    chosen = noise_hosts(histories)
    assert len(chosen) == FLEET_NOISE_HOSTS < len(histories) and chosen == noise_hosts(reversed(histories))
    assert 100 <= sum(int(host[4:]) < 150 for host in chosen) <= 156  # about half from each half of the names
    assert noise.dof == len(chosen) * 8 * 2 and noise.sigma == pytest.approx(0.0107, rel=0.1)
    swept = fleet_trends(histories, {}, 5.0, 3, 3.0, warn_pct=3.0)
    for host in ("node007", "node123", "node299"):
        alone = host_trends(host, histories[host], [], 5.0, 3, 3.0, warn_pct=3.0, fleet_noise=fleet)
        assert swept[host].to_dict() == alone.to_dict()
    assert [trend.gpu for trend in swept["node007"].watches + swept["node007"].degradations] == [7]


@pytest.mark.parametrize("alternate", [False, True], ids=["models_in_halves", "models_alternating"])
def test_each_gpu_model_is_judged_by_its_own_models_noise_not_the_fleets_pooled(alternate: bool):
    # Half the fleet's hosts are a model at 2 % noise, half one at 0.5 %: pooled over both (1.5 %),
    # a noisy model's flat GPU was judged at 2.6 of its own sigma where 3.5 is meant, and a quiet
    # model's GPU losing 1 % a sweep (7 of its standard errors, 2.5 of the pooled) was seldom seen.
    # Where the models alternate by name, a stride over the names had sampled one model alone.
    rng = random.Random(13)
    noisy, quiet = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
    names = [f"node{index:03d}" for index in range(400)]
    noisy_hosts = names[0::2] if alternate else names[:200]
    quiet_hosts = names[1::2] if alternate else names[200:]
    histories = {host: _rows({gpu: _noisy(rng, [1.0] * 4, 0.02) for gpu in range(8)}, noisy) for host in noisy_hosts}
    histories.update({host: _rows({gpu: _noisy(rng, [1.0] * 4, 0.005) for gpu in range(8)}, quiet)
                      for host in quiet_hosts})
    sliding = quiet_hosts[::20]
    for host in sliding:
        histories[host] = _rows({**{gpu: _noisy(rng, [1.0] * 4, 0.005) for gpu in range(7)},
                                 7: _noisy(rng, [1.0, 0.99, 0.98, 0.97], 0.005)}, quiet)
    fleet = fleet_ratio_noise(histories, {})
    assert set(fleet) == {(noisy, "gemm.tflops bf16"), (quiet, "gemm.tflops bf16")}
    assert fleet[(noisy, "gemm.tflops bf16")].sigma > 3 * fleet[(quiet, "gemm.tflops bf16")].sigma
    trends = fleet_trends(histories, {}, 5.0, 3, 3.0, warn_pct=0.5)
    flagged = {host: {trend.gpu for trend in found.watches + found.degradations} for host, found in trends.items()}
    # 1,600 flat GPUs of the noisy model at 3.5 sigma: one or two by chance (pooled: about 9)
    assert sum(len(flagged[host]) for host in noisy_hosts) <= 3, {host: flagged[host] for host in noisy_hosts}
    assert sum(flagged[host] == {7} for host in sliding) >= 9, {host: flagged[host] for host in sliding}


def test_a_sweeps_mean_of_k_runs_weighs_k_and_its_scatter_is_read_as_one_runs():
    # A GPU's latest sweep re-tested in 3 runs: its ratio scatters 1/√3 of one run's. Unweighted,
    # the noise read from such series came out low; weighted, it is one run's, and the slope's
    # error shrinks as the runs it rests on grow.
    rng = random.Random(17)
    sigma, plain, weighted = 0.02, [], []
    for _ in range(4000):
        values = [rng.gauss(0.0, sigma), rng.gauss(0.0, sigma), rng.gauss(0.0, sigma), rng.gauss(0.0, sigma / 3 ** 0.5)]
        plain.append(residual_squares(values) / 2)
        weighted.append(residual_squares(values, [1, 1, 1, 3]) / 2)
    assert statistics.fmean(weighted) == pytest.approx(sigma ** 2, rel=0.06)
    assert statistics.fmean(plain) < 0.93 * sigma ** 2
    assert residual_squares([0.0, -0.02, -0.04, -0.06], [1, 1, 3, 3]) == pytest.approx(0.0, abs=1e-15)
    # the same slide, its last two sweeps of 3 runs each: the same slope, a smaller error
    flat = {gpu: ((0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0)) for gpu in range(1, 8)}
    ratios = {0: ((0, 0.0), (1, -0.02), (2, -0.04), (3, -0.06)), **flat}
    fleet = Noise(0.02, 4000)
    once = sibling_slopes(ratios, fleet)[0]
    thrice = sibling_slopes(ratios, fleet, {gpu: (1, 1, 3, 3) for gpu in ratios})[0]
    assert thrice.slope == pytest.approx(once.slope) and thrice.z < once.z * 1.5 < 0
    assert thrice.runs == (1, 1, 3, 3) and once.runs == () and thrice.to_dict()["runs"] == [1, 1, 3, 3]
