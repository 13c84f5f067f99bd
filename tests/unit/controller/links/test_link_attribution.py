"""Link attribution on synthetic pair matrices: slow NIC, slow link, link error, a fleet below line rate."""

import math
import random

import pytest

from gpudiag.links import (
    LinkResult,
    LinkThresholds,
    Round,
    attribute_links,
    confirm_rounds,
    full_rounds,
    pair_key,
    screen_rounds,
)
from gpudiag.links.linkfindings import link_findings

LINE_GBPS = 400.0
HEALTHY_GBPS = 388.0


def names(count: int) -> list[str]:
    return [f"node{i:02d}" for i in range(1, count + 1)]


def measure(rounds: list[Round], *, nics: dict[str, float] | None = None,
            links: dict[tuple[str, str], float] | None = None, seed: int = 0, noise: float = 0.01,
            backend: str = "perftest", rail: int | None = 0, line: float | None = LINE_GBPS,
            healthy: float = HEALTHY_GBPS) -> list[LinkResult]:
    """One result per pair of ``rounds``: healthy × the slowest of both NICs' and the link's factors, with noise."""
    nics, links = nics or {}, links or {}
    rng = random.Random(seed)
    results = []
    for round_ in rounds:
        for a, b in round_.pairs:
            factor = min(nics.get(a, 1.0), nics.get(b, 1.0), links.get(pair_key(a, b), 1.0))
            results.append(LinkResult(a, b, backend, rail, healthy * factor * (1 + rng.gauss(0, noise)), line))
    return results


def screen_and_confirm(hosts: list[str], **faults) -> tuple[list[LinkResult], object]:
    """The screen, then confirm phases while suspects remain (at most three)."""
    results = measure(screen_rounds(hosts), **faults)
    attribution = attribute_links(results)
    for phase in range(3):
        if not attribution.suspects:
            break
        rounds = confirm_rounds(attribution.suspects, attribution.passed, [r.pair for r in results])
        results += measure(rounds, seed=phase + 1, **faults)
        attribution = attribute_links(results)
    return results, attribution


def test_one_slow_nic_is_that_host_and_no_slow_link():
    hosts = names(16)
    _, attribution = screen_and_confirm(hosts, nics={"node07": 0.5})
    assert [(v.host, v.rail, v.confirmed) for v in attribution.nics] == [("node07", 0, True)]
    assert attribution.links == () == attribution.errors == attribution.shifts
    assert not attribution.suspects
    verdict = attribution.nics[0]
    assert len(verdict.pairs) == 3 and len(verdict.known_good) == 3
    assert verdict.deficit_pct == pytest.approx(50, abs=3)
    assert verdict.evidence.startswith("node07 slow with all 3 partners on perftest rail 0: node01 ")  # confirm partner
    assert ", node06 " in verdict.evidence and ", node08 " in verdict.evidence  # screen partners
    assert "Gb/s vs fleet 38" in verdict.evidence and "line rate 400 Gb/s" in verdict.evidence


def test_after_the_screen_a_slow_nic_is_named_but_left_to_confirm_with_a_passed_node():
    hosts = names(16)
    results = measure(screen_rounds(hosts), nics={"node07": 0.5})
    attribution = attribute_links(results)
    assert [(v.host, v.confirmed) for v in attribution.nics] == [("node07", False)]
    assert "not yet confirmed" in attribution.nics[0].evidence
    assert attribution.suspects.hosts == ("node07",) and attribution.suspects.pairs == ()
    assert "node07" not in attribution.passed and {"node06", "node08"} <= set(attribution.passed)
    rounds = confirm_rounds(attribution.suspects, attribution.passed, [r.pair for r in results])
    assert len(rounds) == 1 and len(rounds[0].pairs) == 1
    partner = (set(rounds[0].pairs[0]) - {"node07"}).pop()
    assert partner in attribution.passed and partner not in ("node06", "node08")


def test_one_slow_pair_is_exactly_that_slow_link_confirmed_by_a_retest():
    hosts = names(16)
    results = measure(screen_rounds(hosts), links={("node04", "node05"): 0.6})
    first = attribute_links(results)
    assert [(v.a, v.b, v.confirmed, v.undecided) for v in first.links] == [("node04", "node05", False, ())]
    assert first.suspects.pairs == (("node04", "node05"),) and first.suspects.hosts == ()
    _, attribution = screen_and_confirm(hosts, links={("node04", "node05"): 0.6})
    assert [(v.a, v.b, v.confirmed) for v in attribution.links] == [("node04", "node05", True)]
    assert attribution.nics == () == attribution.errors
    evidence = attribution.links[0].evidence
    assert "node04 ↔ node05 slow on perftest rail 0" in evidence and "mean of 2 runs" in evidence
    assert "both ends fine with other partners: node04 with node03" in evidence


