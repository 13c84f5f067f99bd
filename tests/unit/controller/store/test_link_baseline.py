"""Pair tests in baselines: link groups get baseline entries from stored sweeps (leaving out what
a link finding touched), travel in the baseline file, judge a fleet that shifted as a whole and a
group too small for a fleet level, and show in ``gpudiag history``."""

from __future__ import annotations

import json
import random
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpudiag.analysis.keys import describe_key, link_key
from gpudiag.cli.main import main
from gpudiag.errors import InputError, StoreError
from gpudiag.links import LinkResult, Round, attribute_links, full_rounds, screen_rounds
from gpudiag.links.linkfindings import link_findings, touched_links
from gpudiag.links.rounds import LinkRecord, run_links
from gpudiag.sim import SimulatedFleet, parse_fleet
from gpudiag.sim.pairs import SimulatedPairRunner
from gpudiag.store.baselines import (
    Baseline,
    baseline_samples,
    build_baseline,
    export_baseline,
    import_baseline,
    load_baseline,
    median_absolute_deviation,
    save_baseline,
)
from gpudiag.store.store import BaselineSample, Store

TCP = link_key("tcp", None, None)
RAIL0, RAIL1 = link_key("perftest", 0, 400.0), link_key("perftest", 1, 400.0)
H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
        "cuda_version": "12.4", "torch_version": "2.4.1"}


def names(count: int) -> list[str]:
    return [f"node{i:02d}" for i in range(1, count + 1)]


def measure(rounds: list[Round], *, nics: dict[str, float] | None = None, seed: int = 0, backend: str = "perftest",
            rail: int | None = 0, line: float | None = 400.0, healthy: float = 388.0) -> list[LinkResult]:
    """One result per pair of ``rounds``: healthy × the slower NIC's factor, with 1 % noise."""
    nics = nics or {}
    rng = random.Random(seed)
    return [LinkResult(a, b, backend, rail, healthy * min(nics.get(a, 1.0), nics.get(b, 1.0))
                       * (1 + rng.gauss(0, 0.01)), line)
            for round_ in rounds for a, b in round_.pairs]


def _link(a: str, b: str, value: float | None, backend: str = "tcp", rail: int | None = None,
          line: float | None = None, phase: str = "screen") -> dict[str, Any]:
    result = LinkResult(a, b, backend, rail, value, line, None if value is not None else "connect refused")
    return LinkRecord(phase, result).to_dict()


def _finding(kind: str, host: str, peer: str | None = None, metric: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "severity": "fail", "host": host, "peer": peer, "gpu": None, "metric": metric,
            "value": None, "reference": None, "deficit_pct": None, "robust_z": None, "confirmed": True,
            "evidence": "test", "action": "drain"}


def _host(name: str) -> dict[str, Any]:
    gemm = {"probe": "gemm", "device": "cuda:0", "gpu_uuid": None, "metric": "tflops", "value": 740.0,
            "unit": "TFLOP/s", "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
            "params": {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}, "details": {}}
    return {"host": name, "status": "ok", "error": None, "duration_s": 9.0, "facts": dict(H100), "results": [gemm]}


def _store_sweep(store: Store, sweep_id: str, links: list[dict[str, Any]], findings: list[dict[str, Any]],
                 hosts: list[str] = ()) -> None:
    store.finish_sweep(sweep_id, {"schema": "gpudiag.sweep/1", "sweep_id": sweep_id,
                                  "started_at": f"2026-11-21T10:{int(sweep_id[1:]):02d}:00Z",
                                  "finished_at": "2026-11-21T10:59:00Z", "hosts": [_host(h) for h in hosts],
                                  "links": links, "findings": findings, "summary": {}})


def _baseline(entries: dict[str, list[float]], name: str = "nightly") -> Baseline:
    samples = [BaselineSample("s1", key, "link", "gbps", value, "Gbit/s", f"n{i}", None, f"m{i}")
               for key, values in entries.items() for i, value in enumerate(values)]
    return build_baseline(name, samples, created_at="2026-11-21T11:00:00Z")


