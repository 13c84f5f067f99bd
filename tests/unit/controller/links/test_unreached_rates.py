"""A host whose own line rate no pair reached: a 400 Gbit/s NIC whose screen partners all run at
200 was measured at 200, and a NIC 15 % slow there passed with no finding at all. Now the link
phase pairs it with a host at its rate where the run has one, and says so where it has none."""

import pytest

from gpudiag.links.groups import LinkResult
from gpudiag.links.linkfindings import link_findings
from gpudiag.links.remote import PairTestOptions, RemotePairRunner
from gpudiag.links.rounds import LinkRecord, run_links
from gpudiag.links.schedule import pair_key
from gpudiag.links.unreached import unreached_rates
from gpudiag.records import ProbeResult
from gpudiag.sim import SimulatedFleet, parse_fleet
from gpudiag.sim.pairs import SimulatedPairRunner

A100 = "NVIDIA A100-SXM4-80GB"


def _pair(a: str, b: str, rates: dict[str, float], gbps: float | None = None) -> LinkResult:
    rate = min(rates[a], rates[b])
    if gbps is None:
        return LinkResult(a, b, "perftest", 0, line_rate_gbps=rate, error="timed out",
                          end_rates_gbps=(rates[a], rates[b]))
    return LinkResult(a, b, "perftest", 0, gbps, rate, end_rates_gbps=(rates[a], rates[b]))


def test_a_host_measured_only_below_its_own_rate_is_unreached_with_the_hosts_at_its_rate():
    rates = {"h1": 400.0, "h2": 400.0, "a1": 200.0, "a2": 200.0, "a3": 200.0}
    results = [_pair("h1", "a1", rates, 196.0), _pair("a2", "h1", rates, 195.0), _pair("h2", "a3", rates, 196.0),
               _pair("a1", "a2", rates, 196.0)]
    found = {u.host: u for u in unreached_rates(results)}
    assert set(found) == {"h1", "h2"}
    assert (found["h1"].line_rate_gbps, found["h1"].reached_gbps, found["h1"].peers) == (400.0, 200.0, ("h2",))
    # once a pair of the two ran at 400, neither is left; a pair that only failed reaches nothing
    assert {u.host for u in unreached_rates([*results, _pair("h1", "h2", rates)])} == {"h1", "h2"}
    assert unreached_rates([*results, _pair("h2", "h1", rates, 390.0)]) == ()


def test_ends_that_report_no_rate_and_hosts_never_measured_are_left_to_the_rest():
    plain = [LinkResult("n1", "n2", "tcp", gbps=9.0, line_rate_gbps=10.0)]  # no end rates: nothing to say
    assert unreached_rates(plain) == ()
    never = [LinkResult("n1", "n2", "perftest", 0, line_rate_gbps=200.0, error="refused",
                        end_rates_gbps=(400.0, 200.0))]
    assert unreached_rates(never) == ()  # no measured pair: its link_error says it
    other_backend = [_pair("h1", "a1", {"h1": 400.0, "a1": 200.0}, 196.0),
                     LinkResult("h1", "h2", "tcp", gbps=90.0, line_rate_gbps=100.0, end_rates_gbps=(100.0, 100.0))]
    assert [(u.host, u.backend, u.peers) for u in unreached_rates(other_backend)] == [("h1", "perftest", ())]


def test_a_pairs_end_rates_round_trip_through_the_document_and_bad_ones_are_refused():
    mixed = LinkResult("h1", "a1", "perftest", 2, 195.5, 200.0, end_rates_gbps=(400.0, 200.0))
    entry = LinkRecord("screen", mixed).to_dict()
    assert entry["end_rates_gbps"] == [400.0, 200.0] and LinkRecord.from_dict(entry).result == mixed
    same = LinkResult("h1", "h2", "perftest", 2, 390.0, 400.0, end_rates_gbps=(400.0, 400.0))
    entry = LinkRecord("screen", same).to_dict()
    assert "end_rates_gbps" not in entry  # both at the pair's rate: nothing more to say
    for bad in ([400.0], ["fast", 200.0], [400.0, -1.0], "400"):
        with pytest.raises(ValueError):
            LinkRecord.from_dict({**entry, "end_rates_gbps": bad})
    with pytest.raises(ValueError, match="line rate must be positive"):
        LinkResult("h1", "h2", "perftest", 0, 1.0, 400.0, end_rates_gbps=(0.0, 400.0))