@pytest.mark.parametrize("count", [7, 9, 33])
def test_an_odd_fleet_finds_a_slow_nic_next_to_the_pair_that_closes_the_cycle(count):
    hosts = names(count)
    _, attribution = screen_and_confirm(hosts, nics={hosts[0]: 0.6}, links={pair_key(hosts[3], hosts[4]): 0.7})
    assert [(v.host, v.confirmed) for v in attribution.nics] == [(hosts[0], True)]
    assert [(v.a, v.b, v.confirmed) for v in attribution.links] == [(hosts[3], hosts[4], True)]


def test_a_slow_nic_in_a_full_matrix_is_confirmed_in_one_pass():
    attribution = attribute_links(measure(full_rounds(names(10)), nics={"node03": 0.7}))
    assert [(v.host, v.confirmed, len(v.pairs)) for v in attribution.nics] == [("node03", True, 9)]
    assert attribution.links == () and not attribution.suspects


def test_two_slow_links_on_one_node_are_not_taken_for_its_nic():
    hosts = names(16)
    links = {("node05", "node06"): 0.6, ("node06", "node07"): 0.6}  # node06's two screen partners
    first = attribute_links(measure(screen_rounds(hosts), links=links))
    assert [(v.host, v.confirmed) for v in first.nics] == [("node06", False)]  # looks like its NIC, for now
    _, attribution = screen_and_confirm(hosts, links=links)
    assert attribution.nics == ()
    assert [(v.a, v.b, v.confirmed) for v in attribution.links] == [("node05", "node06", True),
                                                                   ("node06", "node07", True)]


def test_a_fleet_at_half_line_rate_is_flagged_against_the_line_rate():
    hosts = names(16)
    results = measure(full_rounds(hosts), healthy=HEALTHY_GBPS / 2)
    attribution = attribute_links(results)
    [shift] = attribution.shifts
    assert shift.kind == "fleet_shift" and shift.confirmed
    assert shift.fleet_gbps == pytest.approx(194, rel=0.02) and shift.floor_gbps == 360.0
    assert shift.pairs_below == shift.pairs == len(results)
    assert "below their line rate" in shift.evidence and "line rate 400 Gb/s" in shift.evidence
    assert attribution.nics == () == attribution.links  # the fabric, not 16 NICs
    assert attribution.references[0].shifted


def test_a_fleet_at_half_line_rate_is_confirmed_by_one_more_partner_each():
    hosts = names(16)
    results = measure(screen_rounds(hosts), healthy=HEALTHY_GBPS / 2)
    first = attribute_links(results)
    assert [s.confirmed for s in first.shifts] == [False] and first.suspects.hosts == tuple(hosts)
    rounds = confirm_rounds(first.suspects, first.passed, [r.pair for r in results])
    assert len(rounds) == 1 and len(rounds[0].pairs) == 8  # nobody passed: suspects meet new partners
    attribution = attribute_links(results + measure(rounds, healthy=HEALTHY_GBPS / 2, seed=1))
    assert [s.confirmed for s in attribution.shifts] == [True] and not attribution.suspects


def test_a_slow_nic_in_a_fleet_below_line_rate_still_stands_out():
    attribution = attribute_links(measure(full_rounds(names(12)), nics={"node09": 0.5}, healthy=HEALTHY_GBPS / 2))
    assert len(attribution.shifts) == 1
    assert [(v.host, v.confirmed) for v in attribution.nics] == [("node09", True)]


