"""A host's records kept packed while a sweep runs (HostOutcome), and the compact form of the sweep
document (gpudiag.report.detail): on a simulated 8-GPU node's real records, every figure survives, and the
node takes under 50 KB."""

from __future__ import annotations

import json
from typing import Any

import pytest
from simfleet import run_node

from gpudiag.records import ProbeResult
from gpudiag.report.detail import ALL_GPUS, LONG_LIST, compact_host, flagged_gpus
from gpudiag.run.outcome import HostOutcome
from gpudiag.sim import SimulatedConnector, SimulatedFleet, demo_fleet_path, load_fleet

COMPACT_BUDGET_BYTES = 50_000


@pytest.fixture(scope="module")
def node() -> list[ProbeResult]:
    connector = SimulatedConnector(SimulatedFleet(load_fleet(demo_fleet_path())))
    return run_node(connector, "node002")


def _outcome(results: list[ProbeResult]) -> HostOutcome:
    facts = next(r.details for r in results if r.probe == "facts")
    return HostOutcome("node002", "ok", None, 12.5, facts, results)


def test_a_packed_host_gives_back_every_record_and_reads_as_its_document_entry(node: list[ProbeResult]) -> None:
    outcome = _outcome(node)
    measured = [r for r in node if r.probe != "facts"]
    assert list(outcome.results) == measured
    assert outcome.result_dicts() == [r.to_dict() for r in measured]
    assert dict(outcome) == outcome.to_dict() and outcome["host"] == "node002" and outcome.get("status") == "ok"
    assert outcome.packed_bytes * 8 < len(json.dumps(outcome.result_dicts()))
    again = outcome.with_facts({"gpu_model": "other"})
    assert again["facts"] == {"gpu_model": "other"} and again.result_dicts() == outcome.result_dicts()
    summary = outcome.summary_dict()
    assert "results" not in summary and summary["results_count"] == len(measured)


def _compact(node: list[ProbeResult], flagged: set[int] = frozenset()) -> dict[str, Any]:
    return compact_host(_outcome(node), set(flagged))


def test_the_compact_entry_of_an_8_gpu_node_is_under_50_kb_and_a_fraction_of_the_full_one(
        node: list[ProbeResult]) -> None:
    compact = len(json.dumps(_compact(node)))
    full = len(json.dumps(_outcome(node).to_dict()))
    assert compact < COMPACT_BUDGET_BYTES < full
    assert compact * 2.5 < full


def test_p2p_pairs_become_matrices_holding_every_measured_pair(node: list[ProbeResult]) -> None:
    matrices = _compact(node)["p2p"]
    pairs = [r for r in node if r.probe == "p2p" and r.ok]
    assert pairs and sum(1 for m in matrices for row in m["values"] for v in row if v is not None) == len(pairs)
    for r in pairs:
        (matrix,) = [m for m in matrices if (m["metric"], m["direction"], m["buffer_mib"]) ==
                     (r.metric, r.params["direction"], r.params.get("buffer_mib"))]
        where = matrix["devices"]
        value = matrix["values"][where.index(r.params["src"])][where.index(r.params["dst"])]
        assert value == pytest.approx(r.value, rel=1e-5)
    assert all(matrix["values"][i][i] is None for matrix in matrices for i in range(len(matrix["devices"])))


def test_telemetry_becomes_a_table_per_gpu_with_every_reading_and_its_nvlinks(node: list[ProbeResult]) -> None:
    tables = _compact(node)["telemetry"]
    readings = [r for r in node if r.probe == "telemetry" and r.ok and r.metric != "nic_port"]  # nic_ports: a table
    assert {r.device for r in readings} == set(tables)
    for r in readings:
        assert tables[r.device]["readings"][r.metric] == r.value
        assert tables[r.device]["gpu_uuid"] == r.gpu_uuid
    links = next(r for r in readings if r.metric == "nvlink_links_up").details["links"]
    table = tables["gpu:0"]["details"]["nvlink_links_up"]["links"]
    assert [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]] == links


def test_per_sm_arrays_are_left_out_and_named_except_for_a_gpu_a_finding_names(node: list[ProbeResult]) -> None:
    long = {name for r in node if r.probe == "smclock" and r.device == "cuda:3"
            for name, value in r.details.items() if isinstance(value, list) and len(value) > LONG_LIST}
    assert long  # the per-SM clocks

    def smclock(compact: dict[str, Any], device: str) -> dict[str, Any]:
        return next(r for r in compact["results"] if r["probe"] == "smclock" and r["device"] == device
                    and r["metric"] == "sm_clock")

    plain, flagged = _compact(node), _compact(node, {3})
    assert set(smclock(plain, "cuda:3")["details"]["details_left_out"]) == long
    assert not long & set(smclock(plain, "cuda:3")["details"])
    assert long <= set(smclock(flagged, "cuda:3")["details"]) and "details_left_out" not in smclock(
        flagged, "cuda:3")["details"]
    assert "details_left_out" in smclock(flagged, "cuda:2")["details"]
    assert long <= set(smclock(_compact(node, {ALL_GPUS}), "cuda:2")["details"])


def test_a_record_that_errored_stays_a_record_in_the_compact_form(node: list[ProbeResult]) -> None:
    broken = [r if not (r.probe == "p2p" and r.device == "cuda:1") else
              ProbeResult(r.probe, r.device, r.metric, None, None, "error", "peer access denied", r.gpu_uuid,
                          params=r.params) for r in node]
    compact = _compact(broken)
    errors = [r for r in compact["results"] if r["status"] == "error"]
    assert errors and {r["probe"] for r in errors} == {"p2p"} and errors[0]["reason"] == "peer access denied"


def test_findings_flag_their_gpus_or_the_whole_host() -> None:
    flagged = flagged_gpus([{"host": "a", "gpu": 3}, {"host": "b", "gpu": None}, {"host": "a", "gpu": 5}])
    assert flagged == {"a": {3, 5}, "b": {ALL_GPUS}}


def test_the_compact_facts_name_each_gpu_uuid_once_unless_the_map_lacks_one():
    gpus = [{"cuda_index": 0, "nvml_index": 1, "gpu_uuid": "GPU-b", "pci_bus_id": "00000000:2A:00.0"}]
    whole = compact_host({"host": "n1", "facts": {"gpu_uuids": ["GPU-b"], "gpus": gpus}, "results": []}, set())
    assert whole["facts"] == {"gpus": gpus}
    partial = compact_host({"host": "n1", "facts": {"gpu_uuids": ["GPU-a", "GPU-b"], "gpus": gpus}, "results": []},
                           set())
    assert partial["facts"]["gpu_uuids"] == ["GPU-a", "GPU-b"]  # GPU-a is named nowhere else: kept
