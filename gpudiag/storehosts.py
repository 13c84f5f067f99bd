"""How the store keeps a host's records: small, and still queryable for baselines and history.

Since schema 3 a host's records are one zlib-compressed JSON array in ``hosts.results_z``
(about 12 KB for an 8-GPU node's 300 records, instead of some 240 KB as rows), and each compared
figure — an ok result with a baseline key (gpudiag.keys.result_key) — is also a row of
``figures``: the key's id (``result_keys``), the GPU's index and the value, which is all that a
baseline or a host's history reads. Sweeps stored by schema 1–2 keep their rows in ``results``;
every reader here takes both.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .keys import result_key
from .results import device_index

# zlib level 6: records are written once per sweep and read rarely; a smaller file wins.
_LEVEL = 6


@dataclass(frozen=True)
class StoredFigure:
    """One compared figure of a stored host: its baseline key, what it measured, the GPU's index
    (None for a host-level figure), its device and UUID where known, and the value in ``unit``."""

    key: str
    probe: str
    metric: str
    unit: str | None
    params: Mapping[str, Any]
    gpu: int | None
    device: str | None
    gpu_uuid: str | None
    value: float


def pack_results(results: Sequence[Mapping[str, Any]]) -> bytes:
    """The records as compressed JSON (what ``hosts.results_z`` holds)."""
    return zlib.compress(json.dumps(list(results), separators=(",", ":")).encode(), _LEVEL)


def unpack_results(packed: bytes) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads(zlib.decompress(packed))
    return records


class KeyIds:
    """The ``result_keys`` ids of baseline keys, looked up or added once each per store handle,
    and looked up again once another connection has written the file (a ``gpudiag store prune``
    may have removed keys no figure used)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._version: int | None = None

    def check(self, db: sqlite3.Connection) -> None:
        """Forget the ids when another connection committed since the last check."""
        version = int(db.execute("PRAGMA data_version").fetchone()[0])
        if version != self._version:
            self._ids.clear()
            self._version = version

    def id_of(self, db: sqlite3.Connection, key: str) -> int:
        known = self._ids.get(key)
        if known is not None:
            return known
        # No RETURNING: the SQLite of older distributions (3.26 on RHEL 8) lacks it.
        db.execute("INSERT OR IGNORE INTO result_keys (key) VALUES (?)", (key,))
        row = db.execute("SELECT key_id FROM result_keys WHERE key = ?", (key,)).fetchone()
        self._ids[key] = int(row[0])
        return self._ids[key]

    def forget(self) -> None:
        """Drop the cache (after a transaction that added keys was rolled back)."""
        self._ids.clear()


def insert_figures(db: sqlite3.Connection, keys: KeyIds, sweep_id: str, host: Mapping[str, Any],
                   results: Sequence[Mapping[str, Any]]) -> None:
    """A ``figures`` row for every ok result of ``host`` that has a baseline key."""
    keys.check(db)
    facts = host.get("facts") or {}
    rows = []
    for ordinal, result in enumerate(results):
        if result.get("status") != "ok" or result.get("value") is None:
            continue
        key = result_key(facts, result)
        if key is not None:
            rows.append((sweep_id, host["host"], ordinal, keys.id_of(db, key), device_index(result.get("device")),
                         result["value"]))
    db.executemany("INSERT INTO figures (sweep_id, host, ordinal, key_id, gpu, value) VALUES (?, ?, ?, ?, ?, ?)",
                   rows)


def host_results(db: sqlite3.Connection, row: sqlite3.Row, legacy: Mapping[str, list[dict[str, Any]]]) -> list[
        dict[str, Any]]:
    """A stored host's records: its packed array, else (a sweep stored before schema 3) its rows."""
    packed = row["results_z"]
    if packed is not None:
        return unpack_results(packed)
    return legacy.get(row["host"], [])


