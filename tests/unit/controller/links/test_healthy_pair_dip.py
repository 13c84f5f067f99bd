"""A small job's one healthy pair that dips under the line-rate floor on one rail, beside NICs slow
on every rail: one run of it is no rail's verdict (gpudiag.links.levels.slow_on_this_rail), and run
again, its low run that chose it no longer holds its ends slow (attribution's culprits)."""

import itertools

import pytest

from gpudiag.links import LinkResult, attribute_links
from gpudiag.links.levels import slow_on_this_rail
from gpudiag.links.linkfindings import link_findings

RAILS = 8
LINE = 400.0
HEALTHY = 392.0
SLOW = 0.6 * HEALTHY  # two NICs at 60 %
FLOOR = 0.9 * LINE
HOSTS = ("n1", "n2", "n3", "n4")
SLOW_HOSTS = ("n1", "n4")


def _results(dips: dict[int, list[float]]) -> list[LinkResult]:
    """Every pair of the four hosts on every rail, each healthy rail a little apart (4 % noise-like
    steps, no randomness); the healthy pair (n2, n3) runs ``dips[rail]`` there (a run each)."""
    found = []
    for a, b in itertools.combinations(HOSTS, 2):
        for rail in range(RAILS):
            step = 1 + 0.03 * ((rail * 3 + len(a + b)) % 5 - 2) / 2
            if {a, b} & set(SLOW_HOSTS):
                found.append(LinkResult(a, b, "perftest", rail, SLOW * step, LINE))
            elif rail in dips:
                found += [LinkResult(a, b, "perftest", rail, gbps, LINE) for gbps in dips[rail]]
            else:
                found.append(LinkResult(a, b, "perftest", rail, HEALTHY * step, LINE))
    return found


def _named(results: list[LinkResult]) -> dict[str, set[str]]:
    """Per host, its findings' kinds and severities (``slow_link:watch``)."""
    named: dict[str, set[str]] = {}
    for finding in link_findings(attribute_links(results), 6.0):
        named.setdefault(str(finding.host), set()).add(f"{finding.kind}:{finding.severity}")
    return named


def test_one_run_of_the_one_healthy_pair_under_the_floor_on_one_rail_fails_no_network():
    named = _named(_results({0: [352.0]}))  # 12 % under its other rails, one run
    assert "None" not in named  # no slow_network: a rail is not slow as a whole on one pair's one run
    assert named["n1"] == {"slow_nic:fail"} and named["n4"] == {"slow_nic:fail"}


def test_run_again_the_healthy_pair_is_judged_on_its_second_run_and_its_ends_pass():
    # 336 chose it; 376 is its second run, over the floor: their mean (356) stayed under it
    named = _named(_results({0: [336.0, 376.0]}))
    assert named == {"n1": {"slow_nic:fail"}, "n4": {"slow_nic:fail"}, "n2": {"slow_link:watch"}}  # a dip, seen


def test_run_again_and_slow_again_the_rail_is_slow_as_a_whole_never_passed():
    # the one pair that speaks for rail 0 among the healthy NICs fell 13 % there twice
    named = _named(_results({0: [336.0, 340.0]}))
    assert named["None"] == {"slow_network:fail"} and named["n1"] == named["n4"] == {"slow_nic:fail"}


def test_a_rail_is_slow_as_a_whole_on_pairs_together_never_on_one_pairs_one_run():
    elsewhere = {("a", "b"): [392.0] * 7, ("a", "c"): [392.0] * 7, ("b", "c"): [392.0] * 7}
    judge = {"sigma": 0.03, "dof": 30, "floor": FLOOR, "robust_z": -3.0}
    assert not slow_on_this_rail({("a", "b"): [300.0]}, elsewhere, **judge)  # 23 % down, one run
    assert slow_on_this_rail({("a", "b"): [300.0, 302.0]}, elsewhere, **judge)  # twice: it repeats
    assert not slow_on_this_rail({("a", "b"): [300.0, 384.0]}, elsewhere, **judge)  # the run after it is fine
    assert slow_on_this_rail({pair: [340.0] for pair in elsewhere}, elsewhere, **judge)  # three pairs 13 % down
    assert slow_on_this_rail({("a", "b"): [340.0], ("x", "y"): [200.0]}, elsewhere, **judge) is False
    with pytest.raises(TypeError):
        slow_on_this_rail({("a", "b"): [300.0]}, elsewhere, 0.03, 30, FLOOR, -3.0)  # floor and bar by name
