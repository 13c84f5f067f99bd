"""The pairwise link schedule: screen, confirm and full rounds are matchings that cover what they promise."""

from collections import Counter
from itertools import combinations

import pytest

from gpudiag.links import CONFIRM, FULL, SCREEN, Round, Suspects, confirm_rounds, full_rounds, pair_key, screen_rounds
from gpudiag.links.schedule import next_stride, pair_levels

SIZES = [*range(2, 18), 31, 64, 65, 128]


def names(count: int) -> list[str]:
    return [f"node{i:03d}" for i in range(1, count + 1)]


def assert_matchings(rounds: list[Round]) -> None:
    for round_ in rounds:
        ends = [host for pair in round_.pairs for host in pair]
        assert len(ends) == len(set(ends)), round_
        assert all(a < b for a, b in round_.pairs), round_


def all_pairs(rounds: list[Round]) -> list[tuple[str, str]]:
    return [pair for round_ in rounds for pair in round_.pairs]


@pytest.mark.parametrize("count", [size for size in SIZES if size >= 3])
def test_the_screen_tests_every_node_twice_with_two_partners_in_n_tests(count):
    hosts = names(count)
    rounds = screen_rounds(hosts)
    assert_matchings(rounds)
    pairs = all_pairs(rounds)
    assert len(pairs) == count == len(set(pairs))
    partners: dict[str, set[str]] = {host: set() for host in hosts}
    for a, b in pairs:
        partners[a].add(b)
        partners[b].add(a)
    assert all(len(mine) == 2 for mine in partners.values())
    assert Counter(host for pair in pairs for host in pair) == Counter({host: 2 for host in hosts})
    assert {round_.phase for round_ in rounds} == {SCREEN}


@pytest.mark.parametrize("count", [size for size in SIZES if size >= 3])
def test_the_screen_is_the_cycle_in_the_order_given(count):
    hosts = names(count)
    cycle = {pair_key(hosts[i], hosts[(i + 1) % count]) for i in range(count)}
    assert set(all_pairs(screen_rounds(hosts))) == cycle


