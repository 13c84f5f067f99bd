"""What a slow switch link costs the pairs through it, as real TCP over a routed fabric shows it
(tests/integration/test_fabric_netns.py captured these shapes): the streams hashed onto the slow
uplink crawl, their siblings take up most but not all of the slack, so every pair through it sums a
few percent low; and a pair whose trace timed out shows only a low total. Neither may read as a
slow NIC or a slow pair, while a NIC slower than the link explains stays that NIC's."""

from __future__ import annotations

import itertools

from fabrics import clos_plane, topology_of

from gpudiag.analysis.thresholds import load_thresholds
from gpudiag.fabric.attribution import attribute_fabric
from gpudiag.fabric.observe import Measured
from gpudiag.links.attribution import link_thresholds
from gpudiag.links.groups import LinkResult, StreamFigure
from gpudiag.links.schedule import CONFIRM, SCREEN

# three leaves of three nodes (n1-n3 leaf1, n4-n6 leaf2, n7-n9 leaf3), two spines; leaf2-spine1 is slow
TOPOLOGY = topology_of(clos_plane(leaves=3, spines=2, hosts_per_leaf=3, rate_gbps=2.0))
LINE = 2.0
STREAMS = 8
WOBBLE = itertools.cycle([0.0, 0.004, -0.003, 0.002, -0.001])


def _leaf(host: str) -> int:
    return (int(host[1:]) - 1) // 3 + 1


