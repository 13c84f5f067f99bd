"""The equal-cost paths of a plane (gpudiag.fabric.paths): up-down routing on 2- and 3-tier Clos
fabrics, shares counted rather than listed, shortest paths where the plane is no tree, and walks
that draw each path alike (ECMP) or one path (destination routing)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from fabrics import clos_plane

from gpudiag.fabric.model import Attachment, Cable, FabricLink, Plane, Switch, TopologyError
from gpudiag.fabric.paths import PathModel


def test_a_2_tier_pair_spreads_over_one_path_per_spine_and_a_same_leaf_pair_crosses_its_leaf_alone():
    model = PathModel(clos_plane(leaves=3, spines=4))
    across = model.of_pair("n1", "n5")
    assert (across.count, across.switches, across.middle_hops) == (4, 3, 1)
    assert across.link_share == {**{("leaf1", f"spine{s}"): 0.25 for s in range(1, 5)},
                                 **{("leaf3", f"spine{s}"): 0.25 for s in range(1, 5)}}
    assert set(across.link_up_share) == {("leaf1", f"spine{s}") for s in range(1, 5)}  # the source's side climbs
    assert across.switch_share["leaf1"] == 1.0 and across.switch_share["spine2"] == 0.25
    local = model.of_pair("n1", "n2")
    assert (local.count, local.switches, local.middle_hops, local.link_share) == (1, 1, 0, {})


def test_a_3_tier_pair_between_pods_climbs_to_the_cores_and_down_again():
    model = PathModel(clos_plane(leaves=4, spines=2, pods=2, cores=3))
    paths = model.of_pair("n1", "n7")  # leaf1 (pod 1) to leaf4 (pod 2)
    assert (paths.count, paths.switches, paths.middle_hops, paths.valley_free) == (12, 5, 3, True)
    assert paths.switch_share["core2"] == pytest.approx(1 / 3) and paths.switch_share["spine1"] == 0.5
    assert paths.link_share[("spine1", "core3")] == pytest.approx(1 / 6)
    within = model.of_pair("n1", "n3")  # leaf1 and leaf2 share a pod: no core
    assert within.count == 2 and not any(name.startswith("core") for name in within.switch_share)


def test_a_walk_draws_every_equal_cost_path_alike_and_a_fixed_choice_routes_one_path():
    model = PathModel(clos_plane(leaves=4, spines=2, pods=2, cores=3))
    rng = random.Random(3)
    drawn = Counter(model.walk("leaf1", "leaf4", rng.randrange) for _ in range(2400))
    assert len(drawn) == 12 and min(drawn.values()) > 120  # 200 each on average
    assert {model.walk("leaf1", "leaf4", lambda n: 0) for _ in range(5)} == {
        ("leaf1", "spine1", "core1", "spine3", "leaf4")}
    assert model.walk("leaf2", "leaf2", lambda n: 0) == ("leaf2",)


def test_a_plane_that_is_no_tree_takes_its_plain_shortest_paths():
    # three leaves in a ring: no switch above them, so no up-down path; the shortest paths serve
    switches = tuple(Switch(f"leaf{i}", 1) for i in range(1, 4))
    links = (FabricLink("leaf1", "leaf2", (Cable(),)), FabricLink("leaf2", "leaf3", (Cable(),)))
    plane = Plane(None, switches, links, (Attachment("a", "leaf1"), Attachment("c", "leaf3")))
    paths = PathModel(plane).of_pair("a", "c")
    assert paths is not None and not paths.valley_free and paths.switches == 3


def test_a_trace_names_its_links_only_where_it_fits_the_plane():
    model = PathModel(clos_plane(leaves=3, spines=2))
    assert model.links_of(("leaf1", "spine2", "leaf3")) == (("leaf1", "spine2"), ("leaf3", "spine2"))
    assert model.links_of(("leaf1", "leaf3")) is None  # no cable joins two leaves
    assert model.links_of(("leaf1", "spine9", "leaf3")) is None
    assert model.of_pair("n1", "nobody") is None


def test_a_plane_refuses_what_cannot_be():
    with pytest.raises(TopologyError, match="cabled to both"):
        Plane(None, (Switch("leaf1", 1), Switch("leaf2", 1)), (),
              (Attachment("n1", "leaf1"), Attachment("n1", "leaf2")))
    with pytest.raises(TopologyError, match="port 3 of leaf1 holds both"):
        Plane(None, (Switch("leaf1", 1),), (), (Attachment("n1", "leaf1", "3"), Attachment("n2", "leaf1", "3")))
    with pytest.raises(TopologyError, match="a spine, not a leaf"):
        Plane(None, (Switch("spine1", 2),), (), (Attachment("n1", "spine1"),))


def test_a_leafs_oversubscription_is_its_nodes_line_rate_against_its_uplinks():
    plane = clos_plane(leaves=2, spines=2, hosts_per_leaf=4, uplink_gbps=400.0)
    assert plane.oversubscription("leaf1") == 2.0  # 4 × 400 against 2 × 400
    assert plane.hosts_under["leaf2"] == ("n5", "n6", "n7", "n8")
