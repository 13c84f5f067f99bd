"""Records a host's last sweep already stored (its identity, clocks, link widths, error counters) are
not stored again: on real store files, each sweep reads back exactly, the row is a fraction of a
full one, and deleting the row they refer to (a host recorded again, a sweep pruned) loses nothing."""

from __future__ import annotations

import copy
import random
import sqlite3
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from gpudiag.errors import StoreError
from gpudiag.store.prune import prune
from gpudiag.store.store import Store

GPUS = 8


def _telemetry(host: str, gpu: int, temperature: int) -> list[dict[str, Any]]:
    """What NVML says of a GPU: mostly what it said last time; the temperature changes."""
    uuid = f"GPU-{host}-{gpu}"
    static = [("identity", 1, None, {"name": "NVIDIA H100 80GB HBM3", "serial": f"1652{gpu}{host}",
                                     "pci_bus_id": f"00000000:{0x18 + gpu:02X}:00.0"}),
              ("sm_clock_max", 1980, "MHz", {}), ("pcie_link_width", 16, "lanes", {"max": 16}),
              ("pcie_link_gen", 5, None, {"max": 5}), ("ecc_dbe_volatile", 0, "count", {}),
              ("retired_pages", 0, "count", {}), ("power_limit", 700, "W", {})]
    records = [{"probe": "telemetry", "device": f"gpu:{gpu}", "gpu_uuid": uuid, "metric": metric, "value": value,
                "unit": unit, "samples": 1, "cv": None, "status": "ok", "reason": None, "params": {},
                "details": details} for metric, value, unit, details in static]
    records += [{"probe": "telemetry", "device": f"gpu:{gpu}", "gpu_uuid": uuid, "metric": f"nvlink_{link}_state",
                 "value": 1, "unit": None, "samples": 1, "cv": None, "status": "ok", "reason": None,
                 "params": {"link": link}, "details": {}} for link in range(18)]
    records.append({"probe": "telemetry", "device": f"gpu:{gpu}", "gpu_uuid": uuid, "metric": "temperature",
                    "value": temperature, "unit": "C", "samples": 1, "cv": None, "status": "ok", "reason": None,
                    "params": {}, "details": {}})
    return records


def _host(host: str, sweep: int, *, temperature: int = 41) -> dict[str, Any]:
    """A host's records in sweep ``sweep``: GEMM figures and their clock samples are new each
    sweep; the telemetry is as it was but for each GPU's temperature."""
    rng = random.Random(f"{host}-{sweep}")
    results = []
    for gpu in range(GPUS):
        results.append({"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{host}-{gpu}",
                        "metric": "tflops", "value": round(740 - rng.random() * 5, 2), "unit": "TFLOP/s",
                        "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
                        "params": {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192},
                        "details": {"sm_clock_mhz": [round(1980 - rng.random() * 30, 1) for _ in range(50)]}})
        results += _telemetry(host, gpu, temperature + gpu)
    return {"host": host, "status": "ok", "error": None, "duration_s": 12.4,
            "facts": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": GPUS, "driver_version": "550.54.15"},
            "results": results}


def _document(sweep: int, hosts: list[dict[str, Any]]) -> dict[str, Any]:
    started = f"2026-11-{sweep + 1:02d}T10:00:00Z"
    return {"schema": "gpudiag.sweep/1", "sweep_id": f"s{sweep}", "started_at": started, "finished_at": started,
            "hosts": hosts, "links": [], "findings": [],
            "summary": {"hosts_total": len(hosts), "hosts_ok": len(hosts), "findings": 0, "exit_code": 0}}


def _store(store: Store, document: dict[str, Any]) -> None:
    store.begin_sweep(document["sweep_id"], document["started_at"], {})
    for host in document["hosts"]:
        assert store.record_host(document["sweep_id"], host)
    store.finish_sweep(document["sweep_id"], document)


def _rows(path: Path) -> dict[tuple[str, str], tuple[int, str | None]]:
    """(sweep, host) → (bytes of its packed records, the sweep of the row it refers to)."""
    with closing(sqlite3.connect(path)) as db:
        return {(row[0], row[1]): (len(row[2]), row[3]) for row in db.execute(
            "SELECT sweep_id, host, results_z, base_sweep_id FROM hosts")}


def _three_sweeps(path: Path) -> list[dict[str, Any]]:
    documents = [_document(sweep, [_host("node001", sweep), _host("node002", sweep)]) for sweep in range(3)]
    with Store.open(path) as store:
        for document in documents:
            _store(store, copy.deepcopy(document))
    return documents