def test_with_few_hosts_their_own_level_and_the_line_rate_judge():
    results = measure(full_rounds(names(4)), nics={"node02": 0.6})
    attribution = attribute_links(results)
    reference = attribution.references[0]
    assert reference.job_level and reference.level_checked and reference.floor_gbps == 360.0
    assert 0.97 * HEALTHY_GBPS < reference.fleet_gbps < 1.03 * HEALTHY_GBPS  # the healthy pairs' level
    # far below the line rate's floor: the floor judges it, confirmed by its known-good partners
    assert [(v.host, v.confirmed, v.reference_gbps) for v in attribution.nics] == [("node02", True, 400.0)]
    assert "line rate 400 Gb/s (a healthy link reaches 90.0 % = 360.0 Gb/s)" in attribution.nics[0].evidence
    # 6 % slow stays above the floor: only the job's own level sees it, and two of its pairs are run
    # again before it is confirmed
    results = measure(full_rounds(names(4)), nics={"node02": 0.94})
    [suspect] = attribute_links(results).nics
    assert (suspect.host, suspect.confirmed) == ("node02", False) and "job level" in suspect.evidence
    again = attribute_links(results + measure(full_rounds(names(4)), nics={"node02": 0.94}, seed=2))
    assert [(v.host, v.confirmed) for v in again.nics] == [("node02", True)]


def test_without_a_line_rate_or_enough_hosts_nothing_is_compared():
    # tcp among four hosts: its figures measure the hosts' CPUs as much as the link, no job level
    attribution = attribute_links(measure(full_rounds(names(4)), nics={"node02": 0.6}, line=None, backend="tcp",
                                          rail=None))
    assert not attribution.references[0].compared
    assert attribution.nics == () == attribution.links and attribution.passed == ()


def test_a_small_job_on_a_line_rate_backend_without_a_line_rate_finds_a_slower_part_and_says_its_level_unchecked():
    attribution = attribute_links(measure(full_rounds(names(4)), nics={"node02": 0.6}, line=None))
    reference = attribution.references[0]
    assert reference.compared and not reference.level_checked
    assert [v.host for v in attribution.nics] == ["node02"] and attribution.links == ()
    findings = link_findings(attribution, 15.0)
    shared = next(f for f in findings if f.host == "node[01-04]")
    assert shared.kind == "unchecked" and "a cause they all share is not" in shared.evidence


def test_a_pair_that_could_not_be_measured_is_a_link_error_naming_both_ends_and_why():
    hosts = names(8)
    results = [r for r in measure(screen_rounds(hosts)) if r.pair != ("node03", "node04")]
    results.append(LinkResult("node04", "node03", "perftest", 0, None, LINE_GBPS, error="connect timed out after 30 s"))
    attribution = attribute_links(results)
    [error] = attribution.errors
    assert (error.kind, error.a, error.b, error.rail, error.reason) == ("link_error", "node03", "node04", 0,
                                                                        "connect timed out after 30 s")
    assert error.evidence == "node03 ↔ node04 could not be measured on perftest rail 0: connect timed out after 30 s"
    assert attribution.nics == () == attribution.links


def test_a_pair_measured_on_a_retest_after_an_error_is_no_link_error():
    results = measure(screen_rounds(names(8)))
    results.append(LinkResult("node01", "node02", "perftest", 0, None, error="refused"))
    assert attribute_links(results).errors == ()


def test_the_one_slow_pair_of_two_hosts_is_their_network_waiting_for_a_second_run():
    results = measure(screen_rounds(names(2)), nics={"node02": 0.5})
    attribution = attribute_links(results)
    [shift] = attribution.shifts
    assert attribution.links == () == attribution.nics and not shift.confirmed
    assert set(attribution.suspects.hosts) == {"node01", "node02"}  # a confirm round runs the pair again


def test_a_slow_pair_of_a_two_node_job_run_twice_fails_its_network_and_names_neither_end():
    results = measure(screen_rounds(names(2)), nics={"node02": 0.5})
    results += measure(screen_rounds(names(2)), nics={"node02": 0.5}, seed=1)  # the confirm round's re-test
    [finding] = link_findings(attribute_links(results), 7.0)
    assert (finding.kind, finding.host, finding.peer, finding.severity, finding.confirmed) == (
        "slow_network", None, None, "fail", True)
    assert "every one of its NICs" in finding.action_detail


def _dead_port(hosts: list[str], dead: str) -> list[LinkResult]:
    results = []
    for result in measure(screen_rounds(hosts)):
        if dead in result.pair:
            result = LinkResult(result.a, result.b, "perftest", 0, None, LINE_GBPS, error=f"{dead}: no route to host")
        results.append(result)
    return results


