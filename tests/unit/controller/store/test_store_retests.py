"""The figures a sweep re-tested for a trend (gpudiag.store.retests), in a real store file: kept
beside the first pass's figures, read back by ``host_history`` and ``recent_figures`` (and so by
the trends), gone with their sweep, and a store of schema 6 upgraded to hold them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from test_store import FACTS, GEMM_PARAMS, back_to_schema_7, sweep_document

from gpudiag.analysis.keys import result_key
from gpudiag.records import ProbeResult
from gpudiag.store.prune import delete_sweeps
from gpudiag.store.retests import Retested
from gpudiag.store.schema import SCHEMA_VERSION
from gpudiag.store.store import Store


def _gemm_key() -> str:
    result = ProbeResult.from_dict({"probe": "gemm", "device": "cuda:0", "metric": "tflops", "value": 1.0,
                                    "unit": "TFLOP/s", "status": "ok", "params": dict(GEMM_PARAMS)})
    key = result_key(FACTS, result)
    assert key is not None
    return key


def test_a_hosts_retest_is_read_beside_its_first_pass_and_goes_with_its_sweep(tmp_path: Path) -> None:
    document = sweep_document()
    sweep_id = document["sweep_id"]
    with Store.open(tmp_path / "s.db") as store:
        store.finish_sweep(sweep_id, document)
        store.record_retests(sweep_id, "node002", [Retested(_gemm_key(), 0, 741.5, 3),
                                                   Retested(_gemm_key(), 1, 690.0, 3)])
        (row,) = store.host_history("node002", limit=1)
        recent = store.recent_figures(None, 1)
        other = store.host_history("node001", limit=1)[0]
        # recorded again (a later trend re-test of the same sweep): replaced, not added
        store.record_retests(sweep_id, "node002", [Retested(_gemm_key(), 1, 700.0, 2)])
        again = store.host_history("node002", limit=1)[0]
        with store.writing("pruning") as db:
            delete_sweeps(db, [sweep_id])
            left = db.execute("SELECT COUNT(*) FROM retests").fetchone()[0]
    gemm = next(figure for figure in row["figures"] if figure["metric"] == "gemm.tflops")
    assert gemm["per_gpu"] == [[0, 742.0], [1, 611.0]]  # the first pass, as the sweep compared it
    assert gemm["retest"] == {"runs": 3, "per_gpu": [[0, 741.5], [1, 690.0]]}
    assert [figure for figure in recent["node002"][0]["figures"] if figure["metric"] == "gemm.tflops"] == [gemm]
    assert not any("retest" in figure for figure in other["figures"])  # node001 was not re-tested
    membw = next(figure for figure in row["figures"] if figure["metric"] == "membw.gbps")
    assert "retest" not in membw
    assert next(f for f in again["figures"] if f["metric"] == "gemm.tflops")["retest"] == {
        "runs": 2, "per_gpu": [[1, 700.0]]}
    assert left == 0


def test_a_schema_6_store_is_upgraded_to_keep_retests(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    document = sweep_document()
    with Store.open(path) as store:
        store.finish_sweep(document["sweep_id"], document)
    connection = sqlite3.connect(path, isolation_level=None)
    back_to_schema_7(connection)
    connection.execute("DROP TABLE retests")  # as the gpudiag of schema 6 left it
    connection.execute("PRAGMA user_version = 6")
    connection.close()
    with Store.open(path) as store:
        assert store.load_document(document["sweep_id"]) == document
        store.record_retests(document["sweep_id"], "node001", [Retested(_gemm_key(), 0, 740.0, 3)])
        (row,) = store.host_history("node001", limit=1)
    assert SCHEMA_VERSION >= 7
    assert next(f for f in row["figures"] if f["metric"] == "gemm.tflops")["retest"]["runs"] == 3