def figures(db: sqlite3.Connection, sweep_id: str, host: str | None = None) -> Iterator[tuple[str, StoredFigure]]:
    """(host, figure) for the compared figures of a sweep (one host's, or every host's in their
    stored order), from ``figures`` and from the ``results`` rows of a sweep stored before
    schema 3."""
    where, arguments = ("f.sweep_id = ?", [sweep_id]) if host is None else (
        "f.sweep_id = ? AND f.host = ?", [sweep_id, host])
    described: dict[str, tuple[str, str, str | None, Mapping[str, Any]]] = {}
    for row in db.execute(f"SELECT f.host, f.gpu, f.value, k.key FROM figures f JOIN result_keys k USING (key_id)"
                          f" JOIN hosts h USING (sweep_id, host) WHERE {where} ORDER BY h.ordinal, f.ordinal",
                          arguments):
        key = row["key"]
        if key not in described:
            data = json.loads(key)
            described[key] = (data["probe"], data["metric"], data.get("unit"), data.get("params") or {})
        probe, metric, unit, params = described[key]
        yield row["host"], StoredFigure(key, probe, metric, unit, params, row["gpu"], None, None, row["value"])
    where = where.replace("f.", "r.")
    for row in db.execute(f"SELECT r.* FROM results r JOIN hosts h USING (sweep_id, host) WHERE {where}"
                          " AND r.baseline_key IS NOT NULL AND r.value IS NOT NULL AND r.status = 'ok'"
                          " ORDER BY h.ordinal, r.ordinal", arguments):
        yield row["host"], StoredFigure(row["baseline_key"], row["probe"], row["metric"], row["unit"],
                                        json.loads(row["params_json"] or "{}"), device_index(row["device"]),
                                        row["device"], row["gpu_uuid"], row["value"])


class StoredHost(Mapping[str, Any]):
    """A host of a stored sweep as a document entry whose ``results`` are read from the store
    on each access (``hosts.results_z`` or, for a sweep stored before schema 3, its rows)."""

    def __init__(self, read: Callable[[str, str], list[dict[str, Any]]], sweep_id: str, host: str, status: str,
                 facts: Mapping[str, Any]) -> None:
        self._read = read
        self._entry = {"host": host, "status": status, "facts": facts, "sweep_id": sweep_id}

    def __getitem__(self, name: str) -> Any:
        if name == "results":
            return self._read(self._entry["sweep_id"], self._entry["host"])
        return self._entry[name]

    def __iter__(self) -> Iterator[str]:
        yield from self._entry
        yield "results"

    def __len__(self) -> int:
        return len(self._entry) + 1


def latest_ok(db: sqlite3.Connection, hosts: Iterable[str], before: str) -> list[tuple[str, str, str]]:
    """(host, sweep_id, facts_json) of each of ``hosts``' newest stored sweep, other than
    ``before``, in which it was ok; hosts never stored ok are left out."""
    wanted = set(hosts)
    rows = db.execute(
        "SELECT host, sweep_id, facts_json FROM (SELECT h.host, h.sweep_id, h.facts_json, row_number() OVER"
        " (PARTITION BY h.host ORDER BY s.started_at DESC, s.sweep_id DESC) AS newest FROM hosts h"
        " JOIN sweeps s USING (sweep_id) WHERE h.status = 'ok' AND h.sweep_id != ?) WHERE newest = 1", (before,))
    return [(row[0], row[1], row[2]) for row in rows if row[0] in wanted]


def one_host_results(db: sqlite3.Connection, sweep_id: str, host: str) -> list[dict[str, Any]]:
    """One stored host's records, whichever schema stored them."""
    row = db.execute("SELECT host, results_z FROM hosts WHERE sweep_id = ? AND host = ?", (sweep_id, host)).fetchone()
    if row is None:
        return []
    if row["results_z"] is not None:
        return unpack_results(row["results_z"])
    return [{**{name: item for name, item in dict(r).items() if name in _LEGACY_FIELDS},
             "params": json.loads(r["params_json"] or "{}"), "details": json.loads(r["details_json"] or "{}")}
            for r in db.execute("SELECT * FROM results WHERE sweep_id = ? AND host = ? ORDER BY ordinal",
                                (sweep_id, host))]


_LEGACY_FIELDS = ("probe", "device", "gpu_uuid", "metric", "value", "unit", "samples", "cv", "status", "reason")
