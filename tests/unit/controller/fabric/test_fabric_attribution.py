"""The link phase with a topology on simulated fabrics (gpudiag.fabric: plan, attribution, findings):
a slow switch link, a slow spine, two slow links, a link that lost cables under load, a leaf whose
every uplink is slow and a slow leaf are named as the fabric's, drain no node and keep none out;
NIC faults stay NICs; untraced paths name the set they narrowed to; healthy fabrics name nothing."""

from __future__ import annotations

import pytest
from fabrics import fabric_fleet, sweep_links

from gpudiag.findings import Action, Kind, Severity

FABRIC = {"leaves": 8, "spines": 4, "rails": 2}
NODE_BLAME = (Kind.SLOW_NIC, Kind.SLOW_LINK, Kind.UNCHECKED)


def _uplink(a: str, b: str, factor: float) -> dict:
    return {"kind": "slow_uplink", "a": a, "b": b, "factor": factor}


@pytest.mark.parametrize(("factor", "seed"), [(0.9, 1), (0.8, 2), (0.6, 3), (0.4, 4)])
def test_a_slow_uplink_is_named_exactly_as_a_failing_fabric_link_that_drains_and_excludes_no_node(factor, seed):
    swept = sweep_links(fabric_fleet(64, FABRIC, [_uplink("r1-leaf03", "r1-spine02", factor)], seed=seed))
    [finding] = swept.kinds(Kind.SLOW_FABRIC_LINK, Kind.SLOW_SWITCH)
    assert finding.host is None and finding.confirmed and finding.severity == Severity.FAIL
    part = finding.to_dict()["fabric_link"]
    assert part["rail"] == 1 and part["switches"] == ["r1-leaf03", "r1-spine02"] and part["ports"] is not None
    assert finding.action == Action.INSPECT and "perfquery -x" in finding.action_detail
    assert abs(finding.deficit_pct - 100 * (1 - factor)) < 4
    assert "node[017-024]" in finding.evidence  # the nodes behind it
    assert swept.kinds(*NODE_BLAME) == [] and swept.fabric_rounds <= 2


def test_a_slow_spine_is_named_as_the_switch():
    swept = sweep_links(fabric_fleet(64, FABRIC, [{"kind": "slow_switch", "switch": "r0-spine03", "factor": 0.7}]))
    [finding] = swept.kinds(Kind.SLOW_FABRIC_LINK, Kind.SLOW_SWITCH)
    assert (finding.kind, finding.to_dict()["switch"], finding.to_dict()["rail"]) == (Kind.SLOW_SWITCH, "r0-spine03", 0)
    assert "perfquery -x -a" in finding.action_detail and swept.kinds(*NODE_BLAME) == []


def test_two_slow_uplinks_at_once_are_both_named():
    faults = [_uplink("r0-leaf02", "r0-spine04", 0.7), _uplink("r0-leaf06", "r0-spine01", 0.75)]
    swept = sweep_links(fabric_fleet(64, FABRIC, faults, seed=5))
    named = sorted(tuple(f.to_dict()["fabric_link"]["switches"]) for f in swept.kinds(Kind.SLOW_FABRIC_LINK))
    assert named == [("r0-leaf02", "r0-spine04"), ("r0-leaf06", "r0-spine01")]
    assert all(f.severity == Severity.FAIL for f in swept.kinds(Kind.SLOW_FABRIC_LINK))


def test_a_slow_nic_stays_that_nics_drain_beside_a_slow_uplink():
    faults = [_uplink("r0-leaf04", "r0-spine02", 0.7), {"kind": "slow_nic", "host": "node050", "factor": 0.7}]
    swept = sweep_links(fabric_fleet(64, FABRIC, faults, seed=6))
    assert [(f.kind, f.host, f.action) for f in swept.kinds(*NODE_BLAME)] == [(Kind.SLOW_NIC, "node050", Action.DRAIN)]
    assert [f.to_dict()["fabric_link"]["switches"] for f in swept.kinds(Kind.SLOW_FABRIC_LINK)] == [
        ["r0-leaf04", "r0-spine02"]]


