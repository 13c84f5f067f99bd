"""How the store's tables hold a sweep document's items: each table's document fields, one column
each (a field in JSON_FIELDS as JSON in ``<field>_json``, NULL when absent; the item's other
fields in its extra_json, or compressed in its extra_z where the table packs them: a link's
traced streams), and the item read back from its row."""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from ..schema.jsonout import dumps as strict_dumps

DOCUMENT_FIELDS = ("schema", "sweep_id", "started_at", "finished_at", "hosts", "links", "findings", "summary")
# Each table's document fields, one column each; a field in JSON_FIELDS is stored as JSON in
# ``<field>_json`` (NULL when absent). Other fields of an item are kept in its extra_json.
HOST_FIELDS = ("host", "status", "error", "duration_s", "facts")
RESULT_FIELDS = ("probe", "device", "gpu_uuid", "metric", "value", "unit", "samples", "cv", "status", "reason",
                 "params", "details")
LINK_FIELDS = ("a", "b", "rail", "backend", "metric", "value", "phase", "details")
FINDING_FIELDS = ("kind", "severity", "host", "peer", "gpu", "metric", "value", "reference", "deficit_pct",
                  "robust_z", "confirmed", "evidence", "action")
JSON_FIELDS = frozenset({"facts", "params", "details"})
BOOL_FIELDS = frozenset({"confirmed"})
# zlib level 6: a host's records (gpudiag.store.hosts) and a link's streams are written once per
# sweep and read rarely; a smaller file wins.
PACK_LEVEL = 6


def json_text(value: object) -> str:
    return strict_dumps(value, separators=(",", ":"))


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def extra_json(item: Mapping[str, Any], known: Sequence[str]) -> str | None:
    extra = {name: item[name] for name in item if name not in known}  # a lazy mapping reads only these
    return json_text(extra) if extra else None


def column(field: str) -> str:
    return f"{field}_json" if field in JSON_FIELDS else field


def packed_extra(item: Mapping[str, Any], known: Sequence[str]) -> bytes | None:
    """The item's fields beyond ``known`` as compressed JSON (an ``extra_z`` column), or None."""
    text = extra_json(item, known)
    return None if text is None else zlib.compress(text.encode(), PACK_LEVEL)


def insert_rows(db: sqlite3.Connection, table: str, fields: Sequence[str],
            rows: Sequence[tuple[dict[str, Any], Mapping[str, Any]]], ignored: Sequence[str] = (),
            packed: bool = False) -> None:
    """Insert one row per (fixed columns, item): the fixed columns, a column per field, and the
    item's other fields (not ``ignored``) as extra_json, or with ``packed`` compressed as extra_z.
    ``table`` and the names are this module's literals, never user input."""
    if not rows:
        return
    extra, extra_column = (packed_extra, "extra_z") if packed else (extra_json, "extra_json")
    columns = [*rows[0][0], *(column(field) for field in fields), extra_column]
    db.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                   [[*fixed.values(), *(encode(item, field) for field in fields),
                     extra(item, (*fields, *ignored))] for fixed, item in rows])


def encode(item: Mapping[str, Any], field: str) -> Any:
    if field in JSON_FIELDS:
        return json_text(item[field]) if field in item else None
    return bool(item.get(field)) if field in BOOL_FIELDS else item.get(field)


def decode(row: sqlite3.Row, fields: Sequence[str]) -> dict[str, Any]:
    """The item a row was stored from: a JSON field that was absent stays absent."""
    item: dict[str, Any] = {}
    for field in fields:
        value = row[column(field)]
        if field in JSON_FIELDS:
            if value is not None:
                item[field] = json.loads(value)
        else:
            item[field] = bool(value) if field in BOOL_FIELDS else value
    packed = row["extra_z"] if "extra_z" in row.keys() else None
    extra = loads(row["extra_json"]) if packed is None else json.loads(zlib.decompress(packed))
    return {**item, **(extra or {})}