def _pair(a: str, b: str, *, back_share: float = 0.93, traced: bool = True, nic: float = 1.0) -> LinkResult:
    """A pair's 8 streams each way: same leaf, each a fair share; across leaves half on each spine,
    and where leaf2 is an end the spine1 half crawls at 0.1 Gb/s while the spine2 half takes up the
    slack: all of it from a to b (traced), ``back_share`` of the line back (not traced, as a client
    traces only its own direction). ``nic``: the slower end's share of its line. The pair's figure
    is its slower direction's."""
    crossing = _leaf(a) != _leaf(b) and 2 in (_leaf(a), _leaf(b))
    full = LINE * 0.96 * nic
    directions = []
    for total, hops_known in ((full, traced), (full * (back_share if crossing else 1.0), False)):
        streams = []
        for spine in [1, 2] * (STREAMS // 2):
            if _leaf(a) == _leaf(b):
                hops, gbps = [f"leaf{_leaf(a)}"], total / STREAMS
            else:
                hops = [f"leaf{_leaf(a)}", f"spine{spine}", f"leaf{_leaf(b)}"]
                gbps = (0.1 if spine == 1 else (total - 0.4) / 4) if crossing else total / STREAMS
            streams.append(StreamFigure(gbps * (1 + next(WOBBLE)), tuple(hops) if hops_known else None))
        directions.append(tuple(streams))
    figure = min(sum(s.gbps for s in direction) for direction in directions)
    return LinkResult(a, b, "tcp", None, figure, LINE, streams=directions[0], back_streams=directions[1])


def _attribution(rows: list[tuple[str, LinkResult]]):
    return attribute_fabric(rows, TOPOLOGY, link_thresholds(load_thresholds(None)))


def _fleet(overrides: dict[tuple[str, str], LinkResult] | None = None) -> list[Measured]:
    """Every pair of the nine nodes once, screen and again on confirm for those through leaf2."""
    overrides = overrides or {}
    rows: list[Measured] = []
    for a, b in itertools.combinations([f"n{i}" for i in range(1, 10)], 2):
        result = overrides.get((a, b)) or _pair(a, b)
        rows.append((SCREEN, result))
        if 2 in (_leaf(a), _leaf(b)) and _leaf(a) != _leaf(b):
            rows.append((CONFIRM, overrides.get((a, b)) or _pair(a, b)))
    return rows


def _uplink_named(found) -> bool:
    """The slow uplink is the one culprit: confirmed, and no set of parts beside it (the untraced
    direction of the pairs through it says nothing of leaf2's other uplink)."""
    return [([e.describe() for e in s.elements], s.confirmed) for s in found.suspects] == [(["leaf2–spine1"], True)]


# the rounds of the captured sweep: n4 met only partners across the slow uplink
CAPTURED = ([(SCREEN, p) for p in ((1, 4), (2, 8), (5, 7), (3, 6), (5, 9), (1, 2), (3, 4), (5, 6), (7, 8))]
            + [(CONFIRM, p) for p in ((2, 3), (4, 8), (5, 7), (1, 5), (2, 9), (6, 7), (1, 5), (3, 6), (6, 7), (1, 5),
                                      (3, 6), (5, 7), (6, 7))])


def test_pairs_a_few_percent_low_through_a_slow_uplink_blame_no_nic_of_the_leaf_behind_it():
    found = _attribution([(phase, _pair(f"n{a}", f"n{b}")) for phase, (a, b) in CAPTURED])
    assert _uplink_named(found)
    assert [v.host for v in found.links.nics] == [] and found.links.links == ()


def test_most_pairs_avoiding_the_slow_uplink_name_it_alone():
    # most tests avoid leaf2, so the pairs through it stand out on their figures as well as their streams
    nodes = [f"n{i}" for i in range(1, 10)]
    rows: list[Measured] = [(SCREEN, _pair(a, b)) for a, b in itertools.combinations(nodes, 2)]
    rows += [(CONFIRM, _pair(a, b)) for a, b in itertools.combinations(nodes, 2) if 2 not in (_leaf(a), _leaf(b))]
    rows += [(CONFIRM, _pair(a, b)) for a, b in (("n1", "n4"), ("n5", "n7"), ("n3", "n6"))]
    found = _attribution(rows)
    assert _uplink_named(found)
    assert [v.host for v in found.links.nics] == [] and found.links.links == ()


def test_a_pair_whose_trace_timed_out_through_the_slow_uplink_is_not_a_slow_pair():
    untraced = _pair("n5", "n9", back_share=0.7, traced=False)
    found = _attribution(_fleet({("n5", "n9"): untraced}))
    assert _uplink_named(found)
    assert found.links.links == () and [v.host for v in found.links.nics] == []


def test_a_nic_slower_than_the_uplink_explains_stays_that_nics():
    slow = {(a, b): _pair(a, b, nic=0.7) for a, b in itertools.combinations([f"n{i}" for i in range(1, 10)], 2)
            if "n4" in (a, b)}
    found = _attribution(_fleet(slow))
    assert [v.host for v in found.links.nics if v.confirmed] == ["n4"]


def test_an_untraced_pair_slower_than_the_uplink_leaves_any_pair_stays_a_slow_pair():
    crawl = tuple(StreamFigure(0.02, None) for _ in range(STREAMS))
    dead = LinkResult("n5", "n9", "tcp", None, 0.16, LINE, streams=crawl, back_streams=crawl)
    found = _attribution(_fleet({("n5", "n9"): dead}))
    assert _uplink_named(found)
    assert [(v.a, v.b) for v in found.links.links] == [("n5", "n9")]


def test_confirm_runs_that_cannot_split_the_uplink_from_their_own_leafs_still_confirm_it():
    # the captured confirm rounds re-tested only leaf1-leaf2 pairs: each slow stream crossed leaf1-spine1
    # as well as leaf2-spine1; the screen's leaf1-leaf3 pairs through spine1 had already cleared leaf1-spine1
    nodes = [f"n{i}" for i in range(1, 10)]
    rows: list[Measured] = [(SCREEN, _pair(a, b)) for a, b in itertools.combinations(nodes, 2)]
    rows += [(CONFIRM, _pair(a, b)) for a, b in (("n1", "n6"), ("n2", "n4"), ("n1", "n6"), ("n2", "n4"), ("n1", "n6"))]
    found = _attribution(rows)
    assert _uplink_named(found)
    (suspect,) = found.suspects
    assert suspect.retested >= 10 and suspect.confirm is not None and suspect.confirm.share_pct < 50