@pytest.mark.parametrize("count", [4, 6, 64, 128])
def test_an_even_screen_is_two_rounds_of_n_over_2_pairs(count):
    rounds = screen_rounds(names(count))
    assert [len(round_.pairs) for round_ in rounds] == [count // 2, count // 2]


@pytest.mark.parametrize("count", [3, 5, 7, 31, 65])
def test_an_odd_screen_closes_the_cycle_in_a_third_round_of_one_pair(count):
    hosts = names(count)
    rounds = screen_rounds(hosts)
    assert [len(round_.pairs) for round_ in rounds] == [(count - 1) // 2, (count - 1) // 2, 1]
    assert rounds[2].pairs == (pair_key(hosts[-1], hosts[0]),)


def test_the_screen_of_two_hosts_is_one_pair_and_of_one_host_nothing():
    assert screen_rounds(["b", "a"]) == [Round(SCREEN, (("a", "b"),))]
    assert screen_rounds(["a"]) == []
    assert screen_rounds([]) == []


@pytest.mark.parametrize("count", SIZES)
def test_full_covers_every_unordered_pair_exactly_once(count):
    hosts = names(count)
    rounds = full_rounds(hosts)
    assert_matchings(rounds)
    pairs = all_pairs(rounds)
    assert sorted(pairs) == sorted(pair_key(a, b) for a, b in combinations(hosts, 2))
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)
    assert all(len(round_.pairs) == count // 2 for round_ in rounds)
    assert {round_.phase for round_ in rounds} == {FULL}


@pytest.mark.parametrize("count", [3, 5, 9])
def test_in_an_odd_full_schedule_each_node_sits_out_exactly_one_round(count):
    hosts = names(count)
    idle = Counter(host for round_ in full_rounds(hosts) for host in set(hosts) - round_.hosts)
    assert idle == Counter({host: 1 for host in hosts})


def test_full_of_one_host_is_nothing():
    assert full_rounds(["a"]) == [] == full_rounds([])


@pytest.mark.parametrize("schedule", [screen_rounds, full_rounds])
def test_a_host_given_twice_is_refused(schedule):
    with pytest.raises(ValueError, match="twice"):
        schedule(["a", "b", "a"])


def test_schedules_are_deterministic():
    hosts = names(37)
    assert screen_rounds(hosts) == screen_rounds(list(hosts))
    assert full_rounds(hosts) == full_rounds(list(hosts))


def test_a_round_must_be_a_matching_of_canonical_pairs():
    with pytest.raises(ValueError, match="two pairs"):
        Round(SCREEN, (("a", "b"), ("b", "c")))
    with pytest.raises(ValueError, match="canonical"):
        Round(SCREEN, (("b", "a"),))
    with pytest.raises(ValueError, match="two different hosts"):
        pair_key("a", "a")
    with pytest.raises(ValueError, match="phase"):
        Round("later", ())


def test_confirm_pairs_each_suspect_with_a_passed_node_it_has_not_had_in_one_round():
    hosts = names(16)
    tested = all_pairs(screen_rounds(hosts))
    suspects = Suspects(hosts=("node005", "node011"))
    passed = ["node006", "node001", "node002", "node003"]  # node006 was node005's screen partner
    rounds = confirm_rounds(suspects, passed, tested)
    assert len(rounds) == 1 and rounds[0].phase == CONFIRM
    assert set(rounds[0].pairs) == {("node001", "node005"), ("node006", "node011")}


def test_confirm_retests_each_suspect_pair_as_it_is():
    rounds = confirm_rounds(Suspects(pairs=(("node004", "node003"), ("node001", "node002"))), ["node009"])
    assert rounds == [Round(CONFIRM, (("node001", "node002"), ("node003", "node004")))]


def test_a_suspect_that_is_also_in_a_suspect_pair_needs_a_second_round():
    rounds = confirm_rounds(Suspects(hosts=("node003",), pairs=(("node003", "node004"),)), ["node009"])
    assert_matchings(rounds)
    assert [r.pairs for r in rounds] == [(("node003", "node004"),), (("node003", "node009"),)]


def test_confirm_never_pairs_a_suspect_with_a_suspect_while_nodes_passed():
    suspects = Suspects(hosts=("a", "b", "c"))
    rounds = confirm_rounds(suspects, ["a", "p"], [])  # "a" is a suspect: never a trusted partner
    assert_matchings(rounds)
    assert sorted(all_pairs(rounds)) == [("a", "p"), ("b", "p"), ("c", "p")]
    assert len(rounds) == 3  # one passed node: one re-pairing per round


def test_confirm_uses_an_earlier_partner_only_when_every_passed_node_was_one():
    rounds = confirm_rounds(Suspects(hosts=("s",)), ["p"], [("p", "s")])
    assert all_pairs(rounds) == [("p", "s")]


def test_a_suspect_is_paired_at_its_line_rate_before_a_fresh_slower_partner():
    # h1 (400 Gb/s) had h2 (400) already; h3 and h4 run at 200: a pair with either runs at 200
    # and tells nothing of h1's 400 Gb/s NIC, so h1 runs with h2 again, fresh as h3 is
    rates = {"h1": 400.0, "h2": 400.0, "h3": 200.0, "h4": 200.0}
    [round_] = confirm_rounds(Suspects(hosts=("h1",)), ["h3", "h4", "h2"], [("h1", "h2")], rates)
    assert round_.pairs == (("h1", "h2"),)
    # a fresh partner at its rate or above comes first of all; a slower one only with none such
    rates["h5"] = 800.0
    [round_] = confirm_rounds(Suspects(hosts=("h1",)), ["h3", "h4", "h2", "h5"], [("h1", "h2")], rates)
    assert round_.pairs == (("h1", "h5"),)
    [round_] = confirm_rounds(Suspects(hosts=("h1",)), ["h3", "h4"], [("h1", "h2")], rates)
    assert round_.pairs == (("h1", "h3"),)
    # without rates, the first fresh partner as before
    [round_] = confirm_rounds(Suspects(hosts=("h1",)), ["h3", "h4", "h2"], [("h1", "h2")])
    assert round_.pairs == (("h1", "h3"),)


def test_suspects_no_passed_host_at_their_rate_can_meet_are_paired_among_themselves():
    # h1-h3 run at 400 Gb/s, h4-h6 at 200; h1's NIC slow made h2 a suspect, and h2-h3 dipped on a
    # rail, so h3 is one too. Only 200 Gb/s hosts passed: a pair with them tells nothing of a
    # 400 Gb/s NIC, so h2 and h3 run their pair again (as with no host passed at all); with h1 a
    # suspect too, the fresh pair h1-h3 comes first, and no 400 Gb/s suspect meets a 200 one
    rates = {"h1": 400.0, "h2": 400.0, "h3": 400.0, "h4": 200.0, "h5": 200.0, "h6": 200.0}
    tested = [("h1", "h2"), ("h2", "h3"), ("h3", "h4"), ("h4", "h5"), ("h5", "h6"), ("h1", "h6")]
    rounds = confirm_rounds(Suspects(hosts=("h2", "h3")), ["h4", "h5", "h6"], tested, rates)
    assert [round_.pairs for round_ in rounds] == [(("h2", "h3"),)]
    rounds = confirm_rounds(Suspects(hosts=("h1", "h2", "h3")), ["h4", "h5", "h6"], tested, rates)
    paired = {pair for round_ in rounds for pair in round_.pairs}
    assert ("h1", "h3") in paired and not any(rates[a] != rates[b] for a, b in paired if "h1" not in (a, b))
    # a 400 Gb/s host that passed is met as before, fresh
    rounds = confirm_rounds(Suspects(hosts=("h2", "h3")), ["h1", "h4"], tested, rates)
    assert sorted(pair for round_ in rounds for pair in round_.pairs) == [("h1", "h2"), ("h1", "h3")]
    # h2 passed at 400 but was both suspects' partner already (its NIC slow, both pairs below the
    # floor): the two meet each other first, fresh, rather than re-run their pairs with h2
    tested = [("h1", "h2"), ("h2", "h3"), ("h3", "h4"), ("h1", "h6")]
    rounds = confirm_rounds(Suspects(hosts=("h1", "h3")), ["h2", "h5", "h6"], tested, rates)
    assert [round_.pairs for round_ in rounds] == [(("h1", "h3"),)]


def test_re_runs_with_earlier_partners_go_round_them_fewest_runs_first():
    # a small job: every passed node was a partner already; the pair run the fewest times goes next
    tested = [("p1", "s"), ("p1", "s"), ("p2", "s"), ("p3", "s"), ("p3", "s")]
    assert all_pairs(confirm_rounds(Suspects(hosts=("s",)), ["p1", "p2", "p3"], tested)) == [("p2", "s")]
    tested.append(("p2", "s"))
    assert all_pairs(confirm_rounds(Suspects(hosts=("s",)), ["p1", "p2", "p3"], tested)) == [("p1", "s")]


def test_suspects_with_no_fresh_partner_and_no_passed_node_re_run_their_least_run_pair():
    # three hosts, every pair tested: a second run of the pair run the fewest times is all there is to learn
    tested = [("a", "b"), ("a", "b"), ("a", "c"), ("b", "c"), ("b", "c")]
    rounds = confirm_rounds(Suspects(hosts=("a", "b", "c")), [], tested)
    assert all_pairs(rounds) == [("a", "c")]


def test_among_pairs_run_as_often_the_fastest_is_run_again_first():
    # four hosts, every pair run once, none passed (two NICs at 60 %, and the healthy pair dipped
    # under the floor on one rail): its second run is what can clear both of its ends
    tested = list(combinations(["a", "b", "c", "d"], 2))
    levels = pair_levels([(("a", "b"), 230.0), (("a", "c"), 231.0), (("b", "c"), 385.0), (("b", "c"), 352.0),
                          (("a", "d"), 220.0), (("b", "d"), 229.0), (("c", "d"), 232.0), (("a", "b"), None)])
    assert levels[("b", "c")] == pytest.approx(368.5) and levels[("a", "b")] == 230.0
    rounds = confirm_rounds(Suspects(hosts=("a", "b", "c", "d")), [], tested, levels=levels)
    assert sorted(all_pairs(rounds)) == [("a", "d"), ("b", "c")]
    # without levels, by name as before: the healthy pair waits
    by_name = confirm_rounds(Suspects(hosts=("a", "b", "c", "d")), [], tested)
    assert sorted(all_pairs(by_name)) == [("a", "b"), ("c", "d")]
    # fewer runs still come first
    tested.append(("b", "c"))
    assert ("b", "c") not in all_pairs(confirm_rounds(Suspects(hosts=("a", "b", "c", "d")), [], tested,
                                                      levels=levels))


def test_with_no_passed_node_suspects_are_paired_with_suspects_they_have_not_had():
    hosts = names(6)
    tested = all_pairs(screen_rounds(hosts))
    rounds = confirm_rounds(Suspects(hosts=tuple(hosts)), [], tested)
    assert len(rounds) == 1
    assert_matchings(rounds)
    assert not set(all_pairs(rounds)) & set(tested)
    assert len(rounds[0].pairs) == 3


def test_no_suspects_no_confirm_rounds():
    assert confirm_rounds(Suspects(), ["a", "b"], [("a", "b")]) == []
    assert not Suspects()


@pytest.mark.parametrize("count", range(2, 15))
def test_successive_strides_test_every_pair_exactly_once_each_sweep_a_set_of_matchings(count):
    hosts = names(count)
    seen: Counter[tuple[str, str]] = Counter()
    stride = None
    for _ in range(max(1, count // 2)):
        stride = next_stride(stride, count)
        rounds = screen_rounds(hosts, stride)
        assert_matchings(rounds)
        assert len(rounds) <= 3
        pairs = all_pairs(rounds)
        assert len(pairs) == len(set(pairs))
        seen.update(pairs)
    assert set(seen) == set(combinations(hosts, 2)) and set(seen.values()) == {1}
    assert next_stride(stride, count) == 1  # and round again


def test_a_stride_beyond_half_the_fleet_is_refused():
    with pytest.raises(ValueError, match="stride must be from 1 to 3 for 6 hosts"):
        screen_rounds(names(6), 4)