# -- the key ------------------------------------------------------------------------------------------


def test_a_link_key_is_one_canonical_json_key_per_group():
    assert link_key("perftest", 0, 400) == link_key("perftest", 0, 400.0) == RAIL0
    assert len({TCP, RAIL0, RAIL1, link_key("perftest", 0, 200.0), link_key("nccl", 0, 400.0)}) == 5
    assert json.loads(TCP) == {"facts": {}, "probe": "link", "metric": "gbps", "unit": "Gbit/s",
                               "params": {"backend": "tcp", "rail": None, "line_rate_gbps": None}}
    assert describe_key(RAIL1) == "link perftest rail 1 · line rate 400 Gbit/s"
    assert describe_key(TCP) == "link tcp · line rate unknown"


def test_a_link_entry_reads_back_as_the_pair_test_it_was():
    record = LinkRecord("confirm", LinkResult("n2", "n1", "nccl", 3, 391.5, 400.0))
    assert LinkRecord.from_dict(record.to_dict()) == record
    # a stored entry of an older document: no error, phase or line rate
    assert LinkRecord.from_dict({"a": "n1", "b": "n2", "rail": 0, "backend": "tcp", "value": 9.4}).result == \
        LinkResult("n1", "n2", "tcp", 0, 9.4)
    with pytest.raises(ValueError, match="needs 'backend'"):
        LinkRecord.from_dict({"a": "n1", "b": "n2", "value": 9.4})
    with pytest.raises(ValueError, match="must be numbers"):
        LinkRecord.from_dict({"a": "n1", "b": "n2", "backend": "tcp", "value": "9.4"})


# -- building from the store -----------------------------------------------------------------------------


def test_a_baseline_has_each_link_groups_median_and_mad_over_pair_means(tmp_path: Path):
    links = [_link("n1", "n2", 90.0), _link("n1", "n2", 94.0, phase="confirm"),  # one pair: mean 92
             _link("n2", "n3", 93.0), _link("n3", "n4", 95.0), _link("n4", "n1", 96.0),
             _link("n1", "n3", None),  # no figure: left out
             _link("n1", "n2", 380.0, "perftest", 0, 400.0), _link("n2", "n3", 384.0, "perftest", 0, 400.0),
             _link("n3", "n4", 390.0, "perftest", 0, 400.0)]
    with Store.open(tmp_path / "s.db") as store:
        _store_sweep(store, "s1", links, [])
        _store_sweep(store, "s2", [_link("n1", "n2", 97.0)], [])
        built = build_baseline("nightly", baseline_samples(store, ["s1", "s2"]))
    tcp = [92.0, 93.0, 95.0, 96.0, 97.0]
    assert built.get(TCP) is not None and built.get(RAIL0) is not None
    assert (built.get(TCP).median, built.get(TCP).count, built.get(TCP).unit) == (95.0, 5, "Gbit/s")
    assert built.get(TCP).mad == median_absolute_deviation(tcp, statistics.median(tcp)) == 2.0
    assert (built.get(RAIL0).median, built.get(RAIL0).mad, built.get(RAIL0).count) == (384.0, 4.0, 3)
    assert built.source_sweeps == ("s1", "s2")