def test_a_link_that_lost_most_of_its_cables_shows_under_the_screens_load_and_one_that_lost_few_does_not():
    # the screen loads a leaf's uplinks to about a quarter each way (its cap keeps a round within them):
    # 7 of 8 cables down leaves an eighth, which that load fills twice over
    fabric = {"leaves": 8, "spines": 4, "uplinks": 8, "rails": 1}
    down = {"kind": "uplink_down", "a": "r0-leaf05", "b": "r0-spine03", "cables": 7}
    swept = sweep_links(fabric_fleet(64, fabric, [down]))
    [finding] = swept.kinds(Kind.SLOW_FABRIC_LINK)
    assert finding.to_dict()["fabric_link"]["switches"] == ["r0-leaf05", "r0-spine03"]
    assert finding.to_dict()["fabric_link"]["ports"] is None and "8 cables" in finding.evidence
    assert sweep_links(fabric_fleet(64, fabric, [{**down, "cables": 2}])).kinds(Kind.SLOW_FABRIC_LINK) == []


def test_without_traced_paths_a_slow_uplink_is_narrowed_to_its_leafs_uplinks_and_said_so():
    fabric = {**FABRIC, "traced": False}
    swept = sweep_links(fabric_fleet(64, fabric, [_uplink("r0-leaf03", "r0-spine02", 0.6)]))
    [finding] = swept.kinds(Kind.SLOW_FABRIC_LINK, Kind.SLOW_SWITCH)
    document = finding.to_dict()
    assert document["fabric_link"] is None and finding.host is None
    named = [tuple(part.get("switches") or [part.get("switch")]) for part in document["fabric_candidates"]]
    assert ("r0-leaf03", "r0-spine02") in named and all("r0-leaf03" in part for part in named)
    assert "could not tell them apart" in finding.evidence and "not traced" in finding.evidence
    assert swept.kinds(*NODE_BLAME) == []


def test_with_two_leaves_a_slow_uplink_is_the_set_nothing_can_split():
    swept = sweep_links(fabric_fleet(16, {"leaves": 2, "spines": 2, "rails": 1},
                                     [_uplink("r0-leaf01", "r0-spine02", 0.6)]))
    [finding] = swept.kinds(Kind.SLOW_FABRIC_LINK, Kind.SLOW_SWITCH)
    parts = finding.to_dict()["fabric_candidates"]
    assert {p.get("switch") or tuple(p["switches"]) for p in parts} == {
        ("r0-leaf01", "r0-spine02"), ("r0-leaf02", "r0-spine02"), "r0-spine02"}


def test_a_leaf_whose_every_node_is_slow_is_the_leaf_not_its_nodes():
    swept = sweep_links(fabric_fleet(64, FABRIC, [{"kind": "slow_switch", "switch": "r0-leaf06", "factor": 0.6}]))
    [finding] = swept.kinds(Kind.SLOW_SWITCH)
    assert finding.to_dict()["switch"] == "r0-leaf06" and finding.severity == Severity.FAIL
    assert not [f for f in swept.findings if f.action == Action.DRAIN]


@pytest.mark.parametrize(("link_cv", "seed"), [(0.01, 1), (0.02, 2), (0.04, 3), (0.04, 4), (0.04, 5)])
def test_a_healthy_fabric_names_nothing(link_cv, seed):
    swept = sweep_links(fabric_fleet(64, FABRIC, seed=seed, link_cv=link_cv))
    assert swept.kinds(Kind.SLOW_FABRIC_LINK, Kind.SLOW_SWITCH, *NODE_BLAME) == []


def test_a_three_tier_fabrics_spine_core_link_is_named():
    fabric = {"leaves": 8, "spines": 2, "pods": 2, "cores": 2, "rails": 1}
    swept = sweep_links(fabric_fleet(64, fabric, [_uplink("r0-spine03", "r0-core02", 0.7)]))
    [finding] = swept.kinds(Kind.SLOW_FABRIC_LINK)
    assert finding.to_dict()["fabric_link"]["switches"] == ["r0-spine03", "r0-core02"] and finding.confirmed
