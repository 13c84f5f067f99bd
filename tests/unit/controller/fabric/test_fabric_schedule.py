"""The link schedule with a topology (gpudiag.fabric.schedule): at most three screen rounds at any
size that load every leaf's uplinks within their capacity, give each uplink pairs to different
partner leaves and each node a partner under its own leaf, and confirm pairs that re-test (and
split) the fabric's suspects."""

from __future__ import annotations

from collections import Counter

import pytest
from fabrics import clos_plane, topology_of

from gpudiag.fabric.elements import Element
from gpudiag.fabric.model import Topology
from gpudiag.fabric.paths import PathModel
from gpudiag.fabric.schedule import (
    LOAD_SHARE,
    fabric_confirm_pairs,
    fabric_screen_rounds,
    group_hosts,
    pack_rounds,
    stream_count,
)
from gpudiag.links.schedule import Round
from gpudiag.sim.fabric import FabricSpec, NodeRails, fabric_topology


def _fabric(nodes: int, leaves: int, spines: int, oversubscription: float = 1.0, pods: int = 1,
            cores: int = 0) -> tuple[list[str], Topology]:
    hosts = [f"n{i:04d}" for i in range(1, nodes + 1)]
    spec = FabricSpec(leaves, spines, pods=pods, cores=cores, oversubscription=oversubscription, planes="shared")
    return hosts, fabric_topology(spec, [NodeRails(h, 1, 400.0) for h in hosts], "test")


SHAPES = [(9, 3, 2, 1.0), (12, 3, 2, 1.0), (64, 8, 4, 1.0), (64, 8, 4, 3.0), (100, 7, 4, 1.0), (256, 8, 8, 1.0),
          (1024, 32, 8, 1.0), (4096, 128, 16, 1.0), (50, 5, 2, 2.0), (7, 3, 2, 1.0)]


@pytest.mark.parametrize(("nodes", "leaves", "spines", "over"), SHAPES)
def test_the_screen_is_at_most_three_matchings_within_each_leafs_capacity(nodes, leaves, spines, over):
    hosts, topology = _fabric(nodes, leaves, spines, over)
    rounds = fabric_screen_rounds(hosts, topology)
    assert 1 <= len(rounds) <= 3
    plane = topology.planes[0]
    for round_ in rounds:  # every Round is a matching by construction; the cap is the schedule's
        across = Counter(leaf for a, b in round_.pairs if plane.leaf_of(a) != plane.leaf_of(b)
                         for leaf in (plane.leaf_of(a), plane.leaf_of(b)))
        for leaf, count in across.items():
            capacity = plane.uplink_gbps(leaf) or 0.0
            assert count * 400.0 <= LOAD_SHARE * capacity + 1e-6 or count <= 2, (leaf, count)
    partners = Counter(host for round_ in rounds for pair in round_.pairs for host in pair)
    assert set(partners) == set(hosts)  # every node tested
    assert sum(partners[host] < 2 for host in hosts) <= 2  # a second partner for all but odd ones out


@pytest.mark.parametrize(("nodes", "leaves", "spines", "over"), [s for s in SHAPES if s[1] >= 3])
def test_every_leafs_uplinks_meet_two_partner_leaves_and_every_node_a_partner_under_its_own_leaf(
        nodes, leaves, spines, over):
    hosts, topology = _fabric(nodes, leaves, spines, over)
    rounds = fabric_screen_rounds(hosts, topology)
    plane = topology.planes[0]
    partner_leaves: dict[str, set[str]] = {}
    local = set()
    for round_ in rounds:
        for a, b in round_.pairs:
            leaf_a, leaf_b = plane.leaf_of(a), plane.leaf_of(b)
            if leaf_a == leaf_b:
                local |= {a, b}
            else:
                partner_leaves.setdefault(leaf_a, set()).add(leaf_b)
                partner_leaves.setdefault(leaf_b, set()).add(leaf_a)
    assert all(len(partner_leaves.get(leaf, ())) >= 2 for leaf in plane.hosts_under)
    if nodes // leaves >= 4:  # leaves of a few nodes and more: each node meets one under its leaf
        assert set(hosts) - local == set()


def test_without_enough_uplinks_an_oversubscribed_leaf_gets_fewer_pairs_to_other_leaves():
    hosts, topology = _fabric(64, 8, 4, 1.0)
    assert max(group_hosts(hosts, topology).caps) == 6  # 75 % of 8 nodes' worth of uplinks
    hosts, topology = _fabric(64, 8, 4, 4.0)
    assert max(group_hosts(hosts, topology).caps) == 1


def test_hosts_the_topology_does_not_place_are_still_tested_among_themselves():
    hosts, topology = _fabric(16, 4, 2)
    rounds = fabric_screen_rounds([*hosts, "x1", "x2"], topology)
    assert any({"x1", "x2"} & set(pair) for round_ in rounds for pair in round_.pairs)
    assert group_hosts([*hosts, "x1", "x2"], topology).unplaced == ("x1", "x2")


def test_enough_streams_that_each_uplink_of_the_widest_leaf_carries_some():
    assert stream_count(topology_of(clos_plane(leaves=4, spines=8)), 4) == 16
    assert stream_count(topology_of(clos_plane(leaves=4, spines=2)), 8) == 8
    assert stream_count(topology_of(clos_plane(leaves=4, spines=32)), 4) == 32  # at most 32 (perftest's QPs)


def test_confirm_pairs_cross_the_suspect_from_its_leaf_to_leaves_it_does_not_touch():
    plane = clos_plane(leaves=4, spines=4, hosts_per_leaf=4)
    topology = topology_of(plane)
    suspect = (Element.link(("leaf2", "spine3"), None),)
    pairs = fabric_confirm_pairs([suspect], topology, list(plane.attachment_of), [])
    assert len(pairs) >= 3
    leaves = [{plane.leaf_of(a), plane.leaf_of(b)} for a, b in pairs]
    assert all("leaf2" in pair and len(pair) == 2 for pair in leaves)


def test_a_set_of_parts_is_split_by_pairs_that_cross_one_of_them_and_not_the_other():
    plane = clos_plane(leaves=4, spines=2, hosts_per_leaf=4)
    model = PathModel(plane)
    parts = (Element.link(("leaf1", "spine1"), None), Element.link(("leaf2", "spine1"), None))
    pairs = fabric_confirm_pairs([parts], topology_of(plane), list(plane.attachment_of), [])
    crossing = []
    for a, b in pairs:
        shares = model.of_pair(a, b).link_share
        crossing.append(sum(1 for part in parts if shares.get(part.names, 0) > 0))
    assert crossing and all(count == 1 for count in crossing)


def test_a_spine_core_link_gets_pairs_enough_that_several_streams_cross_it():
    plane = clos_plane(leaves=8, spines=4, hosts_per_leaf=8, pods=2, cores=4)
    suspect = (Element.link(("spine2", "core3"), None),)
    pairs = fabric_confirm_pairs([suspect], topology_of(plane), list(plane.attachment_of), [], streams=8)
    model = PathModel(plane)
    expected = sum(8 * model.of_pair(a, b).link_share.get(("spine2", "core3"), 0.0) for a, b in pairs)
    assert expected >= 8 and len(pairs) <= 32


def test_confirm_pairs_fit_into_the_nic_rounds_and_at_most_two_rounds_more():
    first = [Round("confirm", (("a", "b"),))]
    rounds = pack_rounds(first, [("a", "c"), ("d", "e"), ("a", "f"), ("a", "g"), ("a", "h")])
    assert [r.pairs for r in rounds] == [(("a", "b"), ("d", "e")), (("a", "c"),), (("a", "f"),)]
