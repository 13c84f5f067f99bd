"""A small job too noisy for one run runs its pairs again (gpudiag.links.acrossrails.doubtful_pairs),
and a pair run again is judged on its runs after the lowest against the spread of so many runs
(gpudiag.links.again), not against its rail's figures, each a mean of two once every pair ran twice."""

import itertools
import json
import random
from collections import defaultdict
from pathlib import Path

from gpudiag.links import LinkResult, attribute_links
from gpudiag.links.acrossrails import DOUBT_RUNS, doubtful_pairs
from gpudiag.links.attribution import DEFAULT_THRESHOLDS
from gpudiag.links.levels import group_references
from gpudiag.links.linkfindings import link_findings
from gpudiag.links.rounds import link_results

DATA = Path(__file__).parents[3] / "data" / "links"
RAILS = 8
LINE = 400.0
HEALTHY = 392.0


def _job(hosts: int, noise: float, runs: int, slow: dict[str, float] | None = None, seed: int = 7) -> list[LinkResult]:
    """Every pair of ``hosts`` hosts on every rail, ``runs`` runs each at ``noise`` (a fraction),
    a pair at its slower end's rate (``slow``: host -> factor)."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(1, hosts + 1)]
    factors = slow or {}
    return [LinkResult(a, b, "perftest", rail, HEALTHY * min(factors.get(a, 1.0), factors.get(b, 1.0))
                       * rng.gauss(1.0, noise), LINE)
            for a, b in itertools.combinations(names, 2) for rail in range(RAILS) for _ in range(runs)]


def _doubtful(results: list[LinkResult]) -> frozenset[tuple[str, str]]:
    figures: dict = defaultdict(lambda: defaultdict(list))
    for result in results:
        figures[result.group][result.pair].append(result.gbps)
    return doubtful_pairs(figures, group_references(figures, DEFAULT_THRESHOLDS, None), DEFAULT_THRESHOLDS)


def test_a_three_node_job_at_6_pct_link_noise_runs_every_pair_again_until_it_has_enough_runs():
    every = {("n1", "n2"), ("n1", "n3"), ("n2", "n3")}
    healthy_doubted, found = 0, 0
    for seed in range(1, 11):
        # the healthy pair too: it is the others' level
        assert _doubtful(_job(3, 0.06, 1, {"n3": 0.9}, seed)) == every
        healthy_doubted += _doubtful(_job(3, 0.06, 1, seed=seed)) == every
        assert _doubtful(_job(3, 0.06, DOUBT_RUNS, {"n3": 0.9}, seed)) == frozenset()  # enough: judged on them
        # and what they show: the NIC, on all its runs (about nineteen times in twenty: planned so)
        nics = attribute_links(_job(3, 0.06, DOUBT_RUNS, {"n3": 0.9}, seed)).nics
        found += [(v.host, v.rail, v.confirmed) for v in nics] == [("n3", None, True)]
    assert found >= 9, found
    # a healthy job's draw of the noise a little under 6 % may be enough for one run (seed 7: 4.6 %)
    assert healthy_doubted >= 8, healthy_doubted


def test_a_quiet_small_job_runs_nothing_again():
    assert _doubtful(_job(3, 0.01, 1)) == frozenset()
    assert _doubtful(_job(4, 0.01, 1, {"n4": 0.9})) == frozenset()  # found on one run: nothing in doubt


def test_a_healthy_pair_run_again_is_judged_on_one_runs_spread_and_fails_nothing():
    # A healthy 5-node job at 6 % link noise whose five screen pairs all ran twice: its rails'
    # figures are means of two, and spread as much. node0001-node0005 ran 326.2 and 337.1 Gb/s on
    # rail 2; its second run, 2.3 sigma of one run low, was judged against the means' spread
    # (3.1 sigma) and failed as a slow link.
    links = json.loads((DATA / "healthy_5n_every_pair_run_twice.json").read_text())["links"]
    results = link_results(links)
    assert len(results) == 80 and {len([r for r in results if r.pair == pair]) for pair in {r.pair for r in results}} \
        == {16}
    findings = link_findings(attribute_links(results), 6.0)
    assert not [f for f in findings if f.severity in ("warn", "fail")], [f.evidence for f in findings]


def test_two_slow_nics_whose_own_pair_reads_high_are_judged_against_the_hosts_that_reach_the_top():
    # n3 and n4 at 90 %, their pair lifted 5 % by noise on every rail, the rest a little apart:
    # on their best pair (each other) each was within link_deficit of the healthy pair, and the
    # job named single-rail slow links instead. Against n1 and n2, which reach the top together,
    # both are slow on all their rails.
    results = []
    for a, b in itertools.combinations(("n1", "n2", "n3", "n4"), 2):
        for rail in range(RAILS):
            wobble = 1 + 0.01 * ((rail * 5 + len(a + b) + int(a[1]) * 3) % 5 - 2)
            slow = {"n3", "n4"} & {a, b}
            rate = HEALTHY * (0.9 * 1.05 if len(slow) == 2 else 0.9 if slow else 1.0)
            results += [LinkResult(a, b, "perftest", rail, rate * wobble * (1 + 0.004 * run), LINE) for run in range(3)]
    slow = [(v.host, v.rail, v.confirmed) for v in attribute_links(results).nics if v.rail is None]
    assert slow == [("n3", None, True), ("n4", None, True)], slow
    named = {(f.kind, f.host) for f in link_findings(attribute_links(results), 6.0)}
    assert named == {("slow_nic", "n3"), ("slow_nic", "n4")}, named


def test_a_rails_fleet_level_is_never_above_its_line_rate():
    # Six hosts on one rail whose few pairs read 8-12 % over the line rate by chance (6 % link
    # noise): a level above the line is luck, and a pair 29 % under it was a slow link beside its
    # slow NIC. No pair runs faster than its line rate.
    hosts = [f"n{i}" for i in range(1, 7)]
    results = [LinkResult(a, b, "perftest", 0, LINE * (1.08 + 0.01 * (i % 5)), LINE)
               for i, (a, b) in enumerate(itertools.combinations(hosts, 2))]
    (reference,) = attribute_links(results).references
    assert reference.fleet_gbps == LINE and not reference.job_level