def test_pairs_a_link_finding_touched_stay_out_of_the_baseline(tmp_path: Path):
    hosts = [f"n{i}" for i in range(1, 9)]
    cycle = list(zip(hosts, hosts[1:] + hosts[:1], strict=True))
    links = [_link(a, b, 100.0 + i, "perftest", rail, 400.0) for rail in (0, 1) for i, (a, b) in enumerate(cycle)]
    findings = [_finding("slow_nic", "n1", metric="link.perftest.rail1"),  # n1's rail-1 pairs only
                _finding("slow_link", "n4", "n3", metric="link.perftest"),  # folded over rails: both rails
                _finding("link_error", "n6", "n5", metric="link.perftest.rail0"),
                _finding("fleet_shift", "perftest fabric", metric="link.perftest.rail0"),  # names no NIC or pair
                _finding("slow_gpu", "n7")]  # not a link finding
    with Store.open(tmp_path / "s.db") as store:
        _store_sweep(store, "s1", links, findings)
        samples = list(baseline_samples(store, ["s1"]))
    kept = {(s.baseline_key, s.host, s.peer) for s in samples if s.probe == "link"}
    assert kept == {(RAIL0, a, b) for a, b in [("n1", "n2"), ("n2", "n3"), ("n4", "n5"), ("n6", "n7"), ("n7", "n8"),
                                                ("n1", "n8")]} | \
                   {(RAIL1, a, b) for a, b in [("n2", "n3"), ("n4", "n5"), ("n5", "n6"), ("n6", "n7"), ("n7", "n8")]}
    assert all(s.unit == "Gbit/s" and s.gpu is None and s.sweep_id == "s1" for s in samples if s.probe == "link")
    assert [s.host for s in samples if s.probe == "gemm"] == []  # no hosts stored in this sweep


def test_touched_links_reads_every_shape_of_link_finding():
    touched = touched_links([_finding("slow_nic", "a", metric="link.tcp"), _finding("slow_link", "d", "c",
                                                                                     metric="link.nccl.rail2"),
                             _finding("slow_nic", "x", metric=None)])
    assert touched.touches("b", "a", "tcp", None) and not touched.touches("b", "e", "tcp", None)
    assert touched.touches("c", "d", "nccl", 2) and not touched.touches("c", "d", "nccl", 1)
    assert touched.touches("x", "y", "perftest", 5)  # a metric that does not say: every backend and rail


def test_an_unknown_sweep_is_a_store_error_before_anything_is_read(tmp_path: Path):
    with Store.open(tmp_path / "s.db") as store, pytest.raises(StoreError, match="no sweep 'nope' is stored"):
        baseline_samples(store, ["nope"])


# -- the baseline file ----------------------------------------------------------------------------------


def test_link_entries_survive_the_store_and_an_export_import_round_trip(tmp_path: Path):
    built = _baseline({TCP: [94.0, 95.0, 93.0], RAIL0: [388.0, 390.0, 391.0]})
    exported = json.loads(json.dumps(export_baseline(built)))
    assert [e["key"]["params"] for e in exported["entries"]] == [
        {"backend": "perftest", "line_rate_gbps": 400.0, "rail": 0},
        {"backend": "tcp", "line_rate_gbps": None, "rail": None}]
    assert import_baseline(exported, "base.json") == built
    with Store.open(tmp_path / "s.db") as store:
        save_baseline(store, built)
        assert load_baseline(store, "nightly") == built


def test_a_hand_written_line_rate_of_400_is_the_same_key_as_400_0():
    exported = export_baseline(_baseline({RAIL0: [388.0, 390.0, 391.0]}))
    exported["entries"][0]["key"]["params"]["line_rate_gbps"] = 400
    assert list(import_baseline(exported, "base.json").entries) == [RAIL0]


def test_an_older_baseline_file_without_link_entries_still_imports():
    old = {"schema": "gpudiag.baseline/1", "name": "fleet", "created_at": "2026-11-01T00:00:00Z",
           "source_sweeps": ["20261101T000000Z-0001"],
           "entries": [{"key": {"facts": H100, "probe": "gemm", "metric": "tflops", "unit": "TFLOP/s",
                                "params": {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}},
                        "median": 742.0, "mad": 1.5, "count": 64, "unit": "TFLOP/s"}]}
    imported = import_baseline(old, "old.json")
    assert len(imported.entries) == 1 and next(iter(imported.entries.values())).median == 742.0
    assert attribute_links(measure(full_rounds(names(8))), baseline=imported) == \
        attribute_links(measure(full_rounds(names(8))))


