"""A small job's NIC slow on every rail, judged on its pairs' means over the rails
(gpudiag.links.acrossrails through attribute_links and link_findings)."""

import itertools
import random

from gpudiag.links import LinkResult, attribute_links
from gpudiag.links.acrossrails import across_rails
from gpudiag.links.attribution import DEFAULT_THRESHOLDS
from gpudiag.links.levels import job_levels
from gpudiag.links.linkfindings import link_findings

RAILS = 8
HEALTHY = 388.0  # Gb/s of a healthy pair at a 400 Gb/s line rate


def _results(hosts: int, factors: dict[str, float], cv: float, seed: int = 1, rails: int = RAILS,
             rail_factors: dict[tuple[str, int], float] | None = None) -> list[LinkResult]:
    """Every pair of ``hosts`` on every rail, at the slower end's rate with ``cv`` noise."""
    rng = random.Random(seed)
    names = [f"n{index}" for index in range(1, hosts + 1)]
    rail_factors = rail_factors or {}
    results = []
    for a, b in itertools.combinations(names, 2):
        for rail in range(rails):
            end = min(factors.get(host, 1.0) * rail_factors.get((host, rail), 1.0) for host in (a, b))
            results.append(LinkResult(a, b, "perftest", rail, HEALTHY * end * rng.gauss(1.0, cv), 400.0))
    return results


def _slow_across(results: list[LinkResult]) -> list[str]:
    """The hosts across_rails finds, with the references attribute_links judged each rail by."""
    figures: dict = {}
    for result in results:
        figures.setdefault(result.group, {}).setdefault(result.pair, []).append(result.gbps)
    references = {reference.group: reference for reference in attribute_links(results).references}
    return [slow.host for slow in across_rails(figures, references, DEFAULT_THRESHOLDS)]


def test_a_nic_8_pct_slow_in_a_3_node_job_at_4_pct_noise_is_one_confirmed_fail_across_its_rails():
    # seed 13: no rail alone confirms it (each rail's pairs sit around the 90 % line-rate floor)
    results = _results(3, {"n2": 0.92}, 0.04, seed=13)
    assert not [v for v in attribute_links(results).nics if v.rail is not None and v.confirmed]
    assert _slow_across(results) == ["n2"]
    findings = [f for f in link_findings(attribute_links(results), 6.0) if f.kind != "unchecked"]
    assert [(f.kind, f.host, f.metric, f.confirmed, f.severity) for f in findings] == [
        ("slow_nic", "n2", "link.perftest", True, "fail")]  # its rails' own suspects folded into it
    assert findings[0].evidence.startswith("on all its rails together")


def test_a_nic_found_on_its_own_rails_is_not_found_twice():
    results = _results(3, {"n2": 0.92}, 0.04, seed=3)
    assert _slow_across(results) == ["n2"]
    findings = link_findings(attribute_links(results), 6.0)
    assert [(f.kind, f.host, f.metric, f.confirmed, f.severity) for f in findings] == [
        ("slow_nic", "n2", "link.perftest", True, "fail")]  # its rails' own suspects folded into one


def test_the_evidence_names_the_rails_pooled_the_means_and_the_healthy_hosts():
    results = _results(3, {"n2": 0.92}, 0.04, seed=3)
    figures: dict = {}
    for result in results:
        figures.setdefault(result.group, {}).setdefault(result.pair, []).append(result.gbps)
    references = {reference.group: reference for reference in attribute_links(results).references}
    [slow] = across_rails(figures, references, DEFAULT_THRESHOLDS)
    assert slow.evidence.startswith("n2 slow with every partner across 8 rails of perftest: its pairs' means")
    assert "healthy: n1, n3" in slow.evidence and slow.good == ("n1", "n3") and 5 < slow.deficit_pct < 12


def test_two_slow_nics_of_three_name_nobody_across_the_rails():
    # every pair runs at the slower end: all alike, nobody stands above the others
    for seed in range(1, 11):
        assert _slow_across(_results(3, {"n1": 0.9, "n2": 0.9}, 0.04, seed=seed)) == []


def test_two_slow_nics_of_four_are_both_found_against_the_two_healthy_hosts():
    assert _slow_across(_results(4, {"n3": 0.9, "n4": 0.9}, 0.03, seed=5)) == ["n3", "n4"]


def test_healthy_small_jobs_at_6_pct_noise_name_nobody_across_the_rails():
    for hosts, seed in itertools.product((3, 4, 5), range(1, 41)):
        assert _slow_across(_results(hosts, {}, 0.06, seed=seed)) == [], (hosts, seed)


def test_a_nic_slow_on_one_rail_is_left_to_that_rails_judging():
    # averaged with seven healthy rails it is diluted: the rail's own pairs find it, not the rails together
    results = _results(4, {}, 0.01, seed=2, rail_factors={("n1", 5): 0.6})
    assert _slow_across(results) == []
    assert [(v.host, v.rail, v.confirmed) for v in attribute_links(results).nics] == [("n1", 5, True)]


def test_a_fleet_with_a_level_of_its_own_is_judged_rail_by_rail():
    assert _slow_across(_results(8, {"n4": 0.9}, 0.02, seed=4)) == []


def test_one_rail_gives_nothing_to_pool():
    assert _slow_across(_results(3, {"n1": 0.85}, 0.01, rails=1)) == []



def test_a_small_jobs_level_pools_its_rails_and_sits_at_its_healthy_pairs_not_above_them():
    # Rail by rail the pairs near the luckiest runs set the level 4 % high at 4 % noise, and
    # healthy pairs of a 5-node job fell 5 % under it one sweep in twenty.
    levels = []
    for seed in range(1, 41):
        figures: dict = {}
        for result in _results(5, {}, 0.04, seed=seed):
            figures.setdefault(result.group, {}).setdefault(result.pair, []).append(result.gbps)
        [level] = job_levels(figures, DEFAULT_THRESHOLDS).values()
        levels.append(level / HEALTHY)
    assert 0.99 < sum(levels) / len(levels) < 1.01 and max(levels) < 1.03


def test_pairs_that_measured_nothing_give_no_level_and_no_error():
    results = [LinkResult(a, b, "perftest", rail, 0.0, 400.0)
               for a, b in (("n1", "n2"), ("n1", "n3"), ("n2", "n3")) for rail in range(RAILS)]
    assert _slow_across(results) == []
    assert not [v for v in attribute_links(results).nics if v.rail is None]
