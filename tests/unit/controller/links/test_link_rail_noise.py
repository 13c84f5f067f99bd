"""A small job's pairs judged against the noise its rails show (gpudiag.links.levels.rail_noise),
a run's noise from figures resting on unequal runs (run_sd), and a lucky pair never lifting the
level a NIC is held against above the line rate (gpudiag.links.acrossrails)."""

import itertools
import random
import statistics

import pytest

from gpudiag.links import LinkResult, attribute_links
from gpudiag.links.acrossrails import across_rails
from gpudiag.links.attribution import DEFAULT_THRESHOLDS
from gpudiag.links.levels import mean_sd, rail_noise, run_sd

RAILS = 8
HEALTHY = 392.0  # Gb/s of a healthy pair at a 400 Gb/s line rate


def test_a_runs_noise_weighs_each_figure_by_the_runs_it_rests_on():
    rng = random.Random(3)
    sigma = 10.0
    groups = []
    for _ in range(400):  # a pair's figures on 8 rails, half of them the mean of 3 runs
        runs = [1, 3] * 4
        groups.append([(HEALTHY + rng.gauss(0, sigma / count ** 0.5), count) for count in runs])
    found, degrees = run_sd(groups)
    assert degrees == 400 * 7 and found == pytest.approx(sigma, rel=0.05)
    # unweighted, the surer figures pull it down: the old pooling read 0.7 of the noise here
    plain = statistics.fmean((v - statistics.fmean(x for x, _ in g)) ** 2 for g in groups for v, _ in g) ** 0.5
    assert plain < 0.8 * sigma
    assert mean_sd(sigma, [1] * 8) == pytest.approx(sigma / 8 ** 0.5)
    assert mean_sd(sigma, [3] * 8) == pytest.approx(sigma / 24 ** 0.5)
    assert run_sd([[(1.0, 1)]]) == (0.0, 0)  # one figure: nothing to scatter


def test_a_rails_noise_leaves_out_a_rail_slow_by_itself():
    rng = random.Random(5)
    rails = [{(f"n{a}", f"n{b}"): [HEALTHY * rng.gauss(1, 0.02)] for a, b in itertools.combinations(range(1, 5), 2)}
             for _ in range(RAILS)]
    clean, degrees = rail_noise(rails)
    assert degrees == 6 * 7 and clean == pytest.approx(0.02 * HEALTHY, rel=0.3)
    rails[3][("n1", "n2")] = [HEALTHY * 0.6]  # a NIC slow on one rail: its own fault, not the noise
    slowed, degrees = rail_noise(rails)
    assert degrees == 6 * 7 - 1 and slowed < 1.2 * clean


def _job(hosts: int, cv: float, seed: int, factors: dict[str, float] | None = None) -> list[LinkResult]:
    rng = random.Random(seed)
    names = [f"n{index}" for index in range(1, hosts + 1)]
    return [LinkResult(a, b, "perftest", rail, HEALTHY * min((factors or {}).get(h, 1.0) for h in (a, b))
                       * rng.gauss(1.0, cv), 400.0)
            for a, b in itertools.combinations(names, 2) for rail in range(RAILS)]


def test_a_small_jobs_level_is_judged_with_the_noise_of_its_rails_not_the_floor():
    # 4 % link noise in a 4-host job: the job level's spread was 1 % (the floor: too few re-runs to
    # measure their noise), and a healthy pair 6.6 % low failed as a slow link
    for seed in range(1, 21):
        references = attribute_links(_job(4, 0.04, seed)).references
        spreads = {round(r.spread_gbps, 6) for r in references if r.job_level}
        assert spreads and min(spreads) > 0.025 * HEALTHY, (seed, spreads)
    # a NIC 10 % slow at 1 % noise stands out of that noise all the same
    attribution = attribute_links(_job(4, 0.01, 7, {"n3": 0.9}))
    assert {(v.host, v.confirmed) for v in attribution.nics} == {("n3", True)}


def test_a_lucky_pair_above_the_line_rate_sets_no_level_a_healthy_nic_falls_below():
    # n1-n2 runs 7 % over the rest on every rail (405 of a 400 Gb/s line: luck, or a mis-set
    # line rate): it is the best pair of both its ends, and was the level n4 was held against
    results = [r if r.pair != ("n1", "n2") else LinkResult(r.a, r.b, r.backend, r.rail, r.gbps * 1.07, 400.0)
               for r in _job(4, 0.02, 11)]
    figures: dict = {}
    for result in results:
        figures.setdefault(result.group, {}).setdefault(result.pair, []).append(result.gbps)
    references = {reference.group: reference for reference in attribute_links(results).references}
    assert [slow.host for slow in across_rails(figures, references, DEFAULT_THRESHOLDS)] == []
    # a NIC 8 % slow is still below a level the line rate caps
    slowed = _job(4, 0.02, 11, {"n4": 0.92})
    figures = {}
    for result in slowed:
        figures.setdefault(result.group, {}).setdefault(result.pair, []).append(result.gbps)
    references = {reference.group: reference for reference in attribute_links(slowed).references}
    assert [slow.host for slow in across_rails(figures, references, DEFAULT_THRESHOLDS)] == ["n4"]


