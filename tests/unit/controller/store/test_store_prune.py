"""Pruning the store, on real store files written through the Store: what goes, what stays and
why, every table emptied of the pruned sweeps, the file shrunk, and nothing changed by a dry run."""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gpudiag.errors import InputError, StoreError
from gpudiag.schema.times import parse_time
from gpudiag.store.baselines import baseline_samples, build_baseline, load_baseline, save_baseline
from gpudiag.store.prune import PruneResult, open_for_prune, prune
from gpudiag.store.store import Store

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
FACTS = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "driver": "550.54.15",
         "driver_version": "550.54.15", "cuda_version": "12.4", "torch_version": "2.4.1", "gpu_memory_mib": 81559}
# Every table that holds a sweep's rows, named here rather than taken from the module under test.
TABLES = ("sweeps", "hosts", "results", "figures", "links", "findings")


@contextmanager
def _db(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to the store file, committed and closed after the block (an open one
    would keep the store's write-ahead log alive)."""
    with closing(sqlite3.connect(path)) as connection, connection:
        yield connection


def _iso(days_ago: float) -> str:
    return (NOW - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _result(sweep_id: str, host: str, gpu: int, probe: str, metric: str, value: float, unit: str,
            params: dict[str, Any]) -> dict[str, Any]:
    return {"probe": probe, "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{host}-{gpu}", "metric": metric,
            "value": value, "unit": unit, "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
            "params": dict(params), "details": {"sm_clock_mhz": _samples(f"{sweep_id}{host}{gpu}{probe}", 200)}}


def _samples(seed: str, count: int) -> list[float]:
    """Telemetry-like samples: as hard to compress as real ones."""
    generator = random.Random(seed)
    return [round(1980 - generator.random() * 40, 3) for _ in range(count)]


def _host(sweep_id: str, name: str, index: int, dtype: str) -> dict[str, Any]:
    """A host whose every record differs from its last sweep's (each sweep samples anew)."""
    results = [_result(sweep_id, name, gpu, "gemm", "tflops", 740.0 - index - gpu * 0.7, "TFLOP/s",
                       {"dtype": dtype, "m": 8192, "n": 8192, "k": 8192, "mode": "steady"}) for gpu in range(2)]
    results += [_result(sweep_id, name, gpu, "membw", "gbps", 3010.0 + index + gpu, "GB/s",
                        {"memory": "device", "buffer_mib": 1024}) for gpu in range(2)]
    return {"host": name, "status": "ok", "error": None, "duration_s": 12.4, "facts": dict(FACTS),
            "results": results}


def _document(sweep_id: str, started_at: str, dtype: str = "bf16") -> dict[str, Any]:
    """A finished sweep of 8 hosts of 2 GPUs, one pair test and one finding."""
    hosts = [_host(sweep_id, f"node{index:03d}", index, dtype) for index in range(1, 9)]
    return {"schema": "gpudiag.sweep/1", "sweep_id": sweep_id, "started_at": started_at,
            "finished_at": started_at, "hosts": hosts,
            "links": [{"a": "node001", "b": "node002", "rail": 0, "backend": "tcp", "metric": "gbps",
                       "value": 9.41, "phase": "screen"}],
            "findings": [{"kind": "slow_gpu", "severity": "fail", "host": "node002", "peer": None, "gpu": 1,
                          "metric": "gemm.tflops", "value": 611.0, "reference": 742.0, "deficit_pct": 17.7,
                          "robust_z": -9.8, "confirmed": True, "evidence": "slow", "action": "drain"}],
            "summary": {"hosts_total": 8, "hosts_ok": 8, "findings": 1, "exit_code": 1}}


def _store_sweep(store: Store, sweep_id: str, days_ago: float, *, finished: bool = True,
                 dtype: str = "bf16") -> None:
    """Record a sweep as the sweep does: begun, hosts as they finish, then (if ``finished``) the document."""
    document = _document(sweep_id, _iso(days_ago), dtype)
    store.begin_sweep(sweep_id, document["started_at"], {"probes": ["gemm", "membw"]})
    for host in document["hosts"]:
        store.record_host(sweep_id, host)
    if finished:
        store.finish_sweep(sweep_id, document)


def _add_legacy_rows(path: Path, sweep_id: str) -> None:
    """A row of the ``results`` table, as a store of schema 1-2 kept a host's records."""
    with _db(path) as db:
        db.execute("INSERT INTO results (sweep_id, host, ordinal, probe, device, metric, value, status)"
                   " VALUES (?, 'node001', 99, 'pcie', 'cuda:0', 'h2d_gbps', 25.1, 'ok')", (sweep_id,))


def _rows(path: Path, sweep_id: str) -> dict[str, int]:
    with _db(path) as db:
        return {table: db.execute(f"SELECT count(*) FROM {table} WHERE sweep_id = ?", (sweep_id,)).fetchone()[0]
                for table in TABLES}


def _keys(path: Path) -> set[str]:
    with _db(path) as db:
        return {row[0] for row in db.execute("SELECT key FROM result_keys")}


def _on_disk(path: Path) -> int:
    """The store's bytes on disk: its file and its write-ahead log."""
    wal = Path(f"{path}-wal")
    return os.stat(path).st_size + (os.stat(wal).st_size if wal.exists() else 0)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _prune(path: Path, keep_days: int | None = None, keep: int | None = None, dry_run: bool = False) -> PruneResult:
    with open_for_prune(path, dry_run=dry_run) as store:
        return prune(store, keep_days, keep, NOW, dry_run)


@pytest.fixture
def six_sweeps(tmp_path: Path) -> Path:
    """Six finished sweeps a day apart (s1 oldest); s3 alone measured fp16 GEMMs; s2 has a legacy
    results row; a baseline ``keep`` was built from s1."""
    path = tmp_path / "gpudiag.db"
    with Store.open(path) as store:
        for number in range(1, 7):
            _store_sweep(store, f"s{number}", days_ago=7 - number, dtype="fp16" if number == 3 else "bf16")
        save_baseline(store, build_baseline("keep", baseline_samples(store, ["s1"])))
    _add_legacy_rows(path, "s2")
    return path


def test_keep_one_keeps_the_newest_and_the_baseline_source_and_empties_every_table_of_the_rest(six_sweeps):
    path = six_sweeps
    with Store.open(path, readonly=True) as store:
        kept_documents = {sweep_id: store.load_document(sweep_id) for sweep_id in ("s1", "s6")}
    assert all(count > 0 for count in _rows(path, "s2").values())  # every table holds rows of a pruned sweep
    assert any('"fp16"' in key for key in _keys(path))
    before = _on_disk(path)

    result = _prune(path, keep=1)

    assert result.pruned == ("s5", "s4", "s3", "s2")
    assert (result.kept_newest_n, result.kept_baseline_sources, result.kept) == (1, 1, 2)
    for sweep_id in result.pruned:
        assert _rows(path, sweep_id) == dict.fromkeys(TABLES, 0)
    assert not any('"fp16"' in key for key in _keys(path)) and result.keys_removed == 1  # only s3 used it
    after = _on_disk(path)
    assert result.size_before_bytes == before and result.size_after_bytes == after and after < before * 0.6
    with Store.open(path, readonly=True) as store:
        assert {sweep_id: store.load_document(sweep_id) for sweep_id in ("s1", "s6")} == kept_documents
        assert load_baseline(store, "keep").source_sweeps == ("s1",)
        assert [row["sweep_id"] for row in store.host_history("node002")] == ["s6", "s1"]
    with _db(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        assert db.execute("SELECT count(*) FROM figures WHERE key_id NOT IN (SELECT key_id FROM result_keys)"
                          ).fetchone()[0] == 0


def test_a_dry_run_says_what_would_go_and_changes_nothing(six_sweeps):
    digest = _digest(six_sweeps)
    dry = _prune(six_sweeps, keep=2, dry_run=True)
    assert dry.pruned == ("s4", "s3", "s2") and dry.dry_run and not dry.vacuumed
    assert dry.size_after_bytes == dry.size_before_bytes == _on_disk(six_sweeps)
    assert _digest(six_sweeps) == digest and _rows(six_sweeps, "s3")["hosts"] == 8
    assert _prune(six_sweeps, keep=2).pruned == dry.pruned


def test_keep_days_keeps_the_sweeps_started_within_them_and_both_rules_keep_their_union(six_sweeps):
    # s1..s6 started 6..1 days before NOW; s1 stays as the baseline's source.
    within = _prune(six_sweeps, keep_days=3, dry_run=True)
    assert within.pruned == ("s3", "s2") and within.kept_recent == 3 and within.kept_baseline_sources == 1
    union = _prune(six_sweeps, keep_days=2, keep=3, dry_run=True)
    assert union.pruned == ("s3", "s2") and (union.kept_newest_n, union.kept_recent) == (3, 0)
    union = _prune(six_sweeps, keep_days=4, keep=1, dry_run=True)
    assert union.pruned == ("s2",) and (union.kept_newest_n, union.kept_recent) == (1, 3)


def test_the_newest_sweep_stays_when_no_rule_keeps_it(tmp_path: Path):
    path = tmp_path / "gpudiag.db"
    with Store.open(path) as store:
        for number in range(1, 4):
            _store_sweep(store, f"old{number}", days_ago=100 - number)
    result = _prune(path, keep_days=30)
    assert result.pruned == ("old2", "old1") and result.kept_newest == 1 and result.kept == 1
    assert _rows(path, "old3")["hosts"] == 8


def test_a_running_sweep_stays_and_an_interrupted_leftover_goes(tmp_path: Path):
    path = tmp_path / "gpudiag.db"
    with Store.open(path) as store:
        _store_sweep(store, "leftover", days_ago=3, finished=False)
        _store_sweep(store, "old", days_ago=2)
        _store_sweep(store, "running", days_ago=0.1, finished=False)
        _store_sweep(store, "newest", days_ago=0.05)
    result = _prune(path, keep=1)
    assert result.pruned == ("old", "leftover") and result.kept_running == 1
    assert _rows(path, "running")["hosts"] == 8 and _rows(path, "leftover")["hosts"] == 0


def test_a_sweep_whose_start_cannot_be_read_is_kept(tmp_path: Path):
    path = tmp_path / "gpudiag.db"
    with Store.open(path) as store:
        _store_sweep(store, "a", days_ago=50)
        _store_sweep(store, "b", days_ago=40)
        _store_sweep(store, "c", days_ago=1)
    with _db(path) as db:
        db.execute("UPDATE sweeps SET started_at = '0000-00-00T00:00:00Z' WHERE sweep_id = 'b'")
    result = _prune(path, keep_days=10)
    assert result.pruned == ("a",) and result.kept_undated == 1 and result.kept_recent == 1


def test_nothing_to_prune_still_reclaims_free_pages(six_sweeps):
    with _db(six_sweeps) as db:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("DELETE FROM sweeps WHERE sweep_id IN ('s2', 's3', 's4')")  # the cascades free pages
    before = _on_disk(six_sweeps)
    result = _prune(six_sweeps, keep=5)
    assert result.pruned == () and result.vacuumed and result.vacuum_failure is None
    assert _on_disk(six_sweeps) < before
    again = _prune(six_sweeps, keep=5)
    assert not again.vacuumed and again.size_after_bytes == again.size_before_bytes


def test_a_baseline_whose_sources_cannot_be_read_stops_the_prune_before_anything_goes(six_sweeps):
    with _db(six_sweeps) as db:
        db.execute("UPDATE baselines SET source_sweeps_json = '[\"s1\"' WHERE name = 'keep'")
    digest = _digest(six_sweeps)
    with pytest.raises(StoreError, match="baseline 'keep' has an unreadable list of source sweeps"):
        _prune(six_sweeps, keep=1)
    assert _digest(six_sweeps) == digest


@pytest.mark.parametrize(("keep_days", "keep"), [(None, None), (0, None), (None, -2)])
def test_a_prune_needs_a_rule_of_at_least_one(six_sweeps, keep_days: int | None, keep: int | None):
    with pytest.raises(InputError, match="--keep"):
        _prune(six_sweeps, keep_days=keep_days, keep=keep)
    assert _rows(six_sweeps, "s2")["hosts"] == 8


def test_a_missing_store_is_refused_and_not_created(tmp_path: Path):
    path = tmp_path / "nowhere" / "gpudiag.db"
    with pytest.raises(StoreError, match="no store there yet"):
        open_for_prune(path, dry_run=False)
    assert not path.parent.exists()


def test_a_sweep_written_while_pruning_is_kept_whole(six_sweeps):
    """A second handle (as another gpudiag) records a sweep between two prunes' transactions."""
    with Store.open(six_sweeps) as writer, open_for_prune(six_sweeps, dry_run=False) as pruner:
        writer.begin_sweep("s7", _iso(0.01), {})
        for host in _document("s7", _iso(0.01))["hosts"][:4]:
            writer.record_host("s7", host)
            prune(pruner, None, 1, NOW, False)
        writer.finish_sweep("s7", _document("s7", _iso(0.01)))
    assert _rows(six_sweeps, "s7")["hosts"] == 8 and _rows(six_sweeps, "s7")["figures"] == 8 * 4
    with _db(six_sweeps) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert {row[0] for row in db.execute("SELECT sweep_id FROM sweeps")} == {"s1", "s7"}


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-21T10:15:00Z", datetime(2026, 11, 21, 10, 15, tzinfo=timezone.utc)),
    ("2026-11-21T10:15:00", datetime(2026, 11, 21, 10, 15, tzinfo=timezone.utc)),
    ("2026-11-21T12:15:00+02:00", datetime(2026, 11, 21, 10, 15, tzinfo=timezone.utc)),
    ("not a time", None), (None, None)])
def test_start_times_are_read_as_utc(text: object, expected: datetime | None):
    assert parse_time(text) == expected


def test_a_handle_that_knew_a_key_a_prune_removed_adds_it_again_when_it_records(six_sweeps):
    with Store.open(six_sweeps) as running:  # a long sweep's handle: it has looked up the fp16 key
        _store_sweep(running, "s7", days_ago=0.5, dtype="fp16")
        assert _prune(six_sweeps, keep=1).keys_removed == 0  # s7 (the newest) still uses it
        _store_sweep(running, "s8", days_ago=0.4)
        result = _prune(six_sweeps, keep=1)  # s7 goes, and the fp16 key with it
        assert "s7" in result.pruned and result.keys_removed == 1
        _store_sweep(running, "s9", days_ago=0.1, dtype="fp16")  # the handle must not use the stale id
        stored = running.load_document("s9")
        samples = list(running.results_for_baseline(["s9"]))
    assert stored["hosts"] and any('"fp16"' in sample.baseline_key for sample in samples)
    with _db(six_sweeps) as db:
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
