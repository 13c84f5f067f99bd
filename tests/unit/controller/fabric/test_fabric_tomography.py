"""Tomography (gpudiag.fabric.tomography): the smallest set of fabric parts that explains the slow
observations, held against noise, never one bad pair or one node, and saying which set it narrowed
to where nothing tested tells parts apart."""

from __future__ import annotations

import math
import random

from gpudiag.fabric.elements import Element
from gpudiag.fabric.tomography import Observation, find_culprits, z_bar

MATERIAL = math.log(0.95)
SPREAD = 0.01


def _link(a: str, b: str) -> Element:
    return Element.link((a, b), None)


def _switch(name: str) -> Element:
    return Element.switch(name, None)


def _streams(slow: dict[Element, float], *, leaves: int = 4, spines: int = 4, streams: int = 8, seed: int = 1,
             noise: float = 0.005) -> list[Observation]:
    """Traced streams of one pair per ordered leaf pair: each crosses its source leaf's uplink to
    a random spine and that spine's link to the target leaf; a part of ``slow`` keeps its factor."""
    rng = random.Random(seed)
    rows = []
    for a in range(1, leaves + 1):
        for b in range(1, leaves + 1):
            if a == b:
                continue
            for _ in range(streams):
                spine = f"spine{rng.randrange(1, spines + 1)}"
                parts = frozenset({_link(f"leaf{a}", spine), _link(f"leaf{b}", spine), _switch(spine),
                                   _switch(f"leaf{a}"), _switch(f"leaf{b}")})
                ratio = sum(math.log(slow.get(part, 1.0)) for part in parts) + rng.gauss(0.0, noise)
                rows.append(Observation((f"h{a}", f"h{b}"), ratio, ratio / SPREAD, parts, "screen"))
    return rows


def test_one_slow_uplink_is_named_alone_and_not_its_spine_or_the_links_beside_it():
    rows = _streams({_link("leaf2", "spine3"): 0.8})
    [culprit] = find_culprits(rows, MATERIAL, z_bar(40))
    assert culprit.elements == (_link("leaf2", "spine3"),)
    assert 18 < culprit.deficit_pct < 22 and culprit.slow == culprit.observations


def test_a_slow_spine_is_named_as_the_switch_not_as_its_links():
    [culprit] = find_culprits(_streams({_switch("spine2"): 0.7}), MATERIAL, z_bar(40))
    assert culprit.elements == (_switch("spine2"),)


def test_two_slow_links_of_one_spine_are_two_links_while_its_other_links_stay_fine():
    slow = {_link("leaf1", "spine3"): 0.6, _link("leaf2", "spine3"): 0.6}
    culprits = find_culprits(_streams(slow), MATERIAL, z_bar(40))
    assert sorted(c.elements for c in culprits) == [(_link("leaf1", "spine3"),), (_link("leaf2", "spine3"),)]


def test_parts_no_tested_path_tells_apart_are_named_as_the_set():
    # two leaves: every stream over spine1 crosses leaf1-spine1, leaf2-spine1 and spine1 alike
    [culprit] = find_culprits(_streams({_link("leaf1", "spine1"): 0.7}, leaves=2), MATERIAL, z_bar(20))
    assert set(culprit.elements) == {_link("leaf1", "spine1"), _link("leaf2", "spine1"), _switch("spine1")}


def test_noise_alone_names_nothing_even_where_a_few_streams_dip():
    for seed in range(20):
        rows = _streams({}, seed=seed, noise=0.01)
        assert find_culprits(rows, MATERIAL, z_bar(40)) == [], seed


def test_one_bad_pair_or_one_host_is_no_fabric_fault():
    rows = _streams({})
    part = _link("leaf1", "spine1")
    slow_pair = [Observation(("h9", "h8"), math.log(0.6), math.log(0.6) / SPREAD, frozenset({part}), "screen")
                 for _ in range(6)]
    assert find_culprits(rows + slow_pair, MATERIAL, z_bar(40)) == []  # slow observations from one pair
    one_host = [Observation(("h9", f"p{i}"), math.log(0.6), math.log(0.6) / SPREAD, frozenset({part}), "screen")
                for i in range(6)]
    assert find_culprits(rows + one_host, MATERIAL, z_bar(40), min_hosts=8) == []


def test_a_small_effect_is_not_material_however_many_observations_show_it():
    # 3 % slow: far beyond the noise in z, yet below the 5 % that makes a part slow
    assert find_culprits(_streams({_link("leaf3", "spine1"): 0.97}), MATERIAL, z_bar(40)) == []


def test_the_same_observations_in_any_order_give_the_same_culprits():
    rows = _streams({_link("leaf2", "spine3"): 0.8, _switch("spine1"): 0.75})
    expected = find_culprits(rows, MATERIAL, z_bar(40))
    shuffled = list(rows)
    random.Random(5).shuffle(shuffled)
    assert find_culprits(shuffled, MATERIAL, z_bar(40)) == expected and len(expected) == 2
