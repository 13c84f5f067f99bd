"""A healthy pair measured slow once (one starved second on a busy node) and not slow again when
re-tested is a watch (said, never a warning), never a reason to keep its hosts out of a job; measured once only, it
stays unchecked (not passed); slow again, it is the slow link. The figures are those of the
netns link test on a busy 2-core machine (tests/integration/test_links_netns.py), where node05
was excluded beside the real slow NIC of node03."""

from __future__ import annotations

import dataclasses

from gpudiag.analysis.fleet import job_impact
from gpudiag.findings import Action, Basis, Kind, Severity
from gpudiag.links.attribution import LinkAttribution, NicSuspect, attribute_links
from gpudiag.links.groups import LinkResult, PairFigure
from gpudiag.links.linkfindings import link_findings
from gpudiag.run.outcome import HostOutcome

LINE_GBPS = 0.2
FAIL_DEFICIT_PCT = 10.0
# node03's port capped at a quarter; every other pair at the cap's 95 %
MEASURED = [("node01", "node02", 0.1922), ("node03", "node04", 0.0483), ("node02", "node03", 0.0482),
            ("node04", "node05", 0.1911), ("node01", "node06", 0.1904), ("node01", "node03", 0.0478)]
HOSTS = [f"node0{index}" for index in range(1, 7)]


def _judged(dip_runs: list[float]):
    results = [LinkResult(a, b, "tcp", gbps=gbps, line_rate_gbps=LINE_GBPS) for a, b, gbps in MEASURED]
    results += [LinkResult("node05", "node06", "tcp", gbps=gbps, line_rate_gbps=LINE_GBPS) for gbps in dip_runs]
    findings = link_findings(attribute_links(results), FAIL_DEFICIT_PCT)
    hosts = [HostOutcome(host, "ok", None, 1.0) for host in HOSTS]
    return findings, job_impact({}, {}, findings, hosts).exclude


def _about_the_pair(findings):
    return [f for f in findings if {f.host, f.peer} == {"node05", "node06"}]


def test_a_pair_that_dipped_once_and_was_not_slow_again_is_a_watch_and_keeps_no_host_out():
    findings, exclude = _judged([0.17, 0.19])  # 85 % of the line rate once, then 95 %
    (pair,) = _about_the_pair(findings)
    assert (pair.kind, pair.severity, pair.confirmed, pair.basis) == (Kind.SLOW_LINK, Severity.WATCH, False,
                                                                      Basis.RETEST)
    assert "not slow again" in pair.evidence and pair.action == Action.WATCH
    assert exclude == ("node03",)  # the slow NIC alone


def test_a_pair_slow_once_and_not_run_again_is_not_passed():
    findings, exclude = _judged([0.17])
    (pair,) = _about_the_pair(findings)
    assert (pair.kind, pair.severity) == (Kind.UNCHECKED, Severity.WARN)
    assert exclude == ("node03", "node05")  # measured once and slow: never a pass


def test_a_pair_slow_again_when_re_tested_is_the_slow_link_and_both_ends_are_kept_out():
    findings, exclude = _judged([0.15, 0.15])
    (pair,) = _about_the_pair(findings)
    assert (pair.kind, pair.severity, pair.confirmed) == (Kind.SLOW_LINK, Severity.FAIL, True)
    assert exclude == ("node03", "node05", "node06")


def test_a_nic_its_further_partners_clear_is_a_watch_never_drained():
    pairs = tuple(PairFigure("node05", peer, gbps, (gbps,), gbps < 0.18) for peer, gbps in
                  (("node04", 0.172), ("node06", 0.171), ("node07", 0.198)))
    cleared = NicSuspect("node05", "tcp", None, LINE_GBPS, 0.198, 0.2, 1.0, -0.5, pairs, ("node04", "node06", "node07"),
                         False, "node05 ...: fine again", cleared=True)
    (finding,) = link_findings(LinkAttribution(nics=(cleared,)), FAIL_DEFICIT_PCT)
    assert (finding.kind, finding.severity, finding.action, finding.basis) == (Kind.SLOW_NIC, Severity.WATCH,
                                                                               Action.WATCH, Basis.RETEST)
    hosts = [HostOutcome(host, "ok", None, 1.0) for host in HOSTS]
    assert job_impact({}, {}, [finding], hosts).exclude == ()
    unsettled = dataclasses.replace(cleared, cleared=False)  # neither slow again nor clearly fine: not passed
    (finding,) = link_findings(LinkAttribution(nics=(unsettled,)), FAIL_DEFICIT_PCT)
    assert (finding.kind, finding.severity) == (Kind.UNCHECKED, Severity.WARN)