def test_a_host_no_partner_could_reach_while_they_reached_others_is_one_host_link_error():
    attribution = attribute_links(_dead_port(names(8), "node05"))
    [host_error] = attribution.host_errors
    assert (host_error.host, host_error.partners) == ("node05", ("node04", "node06"))
    assert "its data port, address or firewall" in host_error.evidence and "no route to host" in host_error.evidence
    findings = link_findings(attribution, 7.0)
    # one finding for the host instead of one per pair, and its host goes on the exclude list
    assert [(f.kind, f.host, f.peer, f.severity) for f in findings] == [("link_error", "node05", None, "warn")]


def test_a_pair_error_alone_or_of_a_two_node_job_blames_no_host():
    assert attribute_links(_dead_port(names(2), "node02")).host_errors == ()
    results = [r for r in measure(screen_rounds(names(8))) if r.pair != ("node03", "node04")]
    results.append(LinkResult("node03", "node04", "perftest", 0, None, LINE_GBPS, error="refused"))
    attribution = attribute_links(results)
    assert attribution.host_errors == () and len(attribution.errors) == 1


@pytest.mark.parametrize("slow_rail", [0, 3])
def test_a_slow_nic_is_named_on_its_own_rail_only(slow_rail):
    hosts = names(12)
    rounds = full_rounds(hosts)
    results = []
    for rail in range(4):
        nics = {"node05": 0.6} if rail == slow_rail else {}
        results += measure(rounds, nics=nics, backend="nccl", rail=rail, seed=rail)
    attribution = attribute_links(results)
    assert [(v.host, v.backend, v.rail) for v in attribution.nics] == [("node05", "nccl", slow_rail)]
    assert f"on nccl rail {slow_rail}:" in attribution.nics[0].evidence
    assert attribution.links == ()


def test_groups_are_never_pooled():
    hosts = names(12)
    rounds = full_rounds(hosts)
    results = (measure(rounds, backend="perftest", seed=1) + measure(rounds, backend="tcp", rail=None, line=100.0,
                                                                     healthy=94.0, seed=2)
               + measure(rounds, rail=1, line=200.0, healthy=194.0, seed=3))
    attribution = attribute_links(results)
    assert attribution.nics == () == attribution.links == attribution.shifts
    assert [(r.group.backend, r.group.rail, r.group.line_rate_gbps) for r in attribution.references] == [
        ("perftest", 0, 400.0), ("perftest", 1, 200.0), ("tcp", None, 100.0)]


def test_a_tight_fleet_flags_no_noise():
    attribution = attribute_links(measure(full_rounds(names(16)), noise=0.0005))
    assert attribution.nics == () == attribution.links and not attribution.suspects
    assert len(attribution.passed) == 16


def test_the_same_results_in_any_order_give_the_same_verdicts():
    hosts = names(24)
    results, _ = screen_and_confirm(hosts, nics={"node03": 0.6, "node04": 0.7}, links={("node10", "node11"): 0.7})
    results.append(LinkResult("node20", "node21", "perftest", 0, None, error="no route to host"))
    expected = attribute_links(results)
    assert {v.host for v in expected.nics} == {"node03", "node04"}
    for seed in range(5):
        shuffled = list(results)
        random.Random(seed).shuffle(shuffled)
        flipped = [LinkResult(r.b, r.a, r.backend, r.rail, r.gbps, r.line_rate_gbps, r.error) for r in shuffled]
        assert attribute_links(shuffled) == expected
        assert repr(attribute_links(flipped)) == repr(expected)


def test_a_link_result_must_be_a_figure_or_an_error():
    with pytest.raises(ValueError, match="either a figure"):
        LinkResult("a", "b", "tcp")
    with pytest.raises(ValueError, match="either a figure"):
        LinkResult("a", "b", "tcp", gbps=1.0, error="both")
    with pytest.raises(ValueError, match="finite"):
        LinkResult("a", "b", "tcp", gbps=float("nan"))
    with pytest.raises(ValueError, match="backend"):
        LinkResult("a", "b", "rdma", gbps=1.0)
    with pytest.raises(ValueError, match="two different hosts"):
        LinkResult("a", "a", "tcp", gbps=1.0)


def test_thresholds_are_checked():
    with pytest.raises(ValueError, match="robust_z"):
        LinkThresholds(robust_z=3.0)
    with pytest.raises(ValueError, match="line_rate_efficiency_pct"):
        LinkThresholds(line_rate_efficiency_pct=120.0)


