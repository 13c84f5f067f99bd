"""The link phase on a simulated fleet: rounds run, attributed, confirmed, and turned into findings.
The attribution sees only the pair figures the simulated fleet's network model gives."""

import pytest

from gpudiag.links.linkfindings import link_findings
from gpudiag.links.rounds import run_links
from gpudiag.sim import SimulatedFleet, parse_fleet
from gpudiag.sim.pairs import SimulatedPairRunner


def _run(faults, mode="screen", nodes=16, hosts=None):
    fleet = SimulatedFleet(parse_fleet({"nodes": nodes, "seed": 2, "faults": faults}, "fleet.json"))
    run = run_links(hosts or list(fleet.spec.hosts), mode, SimulatedPairRunner(fleet))
    return run, link_findings(run.attribution, 7.0)


def test_a_nic_slow_on_one_rail_is_named_and_nothing_else():
    run, findings = _run([{"kind": "slow_nic", "host": "node005", "factor": 0.5, "rail": 3}])
    assert [(f.kind, f.host, f.peer, f.metric, f.severity, f.confirmed) for f in findings] == [
        ("slow_nic", "node005", None, "link.perftest.rail3", "fail", True)]
    assert "node005 slow with all" in findings[0].evidence and findings[0].unit == "Gbit/s"
    assert findings[0].action == "drain"
    assert run.rounds <= 2 + 3  # two screen rounds, then confirm rounds


def test_a_slow_pair_is_one_slow_link_over_its_rails_in_the_full_schedule():
    run, findings = _run([{"kind": "slow_link", "a": "node002", "b": "node009", "factor": 0.6}], mode="full")
    assert [(f.kind, f.host, f.peer, f.metric) for f in findings] == [
        ("slow_link", "node002", "node009", "link.perftest")]
    assert findings[0].evidence.startswith("on 8 rails (0, 1, 2, 3, 4, 5, 6, 7)")
    assert 35 < findings[0].deficit_pct < 45 and findings[0].action == "inspect"
    assert run.rounds >= 15  # N - 1 rounds of the round robin


def test_a_host_whose_pair_server_never_answers_is_a_link_error_and_the_rounds_go_on():
    run, findings = _run([{"kind": "hang", "host": "node004"}])
    errors = [f for f in findings if f.kind == "link_error"]
    assert errors and all("node004" in (f.host, f.peer) for f in errors)
    assert all(f.severity == "warn" and f.basis == "error_record" for f in errors)
    assert not [f for f in findings if f.kind in ("slow_nic", "slow_link")]
    measured = [r for r in run.records if r.result.gbps is not None]
    assert len({r.result.pair for r in measured}) >= 12  # every other screen pair was measured


def test_the_links_of_the_sweep_document_follow_the_contract():
    run, _ = _run([])
    record = run.records[0].to_dict()
    assert {"a", "b", "rail", "backend", "metric", "value", "phase"} <= set(record)
    assert record["metric"] == "gbps" and record["phase"] == "screen" and record["value"] > 300


def test_no_links_run_for_none_or_a_single_host_and_an_unknown_mode_is_refused():
    assert _run([], mode="none")[0].records == ()
    assert _run([], hosts=["node001"])[0].records == ()
    with pytest.raises(ValueError, match="unknown link mode"):
        _run([], mode="all")


def test_a_slow_link_bounds_the_job_and_excluding_one_end_recovers_it():
    from gpudiag.links.impact import link_impact

    run, _ = _run([{"kind": "slow_link", "a": "node002", "b": "node009", "factor": 0.5}], mode="full")
    impact = link_impact(run, exclude=[])
    assert impact["slowest_link"]["a"] == "node002" and impact["slowest_link"]["b"] == "node009"
    assert 45 < impact["link_slowdown_pct"] < 55 and impact["link_recovered_pct"] == 0.0
    assert impact["slowest_link"]["reference_source"] == "fleet"
    recovered = link_impact(run, exclude=["node009"])
    assert recovered["link_recovered_pct"] > 40  # what is left is noise among the other pairs
    assert link_impact(_run([], mode="none")[0], exclude=[]) is None


def test_the_slowest_link_of_a_small_job_is_said_against_the_jobs_own_level():
    from gpudiag.links.impact import link_impact
    from gpudiag.report.summary import _impact_rows

    run, _ = _run([], hosts=["node001", "node002", "node003"], mode="full")  # too few hosts for a fleet level
    impact = link_impact(run, exclude=[])
    # the healthy pairs of the three are its level: the slowest healthy pair is a few percent of noise below
    assert impact["slowest_link"]["reference_source"] == "fleet" and 0.0 <= impact["link_slowdown_pct"] < 6.0
    rows = dict(_impact_rows({"slowdown_pct": 0.0, **impact}))
    assert "vs fleet" in rows["slowest link"] and "a ring collective runs at its slowest link" in rows["slowest link"]
    assert "-0.0" not in rows["slowest link"]


