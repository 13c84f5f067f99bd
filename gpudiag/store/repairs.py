"""Repairs an operator records (``gpudiag history HOST --repaired "..."``), so that a host's
trend starts again after them (gpudiag.store.trend).

A repair names its host, optionally one GPU (by the index gpudiag shows, ``cuda:N``), what was
done, who recorded it and when. It also names the host's newest stored sweep at that moment:
the sweeps after that one come after the repair. Sweep start times have one-second resolution,
so a time alone could not tell a sweep that began in the same second as the repair. Repairs
are kept when sweeps are pruned: they are small, and a pruned sweep's place in the order is
kept in the repair itself (its id and start time).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import InputError
from .store import Store

# Operators name what they did; a paragraph belongs in the ticket the text may cite.
MAX_TEXT_CHARS = 500


@dataclass(frozen=True)
class Repair:
    """One recorded repair of ``host`` (``gpu`` None: the whole host), ``recorded_at`` (ISO 8601
    UTC) by ``operator`` (None when the environment names nobody). ``after_sweep_id`` and
    ``after_started_at``: the host's newest stored sweep when it was recorded."""

    host: str
    gpu: int | None
    text: str
    operator: str | None
    recorded_at: str
    after_sweep_id: str
    after_started_at: str

    def covers(self, gpu: int | None) -> bool:
        """Whether the repair restarts the trend of ``gpu`` (None: the median of the host's GPUs):
        a whole-host repair restarts every trend, a GPU's repair that GPU's alone."""
        return self.gpu is None or (gpu is not None and gpu == self.gpu)

    def precedes(self, sweep_id: str, started_at: str) -> bool:
        """Whether a sweep (its id and stored start time) came after the repair, in the order of
        the store (start time, then id)."""
        return (started_at, sweep_id) > (self.after_started_at, self.after_sweep_id)

    def describe(self) -> str:
        """``GPU 3: replaced GPU 3 (RMA 12345), by alice at 2026-11-21T10:15:00Z``."""
        what = "whole host" if self.gpu is None else f"GPU {self.gpu}"
        by = f" by {self.operator}" if self.operator else ""
        return f"{what}: {self.text},{by} at {self.recorded_at[:19]}Z"

    def to_dict(self) -> dict[str, Any]:
        """The repair as JSON (``history --json``)."""
        return {"host": self.host, "gpu": self.gpu, "text": self.text, "operator": self.operator,
                "recorded_at": self.recorded_at, "after_sweep_id": self.after_sweep_id,
                "after_started_at": self.after_started_at}


def operator_name(environ: Mapping[str, str]) -> str | None:
    """Who records a repair: ``$LOGNAME``/``$USER`` as login tools set them, else the password
    database's name for this process, else None."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if environ.get(name):
            return environ[name]
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no name in the environment and none in the password database
        return None


def record_repair(store: Store, host: str, text: str, gpu: int | None, operator: str | None,
                  now: datetime) -> Repair:
    """Store a repair of ``host`` (of its GPU ``gpu`` when given) made at ``now`` (aware).

    Raises InputError for empty text, a host no stored sweep has, or a GPU index the host's
    newest stored sweep does not have; StoreError when the store cannot be written."""
    words = " ".join(text.split())
    if not words:
        raise InputError('--repaired: say what was done, e.g. --repaired "replaced GPU 3 (RMA 12345)"')
    if len(words) > MAX_TEXT_CHARS:
        raise InputError(f"--repaired: {len(words)} characters; keep it under {MAX_TEXT_CHARS} "
                         "(cite the ticket for the rest)")
    with store.writing(f"recording a repair of {host}") as db:
        newest = db.execute("SELECT s.sweep_id, s.started_at, h.facts_json FROM hosts h JOIN sweeps s USING"
                            " (sweep_id) WHERE h.host = ? ORDER BY s.started_at DESC, s.sweep_id DESC LIMIT 1",
                            (host,)).fetchone()
        if newest is None:
            raise InputError(f"{host}: no stored sweep has this host, so there is nothing to restart; check the "
                             f"name (`gpudiag history` lists the sweeps) or sweep it first")
        _check_gpu(host, gpu, newest["facts_json"])
        repair = Repair(host=host, gpu=gpu, text=words, operator=operator,
                        recorded_at=now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                        after_sweep_id=newest["sweep_id"], after_started_at=newest["started_at"])
        db.execute("INSERT INTO repairs (host, gpu, recorded_at, operator, text, after_sweep_id, after_started_at)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?)", (repair.host, repair.gpu, repair.recorded_at, repair.operator,
                                                     repair.text, repair.after_sweep_id, repair.after_started_at))
    return repair


def _check_gpu(host: str, gpu: int | None, facts_json: str | None) -> None:
    """Raises InputError when the host's newest sweep says how many GPUs it has and ``gpu`` is not one."""
    if gpu is None or facts_json is None:
        return
    count = json.loads(facts_json).get("gpu_count")
    if isinstance(count, int) and not 0 <= gpu < count:
        raise InputError(f"--gpu {gpu}: {host} has {count} GPUs (0-{count - 1}) in its newest stored sweep")


def host_repairs(store: Store, host: str) -> list[Repair]:
    """The repairs recorded for ``host``, oldest first."""
    with store.reading(f"reading the repairs of {host}") as db:
        rows = db.execute("SELECT * FROM repairs WHERE host = ? ORDER BY after_started_at, after_sweep_id,"
                          " recorded_at, repair_id", (host,)).fetchall()
    return [Repair(host=row["host"], gpu=row["gpu"], text=row["text"], operator=row["operator"],
                   recorded_at=row["recorded_at"], after_sweep_id=row["after_sweep_id"],
                   after_started_at=row["after_started_at"]) for row in rows]


def repairs_by_host(store: Store, hosts: Iterable[str]) -> dict[str, list[Repair]]:
    """The repairs recorded for each of ``hosts`` that has any, oldest first (one read)."""
    wanted = set(hosts)
    with store.reading("reading the hosts' repairs") as db:
        rows = db.execute("SELECT * FROM repairs ORDER BY after_started_at, after_sweep_id, recorded_at,"
                          " repair_id").fetchall()
    found: dict[str, list[Repair]] = {}
    for row in rows:
        if row["host"] in wanted:
            found.setdefault(row["host"], []).append(
                Repair(host=row["host"], gpu=row["gpu"], text=row["text"], operator=row["operator"],
                       recorded_at=row["recorded_at"], after_sweep_id=row["after_sweep_id"],
                       after_started_at=row["after_started_at"]))
    return found