def test_link_thresholds_come_from_the_thresholds_file_and_an_override_reaches_them(tmp_path):
    from gpudiag.analysis.thresholds import load_thresholds
    from gpudiag.links.attribution import link_thresholds

    assert link_thresholds(load_thresholds(None)) == LinkThresholds()
    path = tmp_path / "t.json"
    path.write_text('{"schema": "gpudiag.thresholds/1", "link_deficit": {"value": 20, "unit": "percent"}}')
    assert link_thresholds(load_thresholds(str(path))).deficit_pct == 20.0


# --- tcp is judged against its fleet and baseline, never against a line rate it cannot reach ----------


def test_a_tcp_fabric_at_60_percent_of_its_line_rate_is_no_shift_when_its_fleet_is_level():
    # a few TCP streams through the kernel reach ~60 % of a 10 GbE line: that is their healthy level
    results = measure(full_rounds(names(8)), backend="tcp", rail=None, line=10.0, healthy=5.8)
    attribution = attribute_links(results)
    assert attribution.shifts == () == attribution.nics == attribution.links
    assert all(reference.compared and reference.floor_gbps is None for reference in attribution.references)
    assert link_findings(attribution, 15.0) == []


def test_a_slow_tcp_nic_is_still_found_against_its_fleet():
    hosts = names(8)
    _, attribution = screen_and_confirm(hosts, nics={"node03": 0.5}, backend="tcp", rail=None, line=10.0,
                                        healthy=5.8)
    assert [(v.host, v.confirmed) for v in attribution.nics] == [("node03", True)]


def test_a_perftest_fabric_below_its_line_rate_is_still_a_shift():
    results = measure(full_rounds(names(8)), line=400.0, healthy=250.0)
    attribution = attribute_links(results)
    assert [shift.backend for shift in attribution.shifts] == ["perftest"]


@pytest.mark.parametrize("line", [10.0, None], ids=["line-rate-known", "no-line-rate"])
def test_tcp_pairs_with_nothing_to_compare_with_are_unchecked_never_passed(line):
    # four hosts: too few for a fleet level (link_min_hosts), no baseline, and tcp reaches no line rate
    results = measure(full_rounds(names(4)), backend="tcp", rail=None, line=line, healthy=5.8)
    attribution = attribute_links(results)
    (finding,) = link_findings(attribution, 15.0)
    assert (finding.kind, finding.severity, finding.host, finding.basis) == (
        "unchecked", "warn", "node[01-04]", "comparison")
    assert "not compared, not passed" in finding.evidence and "6 pairs between 4 hosts" in finding.evidence


def test_tcp_is_judged_against_a_line_rate_the_operator_gave():
    # --net-line-rate: the operator's figure of what a (rate-limited) link delivers, which tcp reaches
    results = measure(full_rounds(names(4)), backend="tcp", rail=None, line=0.2, healthy=0.19, nics={"node03": 0.25})
    operator = LinkThresholds(floor_backends=("perftest", "nccl", "tcp"))
    assert [v.host for v in attribute_links(results, operator).nics] == ["node03"]
    assert [f.kind for f in link_findings(attribute_links(results), 15.0)] == ["unchecked"]  # the NIC's speed: no


def test_a_rail_whose_spread_is_low_by_chance_takes_its_familys_noise():
    # eight rails of one backend and line rate: seven show 3 % noise, one by chance 0.2 %; a pair
    # 6 % below on that rail is within the measurement's noise, not a slow link
    hosts = names(12)
    results = []
    for rail in range(8):
        noise = 0.002 if rail == 0 else 0.03
        results += measure(full_rounds(hosts), seed=rail, noise=noise, rail=rail)
    low = next(r for r in results if r.rail == 0 and r.pair == ("node01", "node02"))
    results[results.index(low)] = LinkResult("node01", "node02", "perftest", 0, HEALTHY_GBPS * 0.94, LINE_GBPS)
    attribution = attribute_links(results)
    rail0 = next(r for r in attribution.references if r.group.rail == 0)
    assert rail0.spread_gbps > 0.02 * HEALTHY_GBPS  # the family's spread, not the rail's own 0.2 %
    assert not [v for v in (*attribution.links, *attribution.nics) if v.rail == 0]


