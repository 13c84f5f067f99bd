"""How the store keeps a host's records: small, and still queryable for baselines and history.

Since schema 3 a host's records are one zlib-compressed JSON array in ``hosts.results_z``
(about 12 KB for an 8-GPU node's 300 records, instead of some 240 KB as rows), and each compared
figure — an ok result with a baseline key (gpudiag.analysis.keys.result_key) — is also a row of
``figures``: the key's id (``result_keys``), the GPU's index and the value, which is all that a
baseline or a host's history reads. Sweeps stored by schema 1–2 keep their rows in ``results``;
every reader here takes both.

Since schema 5 a host's record that is unchanged since the host's *base* — its newest row stored
in full, in an earlier sweep (``hosts.base_sweep_id``) — is stored as that record's index in the
base: a node's identity, clocks, link widths and error counters are not stored again each sweep.
A base is always a full row, so a record is one lookup away, never a chain. A row with fewer than
half its records unchanged is stored in full and becomes the base of the host's later rows.
Before a base row is deleted (a host recorded again, a sweep pruned) its dependants are written
out again against the oldest of them (``release_bases``): nothing stored is lost.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.identity import HostGpus
from ..analysis.keys import COMPARED_PROBES, result_key
from ..errors import StoreError
from ..records import ProbeResult, device_index
from ..schema.jsonout import dumps as strict_dumps
from .rows import PACK_LEVEL


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


# A row is stored against its base when at least this share of its records is unchanged.
UNCHANGED_SHARE = 0.5


def pack_results(results: Sequence[Mapping[str, Any] | int]) -> bytes:
    """The records as compressed JSON (what ``hosts.results_z`` holds); an int stands for the
    base's record of that index."""
    return zlib.compress(strict_dumps(list(results), separators=(",", ":")).encode(), PACK_LEVEL)


def pack_against(results: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]]) -> bytes | None:
    """The records packed with each one equal to a record of ``base`` as that record's index, or
    None when fewer than UNCHANGED_SHARE of them are (the row is then better stored in full)."""
    if not results or not base:
        return None
    candidates: dict[tuple[Any, ...], list[int]] = {}
    for position, record in enumerate(base):
        candidates.setdefault(_identity(record), []).append(position)
    items = [_position(record, base, candidates.get(_identity(record), ())) for record in results]
    if sum(isinstance(item, int) for item in items) < UNCHANGED_SHARE * len(items):
        return None
    return pack_results(items)


