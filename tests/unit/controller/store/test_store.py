"""The SQLite store, on real files: a sweep document reads back exactly, an interrupted sweep keeps
what it gathered, older schemas are upgraded, and a file the store cannot use is refused and left
byte for byte as it was."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import threading
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gpudiag.analysis.keys import result_key
from gpudiag.errors import StoreError
from gpudiag.exitcodes import ExitCode
from gpudiag.findings import Finding
from gpudiag.records import ProbeResult
from gpudiag.run.fanout import HostOutcome, new_sweep_id
from gpudiag.store.schema import MIGRATIONS, SCHEMA_VERSION
from gpudiag.store.store import Store, default_store_path

FACTS = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "driver": "550.54.15",
         "driver_version": "550.54.15", "cuda_version": "12.4", "torch_version": "2.4.1", "gpu_memory_mib": 81559}
GEMM_PARAMS = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "steady"}
MEMBW_PARAMS = {"memory": "device", "buffer_mib": 1024}


def _result(host: str, gpu: int, probe: str, metric: str, value: float, unit: str,
            params: dict[str, Any]) -> dict[str, Any]:
    return {"probe": probe, "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{host}-{gpu}", "metric": metric,
            "value": value, "unit": unit, "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
            "params": dict(params), "details": {"sm_clock_mhz": 1980}}


def _host(name: str, gemm: tuple[float, float], membw: tuple[float, float]) -> dict[str, Any]:
    results = [_result(name, gpu, "gemm", "tflops", value, "TFLOP/s", GEMM_PARAMS) for gpu, value in enumerate(gemm)]
    results += [_result(name, gpu, "membw", "gbps", value, "GB/s", MEMBW_PARAMS) for gpu, value in enumerate(membw)]
    results.append({"probe": "p2p", "device": "cuda:0", "gpu_uuid": None, "metric": "gbps", "value": None,
                    "unit": "GB/s", "samples": 0, "cv": None, "status": "skipped", "reason": "NVLink not present",
                    "params": {}, "details": {}})
    return {"host": name, "status": "ok", "error": None, "duration_s": 12.4, "facts": dict(FACTS), "results": results}


def sweep_document() -> dict[str, Any]:
    """A sweep document (docs/document.md): 3 hosts of 2 GPUs, one unreachable, one slow GPU."""
    unreachable = {"host": "node003", "status": "unreachable", "error": "node003:22: Connection refused",
                   "duration_s": 3.001, "facts": {}, "results": []}
    return {
        "schema": "gpudiag.sweep/1",
        "sweep_id": "20261121T101500Z-3f2a",
        "started_at": "2026-11-21T10:15:00Z",
        "finished_at": "2026-11-21T10:15:41Z",
        "hosts": [_host("node001", (741.2, 739.8), (3012.5, 3008.0)),
                  _host("node002", (742.0, 611.0), (3010.1, 3011.7)), unreachable],
        "links": [{"a": "node001", "b": "node002", "rail": 0, "backend": "tcp", "metric": "gbps",
                   "value": 9.41, "phase": "screen"}],
        "findings": [
            {"kind": "slow_gpu", "severity": "fail", "host": "node002", "peer": None, "gpu": 1,
             "metric": "gemm.tflops", "value": 611.0, "reference": 742.0, "deficit_pct": 17.7, "robust_z": -9.8,
             "confirmed": True, "evidence": "HW thermal slowdown active; SM clock 1410 of 1980 MHz",
             "action": "drain"},
            {"kind": "unchecked", "severity": "warn", "host": "node003", "peer": None, "gpu": None, "metric": None,
             "value": None, "reference": None, "deficit_pct": None, "robust_z": None, "confirmed": True,
             "evidence": "unreachable: node003:22: Connection refused", "action": "check that the node is up"}],
        "impact": {"job_slowdown_pct": 17.7, "by_finding": [17.7, 0.0]},
        "summary": {"hosts_total": 3, "hosts_ok": 2, "findings": 2, "exit_code": 1},
    }


def back_to_schema_7(connection: sqlite3.Connection) -> None:
    """A store's links as a gpudiag before schema 8 kept them: their fields beyond the columns in
    extra_json, no extra_z column."""
    for rowid, packed in connection.execute("SELECT rowid, extra_z FROM links").fetchall():
        if packed is not None:
            connection.execute("UPDATE links SET extra_json = ? WHERE rowid = ?",
                               (zlib.decompress(packed).decode(), rowid))
    connection.execute("ALTER TABLE links DROP COLUMN extra_z")


def _record_as_it_runs(store: Store, document: dict[str, Any]) -> None:
    """What the sweep does: begin, hosts in the order they finish, links, findings, finish."""
    store.begin_sweep(document["sweep_id"], document["started_at"], {"probes": ["gemm", "membw"], "fanout": 64})
    for host in reversed(document["hosts"]):  # the unreachable host finishes first
        assert store.record_host(document["sweep_id"], host)
    store.record_links(document["sweep_id"], document["links"])
    store.record_findings(document["sweep_id"], document["findings"])
    store.finish_sweep(document["sweep_id"], document)


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def test_a_finished_sweep_reads_back_exactly_field_order_included(tmp_path: Path) -> None:
    document = sweep_document()
    path = tmp_path / "store" / "gpudiag.db"
    with Store.open(path) as store:
        _record_as_it_runs(store, document)
    with Store.open(path, readonly=True) as store:
        stored = store.load_document(document["sweep_id"])
    assert stored == document
    assert json.dumps(stored) == json.dumps(document)  # byte-identical: key order and int/float kept


def test_extra_fields_of_hosts_results_links_and_findings_survive(tmp_path: Path) -> None:
    document = sweep_document()
    document["hosts"][0]["rack"] = "r12"
    document["hosts"][0]["results"][0]["note"] = {"retested": True}
    document["links"][0]["details"] = {"retransmits": 3}
    document["findings"][0]["cost"] = 0.12
    with Store.open(tmp_path / "s.db") as store:
        store.finish_sweep(document["sweep_id"], document)  # a whole document, never begun
        assert store.load_document(document["sweep_id"]) == document


def test_hosts_are_in_the_order_they_were_recorded_until_the_document_orders_them(tmp_path: Path) -> None:
    document = sweep_document()
    with Store.open(tmp_path / "s.db") as store:
        store.begin_sweep(document["sweep_id"], document["started_at"], {})
        for host in reversed(document["hosts"]):
            store.record_host(document["sweep_id"], host)
        running = store.load_document(document["sweep_id"])
        assert [h["host"] for h in running["hosts"]] == ["node003", "node002", "node001"]
        store.finish_sweep(document["sweep_id"], document)
        assert [h["host"] for h in store.load_document(document["sweep_id"])["hosts"]] == [
            "node001", "node002", "node003"]


def test_an_interrupted_sweep_keeps_the_hosts_that_finished(tmp_path: Path) -> None:
    document = sweep_document()
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        store.begin_sweep(document["sweep_id"], document["started_at"], {"fanout": 64})
        store.record_host(document["sweep_id"], document["hosts"][1])
        store.record_host(document["sweep_id"], document["hosts"][0])
    # the controller died here: no finish
    with Store.open(path, readonly=True) as store:
        stored = store.load_document(document["sweep_id"])
        listed = store.list_sweeps(10)
    assert stored["hosts"] == [document["hosts"][1], document["hosts"][0]]
    assert stored["finished_at"] is None and stored["interrupted"] is True
    assert stored["summary"] == {"hosts_total": 2, "hosts_ok": 2, "findings": 0,
                                 "exit_code": int(ExitCode.INTERRUPTED)}
    assert listed[0]["interrupted"] is True and listed[0]["hosts_total"] == 2


def test_a_finished_interrupted_sweep_is_marked_and_reads_back_exactly(tmp_path: Path) -> None:
    document = sweep_document()
    document["summary"]["exit_code"] = int(ExitCode.INTERRUPTED)
    with Store.open(tmp_path / "s.db") as store:
        _record_as_it_runs(store, document)
        assert store.list_sweeps()[0]["interrupted"] is True
        assert store.load_document(document["sweep_id"]) == document


def test_a_host_reported_after_the_sweep_finished_changes_nothing(tmp_path: Path) -> None:
    document = sweep_document()
    with Store.open(tmp_path / "s.db") as store:
        _record_as_it_runs(store, document)
        late = {**document["hosts"][2], "status": "interrupted"}
        assert store.record_host(document["sweep_id"], late) is False
        assert store.load_document(document["sweep_id"]) == document


def test_writes_to_an_unknown_or_reused_sweep_id_are_refused(tmp_path: Path) -> None:
    document = sweep_document()
    with Store.open(tmp_path / "s.db") as store:
        with pytest.raises(StoreError, match="was not begun"):
            store.record_host("nope", document["hosts"][0])
        store.begin_sweep("s1", "2026-11-21T10:15:00Z", {})
        with pytest.raises(StoreError, match="already stored"):
            store.begin_sweep("s1", "2026-11-21T10:15:00Z", {})


def test_an_unknown_sweep_id_names_the_latest_ones(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        with pytest.raises(StoreError, match="holds no sweeps yet"):
            store.load_document("20261121T000000Z-0000")
        for minute in range(7):
            store.begin_sweep(f"sweep-{minute}", f"2026-11-21T10:{minute:02d}:00Z", {})
        with pytest.raises(StoreError, match="the latest are sweep-6, sweep-5, sweep-4, sweep-3, sweep-2$"):
            store.load_document("sweep-x")
        assert store.latest_sweep_id() == "sweep-6"
        assert [s["sweep_id"] for s in store.list_sweeps(3)] == ["sweep-6", "sweep-5", "sweep-4"]


def test_host_history_gives_each_sweeps_figures_over_the_hosts_gpus(tmp_path: Path) -> None:
    first, second = sweep_document(), sweep_document()
    second["sweep_id"], second["started_at"] = "20261122T101500Z-0001", "2026-11-22T10:15:00Z"
    second["hosts"][1] = _host("node002", (743.0, 740.0), (3000.0, 3020.0))
    with Store.open(tmp_path / "s.db") as store:
        store.finish_sweep(first["sweep_id"], first)
        store.finish_sweep(second["sweep_id"], second)
        history = store.host_history("node002", limit=5)
        unreachable = store.host_history("node003")
    assert [h["sweep_id"] for h in history] == [second["sweep_id"], first["sweep_id"]]
    assert history[1]["figures"] == [
        {"metric": "gemm.tflops", "params": GEMM_PARAMS, "unit": "TFLOP/s", "model": "NVIDIA H100 80GB HBM3",
         "count": 2, "min": 611.0, "median": 676.5, "max": 742.0, "per_gpu": [[0, 742.0], [1, 611.0]]},
        {"metric": "membw.gbps", "params": MEMBW_PARAMS, "unit": "GB/s", "model": "NVIDIA H100 80GB HBM3",
         "count": 2, "min": 3010.1, "median": pytest.approx(3010.9), "max": 3011.7,
         "per_gpu": [[0, 3010.1], [1, 3011.7]]}]
    assert [(h["status"], h["figures"]) for h in unreachable] == [("unreachable", [])] * 2


def test_record_host_from_16_threads_at_once(tmp_path: Path) -> None:
    hosts = [HostOutcome(f"node{i:03d}", "ok", None, 1.25, dict(FACTS),
                         tuple(ProbeResult("gemm", f"cuda:{gpu}", "tflops", 740.0 + gpu, "TFLOP/s", "ok",
                                           samples=20, params=GEMM_PARAMS) for gpu in range(8)))
             for i in range(64)]
    errors: list[BaseException] = []
    with Store.open(tmp_path / "s.db") as store:
        store.begin_sweep("s1", "2026-11-21T10:15:00Z", {})

        def work(part: list[HostOutcome]) -> None:
            try:
                for outcome in part:
                    store.record_host("s1", outcome.to_dict())
            except StoreError as error:  # pragma: no cover - reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(hosts[i::16],)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        document = store.load_document("s1")
    assert errors == []
    assert sorted(h["host"] for h in document["hosts"]) == [h.host for h in hosts]
    assert all(len(h["results"]) == 8 for h in document["hosts"])


def test_a_finding_object_reads_back_as_its_dict(tmp_path: Path) -> None:
    finding = Finding(kind="throttled", severity="warn", host="node001", gpu=2, evidence="HW slowdown",
                      action="inspect", action_detail="check cooling", value=1410.0, reference=1980.0)
    with Store.open(tmp_path / "s.db") as store:
        store.begin_sweep("s1", "2026-11-21T10:15:00Z", {})
        store.record_findings("s1", [finding.to_dict(), finding.to_dict()])
        store.record_findings("s1", [finding.to_dict()])  # replaces
        assert store.load_document("s1")["findings"] == [finding.to_dict()]


# -- schema versions and files the store must not touch ---------------------------------------------


def _store_at_version(path: Path, version: int) -> None:
    """A store as an older gpudiag left it: the first ``version`` migrations, and one sweep."""
    connection = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:version]:
        connection.executescript(script)
    connection.execute(f"PRAGMA user_version = {version}")
    if version >= 1:
        connection.execute("INSERT INTO sweeps (sweep_id, started_at, document_schema) VALUES ('old', "
                           "'2025-01-01T00:00:00Z', 'gpudiag.sweep/1')")
    connection.close()


def _user_version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("PRAGMA user_version").fetchone()[0])
    finally:
        connection.close()


@pytest.mark.parametrize("version", range(SCHEMA_VERSION))
@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "read-only"])
def test_an_older_store_is_upgraded_in_place_keeping_its_sweeps(tmp_path: Path, version: int,
                                                                 readonly: bool) -> None:
    path = tmp_path / "old.db"
    _store_at_version(path, version)
    with Store.open(path, readonly=readonly) as store:
        assert store.latest_sweep_id() == ("old" if version >= 1 else None)
    assert _user_version(path) == SCHEMA_VERSION
    with Store.open(path) as store:
        _record_as_it_runs(store, sweep_document())
        assert store.load_document(sweep_document()["sweep_id"]) == sweep_document()


def test_a_store_of_a_newer_gpudiag_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    _store_at_version(path, SCHEMA_VERSION)
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.commit()
    connection.close()
    before = _bytes(path)
    for readonly in (False, True):
        with pytest.raises(StoreError, match=f"^{path}: written by a newer gpudiag .*upgrade gpudiag"):
            Store.open(path, readonly=readonly)
    assert _bytes(path) == before


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "read-only"])
def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "gpudiag.db"
    path.write_bytes(b"these are somebody's notes, not a database\n" * 200)
    before = _bytes(path)
    with pytest.raises(StoreError, match=f"^{path}: not a gpudiag store .*not an SQLite database"):
        Store.open(path, readonly=readonly)
    assert _bytes(path) == before


def test_another_programs_sqlite_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE sweeps (id INTEGER)")
    connection.commit()
    connection.close()
    before = _bytes(path)
    with pytest.raises(StoreError, match="not a gpudiag store \\(tables: sweeps\\)"):
        Store.open(path)
    assert _bytes(path) == before


def _finished_store(path: Path) -> None:
    with Store.open(path) as store:  # closing checkpoints the WAL into the file
        _record_as_it_runs(store, sweep_document())


def test_a_store_with_a_corrupt_schema_page_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _finished_store(path)
    data = bytearray(_bytes(path))
    data[100:400] = b"\xff" * 300  # the first page's b-tree, past the 100-byte file header
    path.write_bytes(bytes(data))
    for readonly in (False, True):
        with pytest.raises(StoreError, match=f"^{path}: the store is corrupt .*\\.recover"):
            Store.open(path, readonly=readonly)
    assert _bytes(path) == bytes(data)


def test_a_corrupt_data_page_is_a_store_error_when_read(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _finished_store(path)
    data = bytearray(_bytes(path))
    page_size = int.from_bytes(data[16:18], "big")
    for start in range(page_size, len(data), page_size):
        data[start:start + 8] = b"\xee" * 8  # every b-tree page header but the schema's
    path.write_bytes(bytes(data))
    # (the schema may span more than its first page: then opening the store finds it corrupt)
    with pytest.raises(StoreError, match="the store is corrupt"), Store.open(path, readonly=True) as store:
        store.load_document(sweep_document()["sweep_id"])
    assert _bytes(path) == bytes(data)


def test_a_folder_given_as_the_store_is_refused(tmp_path: Path) -> None:
    for readonly in (False, True):
        with pytest.raises(StoreError, match="is a folder, not a store file"):
            Store.open(tmp_path, readonly=readonly)


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as root, whom file permissions do not stop")
def test_an_unreadable_store_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _finished_store(path)
    before = _bytes(path)
    path.chmod(0)
    try:
        for readonly in (False, True):
            with pytest.raises(StoreError, match="permission denied"):
                Store.open(path, readonly=readonly)
    finally:
        path.chmod(0o600)
    assert _bytes(path) == before


def test_a_store_denied_by_permissions_is_refused_and_left_untouched_even_as_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.db"
    _finished_store(path)
    before = _bytes(path)
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)  # what a non-root user would be told
    for readonly in (False, True):
        with pytest.raises(StoreError, match=f"^{path}: permission denied"):
            Store.open(path, readonly=readonly)
    assert _bytes(path) == before


def test_an_older_store_read_by_a_user_who_may_not_write_it_is_refused_untouched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.db"
    _store_at_version(path, SCHEMA_VERSION - 1)
    before = _bytes(path)
    monkeypatch.setattr(os, "access", lambda _path, mode: not mode & os.W_OK)
    with pytest.raises(StoreError, match="older schema .* cannot be upgraded"):
        Store.open(path, readonly=True)
    assert _bytes(path) == before


def test_a_store_folder_that_cannot_be_created_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(StoreError, match="cannot create the store's folder"):
        Store.open(tmp_path / "file" / "gpudiag.db")


def test_opening_read_only_never_creates_a_file_or_folder(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "gpudiag.db"
    with pytest.raises(StoreError, match="no store there yet"):
        Store.open(path, readonly=True)
    assert not path.parent.exists()


def test_a_read_only_store_refuses_to_write(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _finished_store(path)
    with Store.open(path, readonly=True) as store, pytest.raises(StoreError, match="opened read-only"):
        store.begin_sweep("s2", "2026-11-21T10:15:00Z", {})


def test_opening_creates_the_folder_and_a_wal_store_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "gpudiag.db"
    with Store.open(path) as store:
        assert store.list_sweeps() == []
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    connection.close()
    assert _user_version(path) == SCHEMA_VERSION


def test_the_default_path_follows_xdg(tmp_path: Path) -> None:
    assert default_store_path({"XDG_DATA_HOME": "/data", "HOME": "/home/u"}) == Path("/data/gpudiag/gpudiag.db")
    assert default_store_path({"HOME": "/home/u"}) == Path("/home/u/.local/share/gpudiag/gpudiag.db")
    assert default_store_path({"XDG_DATA_HOME": "relative", "HOME": "/home/u"}) == Path(
        "/home/u/.local/share/gpudiag/gpudiag.db")


def test_the_document_given_is_not_changed_by_storing_it(tmp_path: Path) -> None:
    document = sweep_document()
    original = copy.deepcopy(document)
    with Store.open(tmp_path / "s.db") as store:
        _record_as_it_runs(store, document)
    assert document == original


def _legacy_rows(path: Path, document: dict[str, Any]) -> None:
    """The sweep as a schema-2 gpudiag stored it: one ``results`` row per record."""
    connection = sqlite3.connect(path, isolation_level=None)
    sweep_id = document["sweep_id"]
    connection.execute("INSERT INTO sweeps (sweep_id, started_at, finished_at, exit_code, document_schema,"
                       " summary_json) VALUES (?, ?, ?, 0, 'gpudiag.sweep/1', ?)",
                       (sweep_id, document["started_at"], document["finished_at"], json.dumps(document["summary"])))
    for ordinal, host in enumerate(document["hosts"]):
        connection.execute("INSERT INTO hosts (sweep_id, host, ordinal, status, error, duration_s, facts_json)"
                           " VALUES (?, ?, ?, ?, ?, ?, ?)", (sweep_id, host["host"], ordinal, host["status"],
                                                             host["error"], host["duration_s"],
                                                             json.dumps(host["facts"])))
        for index, r in enumerate(host["results"]):
            key = result_key(host["facts"], ProbeResult.from_dict(r))
            connection.execute(
                "INSERT INTO results (sweep_id, host, ordinal, probe, device, gpu_uuid, metric, value, unit,"
                " samples, cv, status, reason, params_json, details_json, baseline_key) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (sweep_id, host["host"], index, r["probe"], r["device"], r["gpu_uuid"], r["metric"], r["value"],
                 r["unit"], r["samples"], r["cv"], r["status"], r["reason"], json.dumps(r["params"]),
                 json.dumps(r["details"]), key))
    connection.close()


def test_a_sweep_stored_by_schema_2_reads_back_beside_new_ones_for_reports_history_and_baselines(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _store_at_version(path, 2)
    old = sweep_document()
    old["sweep_id"], old["started_at"] = "20250101T000000Z-old0", "2025-01-01T00:00:00Z"
    _legacy_rows(path, old)
    with Store.open(path) as store:  # upgraded to schema 3; the old rows stay where they are
        store.record_findings(old["sweep_id"], old["findings"])  # that table did not change
        _record_as_it_runs(store, sweep_document())
        loaded = store.load_document(old["sweep_id"])
        assert [h["results"] for h in loaded["hosts"]] == [h["results"] for h in old["hosts"]]
        history = store.host_history("node001")
        assert [row["sweep_id"] for row in history] == [sweep_document()["sweep_id"], old["sweep_id"]]
        assert history[0]["figures"] == history[1]["figures"] and history[0]["figures"]
        new, legacy = (list(store.results_for_baseline([sweep_id]))
                       for sweep_id in (sweep_document()["sweep_id"], old["sweep_id"]))
    assert [(s.baseline_key, s.value, s.host) for s in new] == [(s.baseline_key, s.value, s.host) for s in legacy]
    assert new  # node002's GPU 1 (a finding) and the unreachable node003 are left out of both


def test_a_stored_host_takes_a_fraction_of_its_records_and_the_store_does_not_rewrite_it_at_the_end(
        tmp_path: Path) -> None:
    path = tmp_path / "gpudiag.db"
    document = sweep_document()
    with Store.open(path) as store:
        _record_as_it_runs(store, document)
        with store.reading("test") as db:
            packed = db.execute("SELECT results_z FROM hosts WHERE host = 'node001'").fetchone()[0]
            figures = db.execute("SELECT count(*) FROM figures WHERE host = 'node001'").fetchone()[0]
    assert len(packed) < len(json.dumps(document["hosts"][0]["results"])) / 2
    assert figures == 4  # 2 GPUs x (gemm, membw): every compared figure, one row each


def test_finishing_keeps_recorded_hosts_and_adds_those_never_recorded(tmp_path: Path) -> None:
    document = sweep_document()
    with Store.open(tmp_path / "gpudiag.db") as store:
        store.begin_sweep(document["sweep_id"], document["started_at"], {})
        assert store.record_host(document["sweep_id"], document["hosts"][0])
        # the finished document says something else of node001 (interrupted later): its status is
        # updated, its records stay; node002 and node003 were never recorded and are added
        finished = copy.deepcopy(document)
        finished["hosts"][0] = {**finished["hosts"][0], "results": []}
        store.finish_sweep(document["sweep_id"], finished)
        loaded = store.load_document(document["sweep_id"])
    assert [h["host"] for h in loaded["hosts"]] == ["node001", "node002", "node003"]
    assert loaded["hosts"][0]["results"] == document["hosts"][0]["results"]
    assert loaded["hosts"][1:] == document["hosts"][1:]


def test_sweeps_started_in_the_same_second_keep_the_order_they_started_in(tmp_path: Path) -> None:
    # A store keeps start times in whole seconds; a small simulated fleet's sweep takes a fraction
    # of one, so several begin in the same second and only their ids can order them.
    second = datetime(2026, 11, 21, 10, 15, 0, tzinfo=timezone.utc)
    moments = [second + timedelta(microseconds=micro) for micro in (0, 16, 40, 250_000, 500_001, 999_999)]
    ids = [new_sweep_id(moment) for moment in moments]
    with Store.open(tmp_path / "gpudiag.db") as store:
        for sweep_id, gemm in zip(ids, (742.0, 735.0, 728.0, 721.0, 714.0, 707.0), strict=True):
            document = {**sweep_document(), "sweep_id": sweep_id,
                        "hosts": [_host("node001", (gemm, 741.0), (3012.5, 3008.0))]}
            _record_as_it_runs(store, {**document, "findings": []})
        listed = [row["sweep_id"] for row in store.list_sweeps()]
        history = store.host_history("node001")
        latest = store.latest_sweep_id()
    assert len(set(ids)) == len(ids)
    assert listed == ids[::-1]
    assert [row["sweep_id"] for row in history] == ids[::-1]
    gemm = [next(figure for figure in row["figures"] if figure["metric"] == "gemm.tflops") for row in history]
    assert [figure["per_gpu"][0][1] for figure in gemm][:2] == [707.0, 714.0]
    assert latest == ids[-1]


def test_recent_figures_read_host_by_host_are_those_of_the_whole_read(tmp_path: Path) -> None:
    second = datetime(2026, 11, 21, 10, 15, 0, tzinfo=timezone.utc)
    with Store.open(tmp_path / "gpudiag.db") as store:
        for index in range(3):
            document = sweep_document()
            document["sweep_id"] = new_sweep_id(second + timedelta(seconds=index))
            document["started_at"] = f"2026-11-21T10:15:0{index}Z"
            _record_as_it_runs(store, document)
        everyone = store.recent_figures(None, 2)
        alone = store.recent_figures(["node002"], 2)
        hosts = store.recent_hosts(2)
    assert hosts == ["node001", "node002"]  # node003 never answered
    assert set(everyone) == {"node001", "node002"} and len(everyone["node002"]) == 2
    assert alone == {"node002": everyone["node002"]}


def _traced_link(rail: int) -> dict[str, Any]:
    """A pair test of a traced fabric: 8 streams each way with their paths."""
    streams = [{"gbps": 48.0 + index / 7, "hops": ["r0-leaf01", f"r0-spine0{index % 4 + 1}", "r0-leaf02"]}
               for index in range(8)]
    back = [{"gbps": 47.5 + index / 9, "hops": ["r0-leaf02", f"r0-spine0{index % 4 + 1}", "r0-leaf01"]}
            for index in range(8)]
    return {"a": "node001", "b": "node002", "rail": rail, "backend": "perftest", "metric": "gbps",
            "value": 385.123456789, "unit": "Gbit/s", "phase": "screen", "line_rate_gbps": 400.0, "error": None,
            "fault": None, "collective_gbps": 380.0, "streams": streams, "back_streams": back}


def test_a_links_streams_are_stored_packed_and_read_back_exactly_beside_links_stored_before(tmp_path: Path):
    # A traced fabric's entry carries 16 stream figures and their paths a pair and rail: kept as
    # JSON they were 12 KB of a 100-node demo sweep's 35 KB a node in the store.
    path = tmp_path / "gpudiag.db"
    old = sweep_document()
    old["links"] = [_traced_link(rail) for rail in range(4)]
    with Store.open(path) as store:
        _record_as_it_runs(store, old)
    connection = sqlite3.connect(path, isolation_level=None)
    packed = connection.execute("SELECT sum(length(extra_z)), count(extra_json) FROM links").fetchone()
    assert packed[1] == 0 and 0 < packed[0] < len(json.dumps(old["links"])) / 3
    back_to_schema_7(connection)  # the same sweep as a gpudiag of schema 7 stored it
    connection.execute("PRAGMA user_version = 7")
    connection.close()
    new = {**sweep_document(), "sweep_id": "20261122T101500Z-aaaa", "links": [_traced_link(rail) for rail in (5, 6)]}
    with Store.open(path) as store:
        _record_as_it_runs(store, new)
        assert store.load_document(old["sweep_id"]) == old
        assert store.load_document(new["sweep_id"]) == new
        (row,) = store.host_history("node002", limit=1)
    assert row["links"] == new["links"]
    connection = sqlite3.connect(path)
    assert connection.execute("SELECT count(extra_json), count(extra_z) FROM links").fetchone() == (4, 2)
    connection.close()