def test_a_nic_good_at_a_higher_line_rate_is_a_good_partner_at_a_lower_one():
    # 400 Gb/s hosts h01-h06 and 200 Gb/s hosts a01-a06; a pair across runs at 200 Gb/s (its
    # group); a01's NIC is slow: its 200 Gb/s partners include h hosts tested at 200 with a01 only
    fast, slow = [f"h{i:02d}" for i in range(1, 7)], [f"a{i:02d}" for i in range(1, 7)]
    rng = random.Random(4)
    results = []
    for a, b in (pair for round_ in full_rounds(fast + slow) for pair in round_.pairs):
        line = 400.0 if a.startswith("h") and b.startswith("h") else 200.0
        factor = 0.8 if "a01" in (a, b) else 1.0
        results.append(LinkResult(a, b, "perftest", 0, 0.97 * line * factor * (1 + rng.gauss(0, 0.01)), line))
    attribution = attribute_links(results)
    assert [(v.host, v.confirmed) for v in attribution.nics] == [("a01", True)]
    # the other way does not hold: a NIC slow at 400 Gb/s still fills a 200 Gb/s line
    results = [r if "h01" not in r.pair or r.line_rate_gbps == 200.0 else
               LinkResult(r.a, r.b, "perftest", 0, r.gbps * 0.9, r.line_rate_gbps) for r in results]
    assert "h01" in {v.host for v in attribute_links(results).nics}


def test_a_slow_pair_is_confirmed_on_its_runs_but_the_lowest_never_on_the_run_that_chose_it():
    # A full schedule of 8 hosts at 2 % noise: a pair chosen by a first run 18 % low, then run twice
    # more, 10 % and 3 % low. Two of its three runs and their median are slow (as was enough
    # before), but its runs after the lowest, judged alone, are not: the run that chose it says
    # nothing more. A pair slow in every run is confirmed.
    results = measure(full_rounds(names(8)), noise=0.02)
    chosen, real = ("node01", "node02"), ("node03", "node04")
    figures = {chosen: [HEALTHY_GBPS * factor for factor in (0.82, 0.90, 0.97)],
               real: [HEALTHY_GBPS * factor for factor in (0.80, 0.82, 0.81)]}
    results = [r for r in results if r.pair not in figures]
    results += [LinkResult(*pair, "perftest", 0, figure, LINE_GBPS)
                for pair, runs in figures.items() for figure in runs]
    verdicts = {(v.a, v.b): v for v in attribute_links(results).links}
    assert verdicts[real].confirmed is True and "slow again" in verdicts[real].evidence
    assert verdicts[chosen].confirmed is False  # a suspect to run again, never a verdict
    assert "not slow again" in verdicts[chosen].evidence


def test_among_many_pairs_run_again_a_pair_twice_just_past_three_sigma_is_not_confirmed_a_far_one_is():
    hosts = names(64)  # a full schedule: 2,016 pairs, and 40 of them chosen by a low run and run again
    results = measure(full_rounds(hosts), noise=0.02)
    spread = attribute_links(results).references[0].spread_gbps
    rng = random.Random(7)
    again = sorted({pair_key(*rng.sample(hosts[8:], 2)) for _ in range(60)})[:40]
    results += [LinkResult(*pair, "perftest", 0, HEALTHY_GBPS * (1 + rng.gauss(0, 0.02)), LINE_GBPS)
                for pair in again]
    chance = HEALTHY_GBPS - 3.2 * spread  # past three sigma, not past what 42 pairs run again give by chance
    real = HEALTHY_GBPS * 0.8
    for pair, figure in ((("node05", "node06"), chance), (("node07", "node08"), real)):
        results = [r for r in results if r.pair != pair]
        results += [LinkResult(*pair, "perftest", 0, figure, LINE_GBPS) for _ in range(2)]
    verdicts = {(v.a, v.b): v.confirmed for v in attribute_links(results).links}
    assert verdicts[("node07", "node08")] is True
    assert verdicts.get(("node05", "node06")) is not True  # a suspect to run again, never a verdict


def test_two_slow_links_and_a_nearly_healthy_pair_on_one_node_are_not_its_nic():
    # node16 is slow with node15 (15 %) and node17 (34 %), and 3 % below with node01: links, not its NIC
    results = measure(screen_rounds(names(32)), noise=0.005)
    results += measure(full_rounds(names(32))[:1], noise=0.005, seed=3)
    links = {("node15", "node16"): 0.85, ("node16", "node17"): 0.66}
    results = [LinkResult(r.a, r.b, r.backend, r.rail, r.gbps * links.get(r.pair, 1.0), r.line_rate_gbps)
               for r in results]
    results.append(LinkResult("node01", "node16", "perftest", 0, HEALTHY_GBPS * 0.97, LINE_GBPS))
    attribution = attribute_links(results)
    assert "node16" not in {v.host for v in attribution.nics}
    assert {(v.a, v.b) for v in attribution.links} >= set(links)