def _run(h100s: list[str], faults: list[dict], seed: int = 3, nodes: int = 16):
    names = [f"node{i:03d}" for i in range(1, nodes + 1)]
    fleet = SimulatedFleet(parse_fleet({"nodes": nodes, "seed": seed, "faults": faults, "overrides": [
        {"hosts": [n for n in names if n not in h100s], "gpu_model": A100}]}, "fleet.json"))
    run = run_links(names, "screen", SimulatedPairRunner(fleet))
    return run, link_findings(run.attribution, 7.0)


def test_h100s_with_only_a100_neighbours_meet_each_other_and_a_slow_nic_among_them_is_named():
    h100s = ["node003", "node008", "node013"]  # each between two A100s in the screen's cycle
    run, findings = _run(h100s, [{"kind": "slow_nic", "host": "node003", "factor": 0.85}])
    assert [(f.kind, f.host, f.severity) for f in findings] == [("slow_nic", "node003", "fail")]
    at_400 = {r.result.pair for r in run.records if r.result.line_rate_gbps == 400.0}
    assert at_400 and all(r.phase == "confirm" for r in run.records if r.result.line_rate_gbps == 400.0)
    assert pair_key("node008", "node013") in at_400  # the healthy two meet each other as well
    healthy, quiet = _run(h100s, [])
    assert quiet == [] and healthy.attribution.unreached == ()


@pytest.mark.parametrize("factor", [1.0, 0.85])
def test_a_lone_h100_among_a100s_is_unchecked_at_its_rate_never_a_pass(factor: float):
    faults = [{"kind": "slow_nic", "host": "node005", "factor": factor}] if factor < 1 else []
    run, findings = _run(["node005"], faults)
    assert [(f.kind, f.host, f.severity, f.basis, f.metric) for f in findings] == [
        ("unchecked", "node005", "warn", "comparison", "link.perftest")]
    assert "report 400 Gbit/s a rail" in findings[0].evidence and "ran at 200 Gbit/s" in findings[0].evidence
    assert "no other host of the run reports 400" in findings[0].evidence
    assert run.attribution.suspects.hosts == ()  # nobody to pair it with: no confirm round for it
    # the sweep document's links (only pairs between two rates say their ends' rates) tell the same
    read_back = [LinkRecord.from_dict(record.to_dict()).result for record in run.records]
    assert unreached_rates(read_back) == run.attribution.unreached


def _record(rail: int, value: float, local: float | None, peer: float | None, direction: str) -> ProbeResult:
    details = {"line_rate_gbps": min(r for r in (local, peer, 1e9) if r is not None),
               "local_line_rate_gbps": local, "peer_line_rate_gbps": peer}
    return ProbeResult("net", f"rail{rail}", "gbps", value, "Gbit/s", "ok",
                       params={"rail": rail, "direction": direction}, details=details)


def test_the_pair_runner_keeps_each_ends_own_rate_as_the_client_reports_them():
    # The client runs on the pair's first end: its records' local rate is that end's, the peer's the other's.
    records = [_record(0, 195.0, 400.0, 200.0, "a_to_b"), _record(0, 196.0, 400.0, 200.0, "b_to_a"),
               _record(1, 190.0, 400.0, None, "a_to_b"), _record(1, 191.0, float("nan"), None, "b_to_a")]
    runner = RemotePairRunner({}.get, {}, PairTestOptions(backend="perftest"))
    first, second = runner._rails("h1", "a1", "perftest", records, "secret")
    assert (first.rail, first.line_rate_gbps, first.end_rates_gbps) == (0, 200.0, (400.0, 200.0))
    assert (second.rail, second.end_rates_gbps) == (1, (400.0, None))  # a NaN or missing rate is none
    fixed = RemotePairRunner({}.get, {}, PairTestOptions(backend="perftest", line_rate_gbps=100.0))
    assert fixed._rails("h1", "a1", "perftest", records, "secret")[0].end_rates_gbps == (None, None)