@pytest.mark.parametrize(("change", "message"), [
    (lambda k: k["params"].update(backend="rdma"), "key.params.backend: must be one of tcp, nccl, perftest"),
    (lambda k: k["params"].update(rail=-1), "key.params.rail: must be an integer >= 0 or null"),
    (lambda k: k["params"].update(rail="0"), "key.params.rail: must be an integer >= 0 or null"),
    (lambda k: k["params"].update(line_rate_gbps=0), "key.params.line_rate_gbps: must be positive or null"),
    (lambda k: k["params"].update(line_rate_gbps="400"), "key.params.line_rate_gbps: must be a finite number"),
    (lambda k: k["params"].pop("rail"), "key.params.rail: is missing"),
    (lambda k: k["params"].update(speed=1), "key.params.speed: is not a known field"),
    (lambda k: k.update(metric="bandwidth"), "key.metric: must be 'gbps' for a link key"),
    (lambda k: k.update(facts={"gpu_model": "x"}), "key.facts: must be empty for a link key"),
])
def test_a_bad_link_key_is_named_by_file_and_field(change: Any, message: str):
    exported = export_baseline(_baseline({TCP: [94.0, 95.0, 93.0], RAIL0: [388.0, 390.0, 391.0]}))
    change(exported["entries"][1]["key"])
    with pytest.raises(InputError, match=f"^base.json: entries\\[1\\]\\.{re.escape(message)}"):
        import_baseline(exported, "base.json")


def test_a_bad_link_key_in_a_file_exits_2_with_one_line(tmp_path: Path):
    exported = export_baseline(_baseline({TCP: [94.0, 95.0, 93.0]}))
    exported["entries"][0]["key"]["params"]["backend"] = "rdma"
    path = tmp_path / "base.json"
    path.write_text(json.dumps(exported))
    result = CliRunner().invoke(main, ["baseline", "import", str(path), "--store", str(tmp_path / "s.db")])
    assert result.exit_code == 2 and "entries[0].key.params.backend: must be one of" in result.output
    assert str(path) in result.output


# -- judging against the baseline ------------------------------------------------------------------------


def test_a_fleet_20_pct_below_its_baseline_is_one_shift_naming_the_baseline():
    baseline = _baseline({TCP: [93.5, 94.0, 94.5]})
    results = measure(full_rounds(names(16)), backend="tcp", rail=None, line=None, healthy=94.0 * 0.8)
    assert attribute_links(results).shifts == ()  # no line rate: without the baseline nothing sees it
    attribution = attribute_links(results, baseline=baseline)
    [shift] = attribution.shifts
    assert (shift.source, shift.baseline_name, shift.baseline_gbps, shift.confirmed) == ("baseline", "nightly",
                                                                                       94.0, True)
    assert shift.pairs_below == shift.pairs == len(results)
    assert "below baseline nightly" in shift.evidence and "baseline nightly 94.0 Gb/s" in shift.evidence
    assert attribution.nics == () == attribution.links  # the fabric, not 16 NICs
    [finding] = link_findings(attribution, 15.0)
    assert (finding.kind, finding.host, finding.reference_source, finding.reference) == (
        "fleet_shift", "tcp fabric", "baseline", 94.0)
    assert finding.deficit_pct == pytest.approx(20, abs=1) and finding.severity == "fail"


def test_a_fleet_below_baseline_and_line_rate_is_still_one_shift_saying_both():
    results = measure(full_rounds(names(16)), healthy=388.0 * 0.8)
    without = attribute_links(results)
    assert [s.source for s in without.shifts] == ["line_rate"]
    [shift] = attribute_links(results, baseline=_baseline({RAIL0: [387.0, 388.0, 389.0]})).shifts
    assert shift.source == "baseline" and "below its line rate too" in shift.evidence
    [finding] = link_findings(attribute_links(results, baseline=_baseline({RAIL0: [387.0, 388.0, 389.0]})), 15.0)
    assert finding.reference_source == "baseline" and finding.reference == 388.0


