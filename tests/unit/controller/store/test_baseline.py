"""Baselines: median and unscaled MAD per key from stored sweeps, never pooling keys, leaving out
what a finding touched; kept by name in the store; exported and imported as checked JSON."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from gpudiag.analysis.keys import result_key
from gpudiag.errors import InputError, StoreError
from gpudiag.records import ProbeResult
from gpudiag.store.baselines import (
    BASELINE_SCHEMA,
    Baseline,
    BaselineEntry,
    build_baseline,
    export_baseline,
    import_baseline,
    list_baselines,
    load_baseline,
    median_absolute_deviation,
    save_baseline,
)
from gpudiag.store.store import BaselineSample, Store

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
        "cuda_version": "12.4", "torch_version": "2.4.1"}
A100 = {**H100, "gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_memory_mib": 81920}
BF16 = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}
FP8 = {**BF16, "dtype": "fp8"}


def _gemm(gpu: int, value: float, params: dict[str, Any] = BF16) -> dict[str, Any]:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": None, "metric": "tflops", "value": value,
            "unit": "TFLOP/s", "samples": 20, "cv": 0.004, "status": "ok", "reason": None, "params": dict(params),
            "details": {}}


def _host(name: str, values: list[float], facts: dict[str, Any] = H100, status: str = "ok",
          params: dict[str, Any] = BF16) -> dict[str, Any]:
    return {"host": name, "status": status, "error": None if status == "ok" else "timed out", "duration_s": 9.0,
            "facts": dict(facts), "results": [_gemm(gpu, value, params) for gpu, value in enumerate(values)]}


def _finding(kind: str, host: str, gpu: int | None = None, peer: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "severity": "fail", "host": host, "peer": peer, "gpu": gpu, "metric": None, "value": None,
            "reference": None, "deficit_pct": None, "robust_z": None, "confirmed": True, "evidence": "test",
            "action": "drain"}


def _store_sweep(store: Store, sweep_id: str, hosts: list[dict[str, Any]], findings: list[dict[str, Any]]) -> None:
    store.finish_sweep(sweep_id, {"schema": "gpudiag.sweep/1", "sweep_id": sweep_id,
                                  "started_at": f"2026-11-21T10:{len(sweep_id):02d}:00Z",
                                  "finished_at": "2026-11-21T10:59:00Z", "hosts": hosts, "links": [],
                                  "findings": findings, "summary": {}})


def _key(facts: dict[str, Any] = H100, params: dict[str, Any] = BF16) -> str:
    key = result_key(facts, ProbeResult.from_dict(_gemm(0, 1.0, params)))
    assert key is not None
    return key


def _samples(key: str, values: list[float], sweep_id: str = "s1") -> list[BaselineSample]:
    return [BaselineSample(sweep_id, key, "gemm", "tflops", value, "TFLOP/s", f"node{i}", f"GPU-{i}")
            for i, value in enumerate(values)]


def test_median_and_unscaled_mad_on_known_numbers() -> None:
    assert median_absolute_deviation([1, 2, 3, 4, 100], 3) == 1  # deviations 2 1 0 1 97
    baseline = build_baseline("b1", _samples("k-odd", [1.0, 2.0, 3.0, 4.0, 100.0])
                              + _samples("k-even", [1.0, 2.0, 3.0, 4.0]), created_at="2026-11-21T11:00:00Z")
    assert baseline.get("k-odd") == BaselineEntry("k-odd", median=3.0, mad=1.0, count=5, unit="TFLOP/s")
    assert baseline.get("k-even") == BaselineEntry("k-even", median=2.5, mad=1.0, count=4, unit="TFLOP/s")
    assert baseline.get("k-missing") is None
    assert baseline.source_sweeps == ("s1",) and baseline.created_at == "2026-11-21T11:00:00Z"


def test_a_tight_fleet_has_a_zero_mad() -> None:
    assert build_baseline("b", _samples("k", [740.0] * 5)).get("k") == BaselineEntry("k", 740.0, 0.0, 5, "TFLOP/s")


def test_keys_with_too_few_values_are_left_out_and_named() -> None:
    baseline = build_baseline("b", _samples("few", [1.0, 2.0]) + _samples("enough", [1.0, 2.0, 3.0]))
    assert list(baseline.entries) == ["enough"] and baseline.skipped_keys == ("few",)
    assert list(build_baseline("b", _samples("few", [1.0, 2.0]), min_count=2).entries) == ["few"]


def test_unusable_names_and_min_counts_are_input_errors() -> None:
    with pytest.raises(InputError, match="not a usable name"):
        build_baseline("has space", [])
    with pytest.raises(InputError, match="min_count must be at least 1"):
        build_baseline("b", [], min_count=0)


def test_from_the_store_different_keys_are_never_pooled(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        _store_sweep(store, "s1", [_host("h100-a", [740.0, 742.0]), _host("h100-b", [744.0, 746.0]),
                                   _host("a100-a", [300.0, 302.0], facts=A100),
                                   _host("a100-b", [304.0, 306.0], facts=A100),
                                   _host("h100-fp8", [1400.0, 1410.0, 1420.0], params=FP8)], [])
        baseline = build_baseline("fleet", store.results_for_baseline(["s1"]))
    assert {key: entry.median for key, entry in baseline.entries.items()} == {
        _key(): 743.0, _key(A100): 303.0, _key(params=FP8): 1410.0}


def test_results_touched_by_a_finding_are_left_out(tmp_path: Path) -> None:
    hosts = [_host("node001", [740.0, 741.0]), _host("node002", [742.0, 611.0]), _host("node003", [100.0, 100.0]),
             _host("node004", [743.0, 744.0]), _host("node005", [1.0, 1.0], status="timeout"),
             _host("node006", [745.0, 746.0])]
    findings = [_finding("slow_gpu", "node002", gpu=1),  # leaves out node002's GPU 1 only
                _finding("slow_node", "node003"),  # no GPU: the whole host
                _finding("slow_link", "node004", peer="node006"),  # a link: leaves out nothing
                _finding("slow_nic", "node006")]
    with Store.open(tmp_path / "s.db") as store:
        _store_sweep(store, "s1", hosts, findings)
        samples = list(store.results_for_baseline(["s1"]))
    assert [(s.host, s.gpu) for s in samples] == [
        ("node001", "cuda:0"), ("node001", "cuda:1"), ("node002", "cuda:0"),
        ("node004", "cuda:0"), ("node004", "cuda:1"), ("node006", "cuda:0"), ("node006", "cuda:1")]
    entry = build_baseline("b", samples).get(_key())
    assert entry is not None and entry.median == 743.0 and entry.count == 7


def test_a_finding_in_one_sweep_does_not_leave_out_the_host_in_another(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        _store_sweep(store, "s1", [_host("node001", [611.0])], [_finding("slow_gpu", "node001", gpu=0)])
        _store_sweep(store, "s22", [_host("node001", [740.0])], [])
        samples = list(store.results_for_baseline(["s1", "s22", "s1"]))
    assert [(s.sweep_id, s.value) for s in samples] == [("s22", 740.0)]


def test_an_unknown_sweep_is_a_store_error_at_once(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store, pytest.raises(StoreError, match="no sweep 'nope' is stored"):
        store.results_for_baseline(["nope"])


def _baseline(name: str = "fleet", median: float = 743.0) -> Baseline:
    return build_baseline(name, _samples(_key(), [median - 1, median, median + 1])
                          + _samples(_key(A100), [300.0, 303.0, 309.0], sweep_id="s2"),
                          created_at="2026-11-21T11:00:00Z")


def test_save_load_and_list(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        save_baseline(store, _baseline())
        save_baseline(store, _baseline("older"))
        assert load_baseline(store, "fleet") == _baseline()
        assert list_baselines(store) == [
            {"name": "fleet", "created_at": "2026-11-21T11:00:00Z", "source_sweeps": ["s1", "s2"], "entries": 2},
            {"name": "older", "created_at": "2026-11-21T11:00:00Z", "source_sweeps": ["s1", "s2"], "entries": 2}]
        with pytest.raises(StoreError, match="no baseline named 'nope'; stored baselines: fleet, older"):
            load_baseline(store, "nope")


def test_a_baseline_of_an_existing_name_is_replaced_only_when_asked(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        save_baseline(store, _baseline())
        with pytest.raises(InputError, match="'fleet' already exists; replace it explicitly"):
            save_baseline(store, _baseline(median=500.0))
        assert load_baseline(store, "fleet") == _baseline()
        replacement = build_baseline("fleet", _samples(_key(), [500.0, 501.0, 502.0]), created_at="x")
        save_baseline(store, replacement, replace=True)
        assert load_baseline(store, "fleet") == replacement  # the A100 entry is gone with the old baseline


def test_an_empty_baseline_is_not_stored(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        with pytest.raises(InputError, match="no entries"):
            save_baseline(store, build_baseline("b", _samples("k", [1.0])))
        assert list_baselines(store) == []


def test_a_read_only_store_lists_with_no_baselines(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store.open(path).close()
    with Store.open(path, readonly=True) as store:
        assert list_baselines(store) == []
        with pytest.raises(StoreError, match="no baseline is stored yet"):
            load_baseline(store, "fleet")


def test_export_then_import_is_the_same_baseline_and_json_has_decoded_keys() -> None:
    exported = export_baseline(_baseline())
    text = json.dumps(exported)
    assert exported["schema"] == BASELINE_SCHEMA
    assert exported["entries"][0]["key"]["facts"]["gpu_model"] in (H100["gpu_model"], A100["gpu_model"])
    assert import_baseline(json.loads(text), "base.json") == _baseline()


def test_an_imported_baseline_of_a_taken_name_needs_replace(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        save_baseline(store, _baseline())
        imported = import_baseline(export_baseline(_baseline(median=100.0)), "base.json")
        with pytest.raises(InputError, match="already exists"):
            save_baseline(store, imported)
        assert load_baseline(store, "fleet") == _baseline()


def _broken(change: Any) -> dict[str, Any]:
    data = export_baseline(build_baseline("fleet", [sample for i in range(4) for sample in _samples(
        _key(params={**BF16, "m": 1024 * (i + 1)}), [1.0, 2.0, 3.0])], created_at="2026-11-21T11:00:00Z"))
    change(data)
    return data


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(schema="gpudiag.baseline/2"), "schema: must be 'gpudiag.baseline/1'"),
    (lambda d: d.pop("created_at"), "created_at: is missing"),
    (lambda d: d.update(colour="red"), "colour: is not a known field"),
    (lambda d: d.update(name="no spaces please"), "name: 'no spaces please' is not a usable name"),
    (lambda d: d.update(source_sweeps="s1"), "source_sweeps: must be an array"),
    (lambda d: d["source_sweeps"].append(7), "source_sweeps[1]: must be a non-empty string"),
    (lambda d: d.update(entries={}), "entries: must be an array"),
    (lambda d: d["entries"][3].update(mad=-0.5), "entries[3].mad: must be >= 0"),
    (lambda d: d["entries"][1].update(median=math.inf), "entries[1].median: must be a finite number"),
    (lambda d: d["entries"][1].update(median=math.nan), "entries[1].median: must be a finite number"),
    (lambda d: d["entries"][1].update(median="743"), "entries[1].median: must be a finite number"),
    (lambda d: d["entries"][0].update(count=0), "entries[0].count: must be an integer >= 1"),
    (lambda d: d["entries"][0].update(count=True), "entries[0].count: must be an integer >= 1"),
    (lambda d: d["entries"][0].update(count=3.0), "entries[0].count: must be an integer >= 1"),
    (lambda d: d["entries"][2].update(unit="GB/s"), "entries[2].unit: must equal key.unit"),
    (lambda d: d["entries"][2].update(key="gemm"), "entries[2].key: must be an object"),
    (lambda d: d["entries"][2]["key"].pop("params"), "entries[2].key.params: is missing"),
    (lambda d: d["entries"][2]["key"].update(probe=""), "entries[2].key.probe: must be a non-empty string"),
    (lambda d: d["entries"][2].update(key=d["entries"][0]["key"]), "entries[2].key: repeats the key of entries[0]"),
    (lambda d: d["entries"].append([]), "entries[4]: must be an object, got an array"),
])
def test_import_names_the_file_and_field_of_the_first_problem(change: Any, message: str) -> None:
    with pytest.raises(InputError, match=f"^base.json: {re.escape(message)}"):
        import_baseline(_broken(change), "base.json")


def test_import_of_something_that_is_not_an_object() -> None:
    with pytest.raises(InputError, match="^base.json: top level: must be an object, got an array"):
        import_baseline([], "base.json")
