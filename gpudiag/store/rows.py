"""How the store's tables hold a sweep document's items: each table's document fields, one column
each (a field in JSON_FIELDS as JSON in ``<field>_json``, NULL when absent; the item's other
fields in its extra_json), and the item read back from its row."""

from __future__ import annotations

import json
import sqlite3
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


def json_text(value: object) -> str:
    return strict_dumps(value, separators=(",", ":"))


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def extra_json(item: Mapping[str, Any], known: Sequence[str]) -> str | None:
    extra = {name: item[name] for name in item if name not in known}  # a lazy mapping reads only these
    return json_text(extra) if extra else None


def column(field: str) -> str:
    return f"{field}_json" if field in JSON_FIELDS else field


def insert_rows(db: sqlite3.Connection, table: str, fields: Sequence[str],
            rows: Sequence[tuple[dict[str, Any], Mapping[str, Any]]], ignored: Sequence[str] = ()) -> None:
    """Insert one row per (fixed columns, item): the fixed columns, a column per field, and the
    item's other fields (not ``ignored``) as extra_json. ``table`` and the names are this module's
    literals, never user input."""
    if not rows:
        return
    columns = [*rows[0][0], *(column(field) for field in fields), "extra_json"]
    db.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                   [[*fixed.values(), *(encode(item, field) for field in fields),
                     extra_json(item, (*fields, *ignored))] for fixed, item in rows])


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
    return {**item, **(loads(row["extra_json"]) or {})}