def test_a_shift_below_baseline_still_names_a_slow_nic_against_the_fleet():
    results = measure(full_rounds(names(12)), backend="tcp", rail=None, line=None, healthy=75.0,
                      nics={"node09": 0.5})
    attribution = attribute_links(results, baseline=_baseline({TCP: [93.5, 94.0, 94.5]}))
    assert len(attribution.shifts) == 1
    assert [(v.host, v.confirmed, v.reference_source) for v in attribution.nics] == [("node09", True, "fleet")]


def test_a_fleet_within_its_baseline_shifts_nothing_and_flags_nothing():
    results = measure(full_rounds(names(16)), backend="tcp", rail=None, line=None, healthy=94.0 * 0.97)
    attribution = attribute_links(results, baseline=_baseline({TCP: [93.5, 94.0, 94.5]}))
    assert attribution.shifts == () == attribution.nics == attribution.links and not attribution.suspects


def test_the_screen_of_a_fleet_below_baseline_asks_for_one_more_partner_each():
    results = measure(screen_rounds(names(16)), backend="tcp", rail=None, line=None, healthy=94.0 * 0.8)
    first = attribute_links(results, baseline=_baseline({TCP: [93.5, 94.0, 94.5]}))
    assert [s.confirmed for s in first.shifts] == [False] and len(first.suspects.hosts) == 16
    assert "not yet confirmed" in first.shifts[0].evidence


def test_a_four_host_group_finds_a_slow_nic_against_its_baseline():
    results = measure(full_rounds(names(4)), backend="tcp", rail=None, line=None, healthy=94.0, nics={"node02": 0.7})
    assert not attribute_links(results).references[0].compared  # too few hosts, no line rate: nothing judges
    attribution = attribute_links(results, baseline=_baseline({TCP: [93.5, 94.0, 94.5]}))
    [verdict] = attribution.nics
    assert (verdict.host, verdict.confirmed, verdict.reference_source, verdict.reference_gbps) == (
        "node02", True, "baseline", 94.0)
    assert verdict.deficit_pct == pytest.approx(30, abs=2) and verdict.robust_z < -3
    assert "vs baseline nightly 94.0 Gb/s (median of 3 pair figures)" in verdict.evidence
    assert attribution.links == () == attribution.shifts and not attribution.suspects
    [finding] = link_findings(attribution, 15.0)
    assert (finding.kind, finding.host, finding.reference_source, finding.severity) == (
        "slow_nic", "node02", "baseline", "fail")


def test_a_four_host_group_within_its_baseline_passes():
    results = measure(full_rounds(names(4)), backend="tcp", rail=None, line=None, healthy=94.0)
    attribution = attribute_links(results, baseline=_baseline({TCP: [93.5, 94.0, 94.5]}))
    assert attribution.nics == () == attribution.links and attribution.passed == tuple(names(4))


def test_a_baseline_of_other_groups_changes_nothing():
    results = measure(full_rounds(names(10)), nics={"node03": 0.7})
    other = _baseline({TCP: [93.5, 94.0, 94.5], RAIL1: [380.0, 381.0, 382.0]})
    assert attribute_links(results, baseline=other) == attribute_links(results)


def test_run_links_judges_every_round_against_the_baseline():
    fleet = SimulatedFleet(parse_fleet({"nodes": 8, "seed": 2, "faults": []}, "fleet.json"))
    hosts = list(fleet.spec.hosts)
    plain = run_links(hosts, "full", SimulatedPairRunner(fleet))
    assert link_findings(plain.attribution, 7.0) == []
    groups = {r.result.group for r in plain.records}
    level = statistics.median(r.result.gbps for r in plain.records)
    # a baseline from a faster fabric than today's: every rail is 20 % below it
    baseline = _baseline({group.baseline_key: [level / 0.8] * 3 for group in groups})
    run = run_links(hosts, "full", SimulatedPairRunner(fleet), baseline=baseline)
    [finding] = link_findings(run.attribution, 7.0)
    assert (finding.kind, finding.reference_source) == ("fleet_shift", "baseline")
    assert f"on {len(groups)} rails" in finding.evidence and "baseline nightly" in finding.evidence


