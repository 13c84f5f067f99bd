"""A small job whose every pair runs below its line rate, with a NIC or two slower still: the
job's network as a whole and those NICs both (gpudiag.links.levels.level_below), and the hosts
that run at the job's level as partners for its suspects where no host passed
(gpudiag.links.verdicts.LinkAttribution.partners)."""

import itertools
import random

import pytest

from gpudiag.links import LinkResult, attribute_links
from gpudiag.links.levels import level_below
from gpudiag.links.linkfindings import link_findings
from gpudiag.links.schedule import confirm_rounds, pair_key

RAILS = 8
LINE = 400.0
JOB = 0.58 * LINE  # every pair of the job's network
SLOWER = 0.46 * LINE  # a NIC slower still
FLOOR = 0.9 * LINE
FAIL_PCT = 6.0  # deficit_fail


def _results(pairs, cv: float, seed: int, factors: dict[str, float]) -> list[LinkResult]:
    rng = random.Random(seed)
    return [LinkResult(a, b, "perftest", rail, min(factors.get(a, JOB), factors.get(b, JOB)) * rng.gauss(1.0, cv),
                       LINE)
            for a, b in pairs for rail in range(RAILS)]


def _names(hosts: int) -> list[str]:
    return [f"n{index}" for index in range(1, hosts + 1)]


def _figures(factors: dict[str, float], hosts: int = 4) -> dict[tuple[str, str], float]:
    return {(a, b): min(factors.get(a, JOB), factors.get(b, JOB)) for a, b in itertools.combinations(_names(hosts), 2)}


def test_the_level_below_the_floor_is_the_pairs_among_the_hosts_whose_best_pairs_run_alike():
    assert level_below(_figures({"n4": SLOWER}), FLOOR) == pytest.approx(JOB)  # one NIC slower does not hide it
    assert level_below(_figures({"n3": SLOWER, "n4": SLOWER}), FLOOR) == pytest.approx(JOB)  # half the hosts set it
    # the pairs among them, not their best pairs (the best of a few noisy figures sits high)
    lucky = {**_figures({"n4": SLOWER}), ("n1", "n2"): 1.1 * JOB}
    assert level_below(lucky, FLOOR) == pytest.approx(JOB)
    spread = _figures({"n3": 0.5 * JOB, "n4": 0.4 * JOB, "n5": 0.3 * JOB}, hosts=5)
    assert level_below(spread, FLOOR) is None  # no level most hosts share
    assert level_below({**_figures({"n4": SLOWER}), ("n1", "n2"): 0.95 * LINE}, FLOOR) is None  # a pair at the floor
    assert level_below(_figures({}), None) is None  # no line rate, no floor to fall below
    assert level_below({}, FLOOR) is None


@pytest.mark.parametrize("hosts, slower", [(3, 1), (4, 1), (5, 1), (4, 2), (5, 2)])
def test_a_job_below_its_line_rate_with_nics_slower_still_names_the_network_and_each_such_nic(hosts, slower):
    for seed in range(1, 11):
        names = _names(hosts)
        slow = set(random.Random(seed).sample(names, slower))
        results = _results(itertools.combinations(names, 2), 0.02, seed, dict.fromkeys(slow, SLOWER))
        attribution = attribute_links(results)
        findings = link_findings(attribution, FAIL_PCT)
        named = {(f.kind, f.host) for f in findings}
        assert {(kind, host) for kind, host in named if kind != "slow_network"} == {("slow_nic", h) for h in slow}, \
            (seed, named)
        assert any(f.kind == "slow_network" and f.host is None for f in findings), (seed, named)


def test_a_host_short_of_partners_in_a_job_below_its_line_rate_is_paired_with_one_at_the_jobs_level():
    # n5 measured with n4 and with the slower NIC n1 only: no host reaches the floor, so none
    # passed; its new partner is one of those that run at the job's level, never n1 again
    names = _names(5)
    pairs = [("n1", "n2"), ("n3", "n4"), ("n2", "n3"), ("n4", "n5"), ("n1", "n5"), ("n1", "n3"), ("n2", "n4")]
    results = _results(pairs, 0.01, 3, {"n1": SLOWER})
    attribution = attribute_links(results)
    assert attribution.passed == ()
    assert "n5" in attribution.suspects.hosts
    assert set(attribution.partners) <= {"n2", "n3", "n4"} and attribution.partners  # never n1, nor n5
    rounds = confirm_rounds(attribution.suspects, attribution.partners, [pair_key(a, b) for a, b in pairs])
    fresh = {pair for r in rounds for pair in r.pairs if "n5" in pair} - {pair_key(a, b) for a, b in pairs}
    assert fresh and all("n1" not in pair for pair in fresh), rounds
    # with its third partner, the network as a whole is confirmed
    more = results + _results(sorted(fresh), 0.01, 4, {"n1": SLOWER})
    (network,) = [f for f in link_findings(attribute_links(more), FAIL_PCT) if f.kind == "slow_network"]
    assert network.confirmed
    assert set(names) >= {f.host for f in link_findings(attribute_links(more), FAIL_PCT) if f.host}


def test_a_healthy_pairs_dip_under_the_floor_on_one_rail_is_judged_by_its_own_levels_noise():
    # two NICs 60 % slow of four at 6 % link noise: the healthy pair n1-n2 dips to 352 Gb/s on
    # rail 4 (under the 360 floor, every pair of that rail below it). Its figures scatter 6 % of
    # ~395 Gb/s; the slow pairs' 6 % of ~160 set an absolute noise that read the dip 4 sigma deep
    scatter = [1.06, 0.94, 1.0, 1.08, 0.92, 1.03, 0.97, 1.0]
    results = []
    for rail in range(RAILS):
        for index, (a, b) in enumerate(itertools.combinations(_names(4), 2)):
            rate = 395.0 if (a, b) == ("n1", "n2") else 160.0
            value = 352.0 if (a, b, rail) == ("n1", "n2", 4) else rate * scatter[(rail + index) % RAILS]
            results.append(LinkResult(a, b, "perftest", rail, value, LINE))
    attribution = attribute_links(results)
    assert attribution.shifts == ()
    assert not [f for f in link_findings(attribution, FAIL_PCT) if f.kind == "slow_network"]
    assert {v.host for v in attribution.nics if v.confirmed} == {"n3", "n4"}