def test_in_a_small_job_a_host_slow_with_one_partner_only_against_the_jobs_level_is_run_again_first():
    # node03's NIC and the node01-node02 link are far below the line rate's floor; node02-node04 is
    # 7 % under the job's level, above the floor: one run of it cannot make node02 a confirmed NIC,
    # though the median of node02's pairs (its slow partners') is below the floor
    factors = {("node02", "node03"): 0.6, ("node03", "node04"): 0.6, ("node01", "node03"): 0.6,
               ("node01", "node02"): 0.25, ("node02", "node04"): 0.93}
    results = [LinkResult(a, b, "perftest", 0, HEALTHY_GBPS * factors.get((a, b), 1.0), LINE_GBPS)
               for round_ in full_rounds(names(4)) for a, b in round_.pairs]
    verdicts = {v.host: v.confirmed for v in attribute_links(results).nics}
    assert verdicts.get("node03") is True and verdicts.get("node02") is not True


def _noisy_sweep(hosts: list[str], seed: int, noise: float, **faults) -> object:
    """The screen and up to three confirm phases, every run with ``noise`` (a CV) of its own."""
    results = measure(screen_rounds(hosts), seed=seed * 10, noise=noise, **faults)
    attribution = attribute_links(results)
    for phase in range(3):
        if not attribution.suspects:
            break
        rounds = confirm_rounds(attribution.suspects, attribution.passed, [r.pair for r in results])
        results += measure(rounds, seed=seed * 10 + phase + 1, noise=noise, **faults)
        attribution = attribute_links(results)
    return attribution


@pytest.mark.parametrize("seed", range(1, 6))
def test_a_noisy_fabric_is_judged_by_its_whole_spread_and_blames_no_healthy_pair(seed: int):
    # 12 % run-to-run noise: a fifth of the healthy pairs fall under the line rate's 90 % floor.
    # Judged against the pairs above the floor alone, the level rose and the spread shrank, and
    # healthy pairs 25-30 % below it (2.5 sigma of this fabric) became slow links and slow NICs.
    attribution = _noisy_sweep(names(128), seed, 0.12)
    assert [(v.a, v.b) for v in attribution.links] == [] and [v.host for v in attribution.nics] == []
    (reference,) = attribution.references
    # The level is found from the top (the highest of the densest windows): at this noise it sits
    # up to 3 % above the healthy median, where the floor's cut put it 4-5 % above.
    assert reference.fleet_gbps == pytest.approx(HEALTHY_GBPS, rel=0.035)
    assert reference.spread_gbps == pytest.approx(0.12 * HEALTHY_GBPS, rel=0.25)


def test_a_half_rate_nic_on_a_noisy_fabric_is_still_that_host():
    attribution = _noisy_sweep(names(128), 1, 0.12, nics={"node40": 0.5})
    assert [v.host for v in attribution.nics] == ["node40"] and attribution.links == ()


def test_a_slow_pair_whose_end_is_good_only_at_a_higher_line_rate_says_so():
    # n1 (400 Gb/s) is good with its 400 Gb/s peers; its one pair in the 200 Gb/s group is slow.
    fast = [LinkResult("n1", peer, "perftest", 0, 388.0 + n, 400.0) for n, peer in enumerate(("n5", "n6", "n7"))]
    fast += [LinkResult(a, b, "perftest", 0, 389.0, 400.0) for a, b in (("n5", "n6"), ("n5", "n7"), ("n6", "n7"))]
    slow = [LinkResult("n1", "n2", "perftest", 0, gbps, 200.0) for gbps in (150.0, 151.0)]
    slow += [LinkResult(a, b, "perftest", 0, 194.0, 200.0) for a, b in (("n2", "n3"), ("n2", "n4"), ("n3", "n4"))]
    [link] = attribute_links(fast + slow).links
    assert (link.a, link.b) == ("n1", "n2") and "n1 at a higher line rate, n2 with n3 194" in link.evidence