def test_unchanged_records_are_stored_once_and_every_sweep_reads_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "gpudiag.db"
    documents = _three_sweeps(path)
    rows = _rows(path)
    assert rows["s0", "node001"][1] is None  # the host's first row is stored in full
    assert rows["s1", "node001"][1] == "s0" and rows["s2", "node001"][1] == "s0"  # never a chain
    assert rows["s2", "node001"][0] < 0.75 * rows["s0", "node001"][0], rows
    with Store.open(path, readonly=True) as store:
        for document in documents:
            assert store.load_document(document["sweep_id"]) == document
        # the previous sweep's hosts, read lazily for the counters' growth, are whole too
        (previous,) = store.previous_hosts(["node002"], before="s2")
        assert previous["results"] == documents[1]["hosts"][1]["results"]


def test_a_host_whose_records_mostly_changed_is_stored_in_full_and_becomes_the_base(tmp_path: Path) -> None:
    path = tmp_path / "gpudiag.db"
    documents = [_document(sweep, [_host("node001", sweep, temperature=41 if sweep == 0 else 70)])
                 for sweep in range(3)]
    for document in documents[1:]:  # after sweep 0 every NVLink is down: most records changed
        for record in document["hosts"][0]["results"]:
            if record["metric"].startswith("nvlink"):
                record["value"] = 0
    with Store.open(path) as store:
        for document in documents:
            _store(store, copy.deepcopy(document))
        rows = _rows(path)
        assert (rows["s0", "node001"][1], rows["s1", "node001"][1], rows["s2", "node001"][1]) == (None, None, "s1")
        assert [store.load_document(d["sweep_id"]) for d in documents] == documents


def test_pruning_the_sweep_others_refer_to_rewrites_them_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "gpudiag.db"
    documents = _three_sweeps(path)
    with Store.open(path) as store:
        result = prune(store, keep_days=None, keep=2, now=datetime(2026, 11, 30, tzinfo=timezone.utc),
                       dry_run=False)
        assert result.pruned == ("s0",)
        rows = _rows(path)
        assert {key: base for key, (_, base) in rows.items()} == {
            ("s1", "node001"): None, ("s1", "node002"): None, ("s2", "node001"): "s1", ("s2", "node002"): "s1"}
        assert [store.load_document(d["sweep_id"]) for d in documents[1:]] == documents[1:]


def test_recording_a_host_again_keeps_the_rows_that_refer_to_its_old_one(tmp_path: Path) -> None:
    """A sweep still running may record a host twice (its re-test), while a later sweep's row of
    that host already refers to the first record."""
    path = tmp_path / "gpudiag.db"
    documents = _three_sweeps(path)
    with Store.open(path) as store:
        with store.writing("test: reopening s0") as db:
            db.execute("UPDATE sweeps SET finished_at = NULL WHERE sweep_id = 's0'")
        replaced = _host("node001", 9, temperature=80)
        assert store.record_host("s0", replaced)
        assert store.load_document("s1")["hosts"] == documents[1]["hosts"]
        assert store.load_document("s2")["hosts"] == documents[2]["hosts"]
        assert store.load_document("s0")["hosts"][0]["results"] == replaced["results"]


def test_a_row_whose_base_was_removed_behind_gpudiags_back_is_a_store_error_not_a_shorter_host(
        tmp_path: Path) -> None:
    path = tmp_path / "gpudiag.db"
    _three_sweeps(path)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("DELETE FROM hosts WHERE sweep_id = 's0' AND host = 'node001'")
    with Store.open(path, readonly=True) as store, pytest.raises(StoreError, match="base row that is missing"):
        store.load_document("s1")


def test_a_value_that_changed_type_only_is_stored_as_it_came(tmp_path: Path) -> None:
    """700 W and 700.0 W compare equal in Python, but a report prints them differently."""
    path = tmp_path / "gpudiag.db"
    documents = [_document(sweep, [_host("node001", sweep)]) for sweep in range(2)]
    (limit,) = [r for r in documents[1]["hosts"][0]["results"]
                if r["metric"] == "power_limit" and r["device"] == "gpu:0"]
    limit["value"] = 700.0
    with Store.open(path) as store:
        for document in documents:
            _store(store, copy.deepcopy(document))
        (read,) = [r for r in store.load_document("s1")["hosts"][0]["results"]
                   if r["metric"] == "power_limit" and r["device"] == "gpu:0"]
    assert _rows(path)["s1", "node001"][1] == "s0"
    assert isinstance(read["value"], float)
