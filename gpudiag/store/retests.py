"""The figures a sweep re-tested for a trend (gpudiag.run.trendretest), as the store keeps them.

A GPU sliding against its siblings by a margin its first run cannot settle has its host's probe
run again, a few times, in the same sweep; the mean of those runs, for every GPU of the host (its
siblings too: the slide is a ratio to them), is the sweep's figure for that GPU in the host's
trends, and weighs as many runs as it is the mean of (gpudiag.store.trendfit.sibling_slopes).
Each figure is a row of ``retests``: the sweep, the host, the figure's baseline key (by its
``result_keys`` id, as ``figures``), the GPU's index, the mean and its number of runs. The first
pass's figures stay as they were: the sweep's comparison, its baseline and its tables use those.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .hosts import KeyIds


@dataclass(frozen=True)
class Retested:
    """One GPU's figure of one host's re-test: its baseline ``key``, the GPU's index, the mean of
    its ``runs`` runs."""

    key: str
    gpu: int
    value: float
    runs: int


# Per host: per baseline key, the runs and each GPU's mean.
HostRetests = dict[str, tuple[int, dict[int, float]]]


def insert_retests(db: sqlite3.Connection, keys: KeyIds, sweep_id: str, host: str,
                   figures: Iterable[Retested]) -> None:
    """Keep ``figures`` as the host's re-tested figures in the sweep (replacing any it had)."""
    db.execute("DELETE FROM retests WHERE sweep_id = ? AND host = ?", (sweep_id, host))
    db.executemany("INSERT INTO retests (sweep_id, host, key_id, gpu, value, runs) VALUES (?, ?, ?, ?, ?, ?)",
                   [(sweep_id, host, keys.id_of(db, figure.key), figure.gpu, figure.value, figure.runs)
                    for figure in figures])


def read_retests(db: sqlite3.Connection, sweep_id: str, host: str | None = None) -> dict[str, HostRetests]:
    """The re-tested figures of a sweep (one host's, or every host's), by host and key."""
    where, arguments = ("r.sweep_id = ?", [sweep_id]) if host is None else (
        "r.sweep_id = ? AND r.host = ?", [sweep_id, host])
    found: dict[str, HostRetests] = {}
    for row in db.execute(f"SELECT r.host, r.gpu, r.value, r.runs, k.key FROM retests r JOIN result_keys k"
                          f" USING (key_id) WHERE {where}", arguments):
        runs, per_gpu = found.setdefault(row["host"], {}).setdefault(row["key"], (int(row["runs"]), {}))
        per_gpu[int(row["gpu"])] = float(row["value"])
        if int(row["runs"]) < runs:
            found[row["host"]][row["key"]] = (int(row["runs"]), per_gpu)
    return found


def retest_entry(retests: Mapping[str, tuple[int, Mapping[int, float]]], key: str) -> dict[str, object] | None:
    """A figure's ``retest`` in Store.host_history (``runs`` and ``per_gpu``), None where the
    sweep did not re-test its key."""
    found = retests.get(key)
    if found is None:
        return None
    runs, per_gpu = found
    return {"runs": runs, "per_gpu": [[gpu, value] for gpu, value in sorted(per_gpu.items())]}