def test_a_slow_pair_with_an_end_tested_with_it_alone_does_not_also_say_both_ends_are_fine():
    results = [LinkResult("n1", "n2", "perftest", 0, 150.0, 400.0), LinkResult("n1", "n2", "perftest", 0, 151.0, 400.0),
               LinkResult("n2", "n3", "perftest", 0, 392.0, 400.0)]
    [link] = attribute_links(results).links
    assert "tested with this partner only" in link.evidence and "both ends fine" not in link.evidence



def _slow_with_its_screen_partners(fresh_gbps: float):
    """A 20-node rail at 3 % noise (196 Gb/s healthy) whose node07 was slow with both its screen
    partners, and the confirm round's pair with a fresh partner at ``fresh_gbps``."""
    results = [r for r in measure(screen_rounds(names(20)), seed=1, noise=0.03, line=200.0, healthy=196.0)
               if "node07" not in (r.a, r.b)]
    results += [LinkResult("node06", "node07", "perftest", 0, 176.0, 200.0),
                LinkResult("node07", "node08", "perftest", 0, 174.0, 200.0)]
    first = attribute_links(results)
    rounds = confirm_rounds(first.suspects, first.passed, [r.pair for r in results])
    (pair,) = [p for p in rounds[0].pairs if "node07" in p]
    results.append(LinkResult(*pair, "perftest", 0, fresh_gbps, 200.0))
    return first, attribute_links(results)


def test_a_nic_is_confirmed_by_its_fresh_partner_never_by_the_pairs_that_made_it_a_suspect():
    # Two pairs chosen for being slow, and a third partner merely 4 % below the level, confirmed a
    # healthy NIC by the median of the three: a drain in 4 of 134 healthy 48-node sweeps.
    first, attribution = _slow_with_its_screen_partners(187.8)
    assert [(v.host, v.confirmed) for v in first.nics] == [("node07", False)]
    assert not [f for f in link_findings(attribution, 10.0) if f.host == "node07" and f.severity in ("warn", "fail")]
    assert not [v for v in attribution.nics if v.confirmed]
    _, attribution = _slow_with_its_screen_partners(172.5)  # 12 % slow with its fresh partner too
    (nic,) = attribution.nics
    # judged on its pairs but the two lowest (whichever chose it): here a screen pair, 176.0
    assert (nic.host, nic.confirmed) == ("node07", True) and nic.gbps == 176.0
    assert "beyond the two lowest pairs" in nic.evidence and ": slow again" in nic.evidence


# One rail's 22 pair figures of a healthy 48-node fleet at 3 % link noise (A100 rail 7, 196 Gb/s
# true: bench/detection_confirm.py's healthy mixed fleet, CV 1.5 %, seed 36). Nine crowd at the top.
CROWDED_RAIL = [178.2, 183.0, 185.1, 187.9, 188.0, 188.2, 188.7, 189.3, 192.1, 193.7, 195.9, 196.4, 196.7, 197.8,
                199.5, 202.6, 203.0, 203.8, 205.3, 206.1, 206.3, 208.9]


def test_a_rail_whose_pairs_crowd_at_its_top_takes_a_level_at_its_median_and_its_familys_spread():
    # By the spread above the crowd, the level came out 201.3 (a spread high), and a healthy NIC
    # slow with its two partners against it was drained.
    rng = random.Random(36)
    results = [LinkResult(f"n{i:02d}", f"n{i + 1:02d}", "perftest", 7, gbps, 200.0)
               for i, gbps in enumerate(CROWDED_RAIL)]
    results += [LinkResult(f"n{i:02d}", f"n{i + 1:02d}", "perftest", rail, 196.0 * rng.gauss(1, 0.03), 200.0)
                for rail in range(7) for i in range(len(CROWDED_RAIL))]
    attribution = attribute_links(results)
    (rail,) = [r for r in attribution.references if r.group.rail == 7]
    assert rail.fleet_gbps == pytest.approx(196.4, abs=1.0)
    spreads = [r.spread_gbps for r in attribution.references]
    # at least the family's spread, pooled over its rails: 3 % noise (a rail's own may be wider)
    assert min(spreads) == pytest.approx(196.0 * 0.03, rel=0.12) and rail.spread_gbps >= min(spreads)
    # the level's error over the pairs it rests on: the rail's 22 but those it set aside as slow
    assert 18 <= rail.level_count <= rail.pairs == 22
    assert rail.level_error_gbps == pytest.approx(1.8 * rail.spread_gbps / math.sqrt(rail.level_count))
    assert attribution.nics == () and attribution.links == ()