def _identity(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return record.get("probe"), record.get("device"), record.get("metric"), record.get("gpu_uuid")


def _position(record: Mapping[str, Any], base: Sequence[Mapping[str, Any]],
              positions: Sequence[int]) -> Mapping[str, Any] | int:
    """The position of a base record equal to ``record`` (its value of the same type: 700 is not
    stored as 700.0), else the record itself."""
    for position in positions:
        if base[position] == record and type(base[position].get("value")) is type(record.get("value")):
            return position
    return record


def unpack_results(packed: bytes, base: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The records of ``packed``, each index replaced by the ``base`` record it names: that record
    itself, shared with ``base`` (a record named twice is copied the second time), so a caller that
    hands the records on gives a base of their own. Raises StoreError when an index names a record
    the base does not have."""
    items = json.loads(zlib.decompress(packed))
    if not any(isinstance(item, int) for item in items):
        return list(items)
    if base is None or any(isinstance(item, int) and not 0 <= item < len(base) for item in items):
        raise StoreError("a stored host's records name unchanged records of a base row that is missing or shorter; "
                         "the store was changed by something other than gpudiag; move it aside and start a new one")
    records, named = [], set()
    for item in items:
        if isinstance(item, int):
            records.append(copy.deepcopy(base[item]) if item in named else base[item])
            named.add(item)
        else:
            records.append(item)
    return records


def packed_for(db: sqlite3.Connection, sweep_id: str, host: str,
               results: Sequence[Mapping[str, Any]]) -> tuple[bytes, str | None]:
    """``results_z`` and ``base_sweep_id`` for a new row of ``host`` in ``sweep_id``: against the
    host's base (its newest row stored in full in another sweep) where enough of its records are
    unchanged, else in full (base None)."""
    row = db.execute(
        "SELECT h.sweep_id, h.results_z FROM hosts h JOIN sweeps s USING (sweep_id) WHERE h.host = ?"
        " AND h.sweep_id != ? AND h.base_sweep_id IS NULL AND h.results_z IS NOT NULL"
        " ORDER BY s.started_at DESC, s.sweep_id DESC LIMIT 1", (host, sweep_id)).fetchone()
    return _packed(results, None) if row is None else _packed(results, (row[0], unpack_results(row[1])))


def _packed(records: Sequence[Mapping[str, Any]],
            base: tuple[str, Sequence[Mapping[str, Any]]] | None) -> tuple[bytes, str | None]:
    """(``results_z``, ``base_sweep_id``) of ``records`` against ``base`` (its sweep id and
    records) where enough are unchanged, else in full."""
    packed = None if base is None else pack_against(records, base[1])
    return (pack_results(records), None) if packed is None or base is None else (packed, base[0])


def _base_records(db: sqlite3.Connection, base_sweep_id: str, host: str) -> list[dict[str, Any]] | None:
    """The records of the full row a host's row refers to; None when it is missing."""
    base = db.execute("SELECT results_z FROM hosts WHERE sweep_id = ? AND host = ? AND base_sweep_id IS NULL",
                      (base_sweep_id, host)).fetchone()
    return None if base is None or base[0] is None else unpack_results(base[0])


def _stored_records(db: sqlite3.Connection, packed: bytes, base_sweep_id: str | None,
                    host: str) -> list[dict[str, Any]]:
    return unpack_results(packed, None if base_sweep_id is None else _base_records(db, base_sweep_id, host))


def release_bases(db: sqlite3.Connection, sweep_ids: Sequence[str], host: str | None = None) -> int:
    """Before the rows of ``sweep_ids`` (only ``host``'s, when given) are deleted, write out again
    the rows of other sweeps stored against them: per host, the oldest in full (the new base) and
    the others against it. Returns how many rows were written."""
    doomed = set(sweep_ids)
    marks = ", ".join("?" * len(doomed))
    query = ("SELECT h.sweep_id, h.host, h.results_z, h.base_sweep_id FROM hosts h JOIN sweeps s USING (sweep_id)"
             f" WHERE h.base_sweep_id IN ({marks})")
    arguments: list[str] = sorted(doomed)
    if host is not None:
        query += " AND h.host = ?"
        arguments.append(host)
    # Each base is read once, however many rows refer to it; the records are only packed again here.
    bases: dict[tuple[str, str], list[dict[str, Any]] | None] = {}
    dependants: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}
    for row in db.execute(query + " ORDER BY h.host, s.started_at, h.sweep_id", arguments).fetchall():
        sweep_id, name, packed, base_sweep_id = row
        if sweep_id in doomed:
            continue
        if (base_sweep_id, name) not in bases:
            bases[base_sweep_id, name] = _base_records(db, base_sweep_id, name)
        dependants.setdefault(name, []).append((sweep_id, unpack_results(packed, bases[base_sweep_id, name])))
    for name, rows in dependants.items():
        (base_sweep, base), *later = rows
        for sweep_id, records in [(base_sweep, base), *later]:
            results_z, refers_to = _packed(records, None if sweep_id == base_sweep else (base_sweep, base))
            db.execute("UPDATE hosts SET results_z = ?, base_sweep_id = ? WHERE sweep_id = ? AND host = ?",
                       (results_z, refers_to, sweep_id, name))
    return sum(len(rows) for rows in dependants.values())


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
    """A ``figures`` row for every ok result of ``host`` that has a baseline key; a GPU's figure
    under NVML's index (gpudiag.analysis.identity: CUDA renumbers the GPUs after a lost one, and a
    history or baseline exclusion keyed by its number would follow the wrong GPU), None where it
    is unknown."""
    keys.check(db)
    facts = host.get("facts") or {}
    gpus = HostGpus(facts)
    rows = []
    for ordinal, result in enumerate(results):
        if result.get("status") != "ok" or result.get("value") is None or result.get("probe") not in COMPARED_PROBES:
            continue
        key = result_key(facts, ProbeResult.from_dict(result))
        if key is not None:
            gpu = gpus.of(result.get("device"), result.get("gpu_uuid")).nvml_index
            rows.append((sweep_id, host["host"], ordinal, keys.id_of(db, key), gpu, result["value"]))
    db.executemany("INSERT INTO figures (sweep_id, host, ordinal, key_id, gpu, value) VALUES (?, ?, ?, ?, ?, ?)",
                   rows)


def host_results(db: sqlite3.Connection, row: sqlite3.Row, legacy: Mapping[str, list[dict[str, Any]]]) -> list[
        dict[str, Any]]:
    """A stored host's records: its packed array, else (a sweep stored before schema 3) its rows."""
    packed = row["results_z"]
    if packed is not None:
        return _stored_records(db, packed, row["base_sweep_id"], row["host"])
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

    # -- as typed records (gpudiag.records.HostRecords), what the analysis reads ---------------

    @property
    def host(self) -> str:
        return str(self._entry["host"])

    @property
    def status(self) -> str:
        return str(self._entry["status"])

    @property
    def error(self) -> str | None:
        return None

    @property
    def facts(self) -> Mapping[str, Any]:
        return self._entry["facts"]

    @property
    def results(self) -> tuple[ProbeResult, ...]:
        """Its records, read from the store on each access."""
        return tuple(ProbeResult.from_dict(record) for record in self["results"])

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
    row = db.execute("SELECT host, results_z, base_sweep_id FROM hosts WHERE sweep_id = ? AND host = ?",
                     (sweep_id, host)).fetchone()
    if row is None:
        return []
    if row["results_z"] is not None:
        return _stored_records(db, row["results_z"], row["base_sweep_id"], host)
    return [{**{name: item for name, item in dict(r).items() if name in _LEGACY_FIELDS},
             "params": json.loads(r["params_json"] or "{}"), "details": json.loads(r["details_json"] or "{}")}
            for r in db.execute("SELECT * FROM results WHERE sweep_id = ? AND host = ? ORDER BY ordinal",
                                (sweep_id, host))]


_LEGACY_FIELDS = ("probe", "device", "gpu_uuid", "metric", "value", "unit", "samples", "cv", "status", "reason")