# -- history ---------------------------------------------------------------------------------------------


def test_history_of_a_host_shows_its_pair_figures_per_sweep(tmp_path: Path):
    store_path = tmp_path / "s.db"
    with Store.open(store_path) as store:
        _store_sweep(store, "s1", [_link("n1", "n2", 94.0, "perftest", 0, 100.0),
                                   _link("n1", "n3", 60.0, "perftest", 0, 100.0),
                                   _link("n1", "n3", 62.0, "perftest", 0, 100.0),
                                   _link("n1", "n4", 93.0, "perftest", 0, 100.0),
                                   _link("n1", "n5", None, "perftest", 0, 100.0),
                                   _link("n2", "n3", 95.0, "perftest", 0, 100.0)], [], ["n1", "n2", "n3", "n4"])
        _store_sweep(store, "s2", [_link("n2", "n1", 91.0, "tcp")], [], ["n1", "n2"])
        _store_sweep(store, "s3", [], [], ["n1"])
    result = CliRunner().invoke(main, ["history", "n1", "--store", str(store_path)])
    assert result.exit_code == 0, result.output
    assert "gemm.tflops" in result.output and "pair figures" in result.output
    rows = [line for line in result.output.splitlines() if "perftest r0" in line or " tcp " in line]
    assert len(rows) == 2
    # worst: n3 (mean of 60 and 62); median of 61, 93, 94; 3 partners measured and n5 failed
    assert re.search(r"perftest r0 │ +61\.0 n3 │ +93\.0 93 % │ +3 \+1 failed", rows[1]), rows
    assert re.search(r"tcp +│ +91\.0 n2 │ +91\.0 │ +1", rows[0]), rows
    assert max(len(line) for line in result.output.splitlines()) <= 80

    listed = CliRunner().invoke(main, ["history", "--store", str(store_path)])
    assert listed.exit_code == 0 and "slowest link" in listed.output
    assert re.search(r"s1 +│ 4/4 +│ 0 +│ 6 +│ n1–n3 ", listed.output), listed.output
    assert "1 failed" in listed.output and "r0 60.0 Gbit/s" in listed.output



def _noisy(rounds: list[Round], level: float, noise: float, seed: int) -> list[LinkResult]:
    rng = random.Random(seed)
    return [LinkResult(a, b, "tcp", None, level * (1 + rng.gauss(0, noise)), None)
            for round_ in rounds for a, b in round_.pairs]


def test_a_fleet_under_a_baseline_of_sixteen_pairs_by_less_than_their_errors_is_no_shift():
    # a baseline of 16 pair figures (MAD 1.9 %) and a fleet at 6 % link noise whose level rests on
    # the 32 pairs of its screen, 5.6 % under it: within what the two levels are off by themselves
    # (the fleet's spread judges both: the baseline's few figures are rough). Once a fleet_shift.
    rng = random.Random(3)
    high = _baseline({TCP: [97.3 * (1 + rng.gauss(0, 0.025)) for _ in range(16)]})
    rounds = screen_rounds(names(32))
    healthy = attribute_links(_noisy(rounds, 91.0, 0.06, 1), baseline=high)
    assert healthy.references[0].baseline.deficit_pct(healthy.references[0].fleet_gbps) >= 5
    assert healthy.shifts == () and not healthy.references[0].baseline_shifted
    # a fabric 15 % down is still one shift against it
    [shift] = attribute_links(_noisy(rounds, 0.85 * 97.3, 0.06, 1), baseline=high).shifts
    assert shift.source == "baseline" and shift.baseline_name == "nightly"