def test_a_rail_is_slow_as_a_whole_only_where_its_pairs_that_reach_the_floor_elsewhere_fall_here_too():
    # One NIC 10 % slow in a 3-node job at 6 % link noise: its two pairs sit under the 90 % floor,
    # and on some rail the healthy pair dipped under it too, "alike": the fabric was failed as a
    # whole beside the NIC (in half such jobs of the bench)
    whole = []
    for seed in range(1, 31):
        attribution = attribute_links(_job(3, 0.06, seed, {"n3": 0.9}))
        whole += [(seed, shift.rail) for shift in attribution.shifts]
    assert whole == []
    # every pair at 58 % of the line on every rail is the job's network, on each rail
    attribution = attribute_links(_job(3, 0.02, 1, {"n1": 0.58 * 400 / HEALTHY, "n2": 0.58 * 400 / HEALTHY,
                                                    "n3": 0.58 * 400 / HEALTHY}))
    assert sorted(shift.rail for shift in attribution.shifts) == list(range(RAILS))
    # and a rail whose every pair runs at 60 %, where the other rails reach the line: that rail
    results = [r if r.rail != 5 else LinkResult(r.a, r.b, r.backend, r.rail, r.gbps * 0.6, 400.0)
               for r in _job(3, 0.02, 2)]
    assert [shift.rail for shift in attribute_links(results).shifts] == [5]


def test_half_the_hosts_slow_with_every_partner_leave_the_fabric_unblamed():
    # three NICs at 60 % among six hosts: the hosts' best pairs, half of them healthy, had their
    # densest level under the floor on some rails, and the fabric was blamed beside the NICs
    for seed in range(1, 6):
        attribution = attribute_links(_job(6, 0.03, seed, {"n1": 0.6, "n3": 0.6, "n5": 0.6}))
        assert not attribution.shifts, seed
        assert {v.host for v in attribution.nics if v.confirmed} == {"n1", "n3", "n5"}, seed


def _with_a_dip(dips: dict, slow: dict, seed: int = 1) -> list[LinkResult]:
    """A 4-host job at 6 % link noise, every pair once on every rail, but ``dips`` ((pair, rail)
    -> Gb/s) and the pairs of ``slow`` hosts (host -> factor, on every rail)."""
    rng = random.Random(seed)
    results = []
    for a, b in itertools.combinations(("n1", "n2", "n3", "n4"), 2):
        for rail in range(RAILS):
            factor = min(slow.get(a, 1.0), slow.get(b, 1.0))
            gbps = dips.get(((a, b), rail), HEALTHY * factor * rng.gauss(1, 0.06))
            results.append(LinkResult(a, b, "perftest", rail, gbps, 400.0))
    return results


def test_a_small_jobs_healthy_nic_dipping_on_one_rail_beside_a_slow_nic_is_never_confirmed_on_one_run():
    # n4's NIC at 50 %; on rail 2 n2's pairs with n1 and n3 read 351 and 353 Gb/s (one run each, as
    # at 6 % link noise one run in eleven does), under the 360 floor: n2 was slow with all three
    # partners there, confirmed, and drained
    dips = {(("n1", "n2"), 2): 351.5, (("n2", "n3"), 2): 353.4, (("n2", "n4"), 2): 200.2}
    for seed in range(1, 11):
        attribution = attribute_links(_with_a_dip(dips, {"n4": 0.5}, seed))
        assert {(v.host, v.confirmed) for v in attribution.nics if v.host == "n2"} <= {("n2", False)}, seed
        assert ("n4", True) in {(v.host, v.confirmed) for v in attribution.nics}
    # a rail as far under the floor as a fault puts it is confirmed on its one run
    deep = {(("n1", "n2"), 2): 300.0, (("n2", "n3"), 2): 302.0, (("n2", "n4"), 2): 196.0}
    assert ("n2", True) in {(v.host, v.confirmed) for v in attribute_links(_with_a_dip(deep, {"n4": 0.5})).nics}
