"""How far a stored sweep got: the hosts it planned (stored at its start), those it measured and
whether it was analysed. A sweep killed before its analysis reads back as unfinished, is no
baseline source and names no GPU's owner; a store of schema 5 is upgraded keeping every sweep,
those that finished counting as analysed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from test_store import _record_as_it_runs, back_to_schema_7, sweep_document

from gpudiag.store.baselines import baseline_sources
from gpudiag.store.schema import MIGRATIONS, SCHEMA_VERSION
from gpudiag.store.store import Store

PLANNED = ["node001", "node002", "node003", "node004"]


def _killed(store: Store, sweep_id: str = "killed") -> None:
    """What a sweep killed after its first host finished leaves: its plan and that host."""
    store.begin_sweep(sweep_id, "2026-11-22T10:00:00Z", {"probes": ["gemm"]}, PLANNED)
    store.record_host(sweep_id, sweep_document()["hosts"][0])


def test_a_killed_sweep_reads_back_with_how_far_it_got(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:
        _killed(store)
    with Store.open(tmp_path / "s.db", readonly=True) as store:
        document = store.load_document("killed")
        (listed,) = store.list_sweeps()
    assert document["completeness"] == {"planned_hosts": 4, "measured_hosts": 1, "analysed": False,
                                        "interrupted": True, "not_measured": ["node002", "node003", "node004"]}
    assert listed["completeness"] == document["completeness"]


def test_a_finished_sweep_has_no_completeness_and_an_interrupted_one_is_listed_unfinished(tmp_path: Path) -> None:
    interrupted = sweep_document() | {"sweep_id": "stopped", "started_at": "2026-11-22T10:00:00Z",
                                      "summary": {**sweep_document()["summary"], "exit_code": 130}}
    with Store.open(tmp_path / "s.db") as store:
        _record_as_it_runs(store, sweep_document())
        _record_as_it_runs(store, interrupted)
        assert "completeness" not in store.load_document(sweep_document()["sweep_id"])
        listed = {sweep["sweep_id"]: sweep["completeness"] for sweep in store.list_sweeps()}
        sources, skipped = baseline_sources(store, [sweep_document()["sweep_id"], "stopped"])
    assert listed[sweep_document()["sweep_id"]] is None
    assert listed["stopped"]["analysed"] is True and listed["stopped"]["interrupted"] is True
    assert sources == [sweep_document()["sweep_id"]] and list(skipped) == ["stopped"]


def test_a_killed_sweep_is_no_baseline_source_and_names_no_gpus_owner(tmp_path: Path) -> None:
    claimed = {"host": "node009", "status": "ok", "error": None, "duration_s": 1.0,
               "facts": {"gpu_uuids": ["GPU-aa"]}, "results": []}
    with Store.open(tmp_path / "s.db") as store:
        _killed(store)
        store.record_host("killed", claimed)
        sources, skipped = baseline_sources(store, ["killed"])
        assert store.last_holder("GPU-aa", "now") is None  # never analysed: no impostor was set aside in it
        store.begin_sweep("done", "2026-11-23T10:00:00Z", {}, ["node009"])
        store.finish_sweep("done", {"started_at": "2026-11-23T10:00:00Z", "finished_at": "2026-11-23T10:01:00Z",
                                    "hosts": [claimed], "findings": [], "summary": {"exit_code": 0}})
        assert store.last_holder("GPU-aa", "now") == "node009"
    assert sources == [] and skipped["killed"].measured_hosts == 2 and not skipped["killed"].analysed


def _schema_5_store(path: Path) -> None:
    """A store as the gpudiag before schema 6 left it: one finished sweep, one that never finished."""
    with Store.open(path) as store:
        _record_as_it_runs(store, sweep_document())
        store.begin_sweep("killed", "2026-11-22T10:00:00Z", {})
        store.record_host("killed", sweep_document()["hosts"][0])
    connection = sqlite3.connect(path, isolation_level=None)
    # back to schema 5: the columns schema 6 added dropped, as that gpudiag had none
    back_to_schema_7(connection)
    connection.execute("DROP TABLE retests")  # schema 7's
    connection.execute("ALTER TABLE sweeps DROP COLUMN planned_json")
    connection.execute("ALTER TABLE sweeps DROP COLUMN analysed")
    connection.execute("PRAGMA user_version = 5")
    connection.close()


def test_a_schema_5_store_is_upgraded_keeping_every_sweep(tmp_path: Path) -> None:
    assert SCHEMA_VERSION >= 6 and "planned_json" in MIGRATIONS[5]
    path = tmp_path / "old.db"
    _schema_5_store(path)
    with Store.open(path) as store:
        finished = store.load_document(sweep_document()["sweep_id"])
        killed = store.load_document("killed")
        progress = {sweep["sweep_id"]: sweep["completeness"] for sweep in store.list_sweeps()}
    assert finished == sweep_document()  # byte for byte what was stored
    assert json.dumps(finished) == json.dumps(sweep_document())
    assert progress[sweep_document()["sweep_id"]] is None  # finished before: analysed
    assert killed["hosts"] == [sweep_document()["hosts"][0]]
    assert killed["completeness"] == {"planned_hosts": None, "measured_hosts": 1, "analysed": False,
                                      "interrupted": True, "not_measured": []}
