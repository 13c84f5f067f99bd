"""How far a stored sweep got: the hosts it planned, those it measured, and whether it was analysed.

A sweep stores its planned hosts when it begins, each host as it finishes, and its findings only
after the analysis (``Store.finish_sweep``). A sweep killed on the way (SIGKILL, a lost machine)
leaves hosts without findings: what it measured was never judged, so it is no "0 findings", and
never a baseline's source. A sweep an interrupt stopped was analysed, but on what finished only.
Both are unfinished; a sweep is finished when it was analysed, was not interrupted, and measured
every host it planned.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from ..findings import INTERRUPTED


@dataclass(frozen=True)
class Completeness:
    """One stored sweep's progress. ``planned_hosts``: how many hosts it set out to measure (None:
    stored before the store kept its plan); ``measured_hosts``: those that finished their probes,
    whatever their status (a host an interrupt stopped did not); ``analysed``: its analysis ran
    and its findings were stored; ``interrupted``: an interrupt stopped it, or it never finished;
    ``not_measured``: the planned hosts that did not finish, in planned order."""

    planned_hosts: int | None
    measured_hosts: int
    analysed: bool
    interrupted: bool
    not_measured: tuple[str, ...] = ()

    @property
    def finished(self) -> bool:
        """Analysed to its end, every planned host measured."""
        return (self.analysed and not self.interrupted
                and (self.planned_hosts is None or self.measured_hosts >= self.planned_hosts))

    def to_dict(self) -> dict[str, Any]:
        """The sweep document's ``completeness`` (docs/document.md)."""
        return {"planned_hosts": self.planned_hosts, "measured_hosts": self.measured_hosts,
                "analysed": self.analysed, "interrupted": self.interrupted, "not_measured": list(self.not_measured)}


def sweep_completeness(db: sqlite3.Connection, sweep: sqlite3.Row) -> Completeness:
    """The completeness of the stored sweep ``sweep`` (its row of ``sweeps``)."""
    sweep_id = sweep["sweep_id"]
    measured = [row[0] for row in db.execute(
        "SELECT host FROM hosts WHERE sweep_id = ? AND status != ? ORDER BY ordinal", (sweep_id, INTERRUPTED))]
    planned = _planned(sweep["planned_json"])
    done = set(measured)
    not_measured = tuple(host for host in planned if host not in done) if planned is not None else tuple(
        row[0] for row in db.execute("SELECT host FROM hosts WHERE sweep_id = ? AND status = ? ORDER BY ordinal",
                                     (sweep_id, INTERRUPTED)))
    analysed = bool(sweep["analysed"])
    interrupted = bool(sweep["interrupted"]) or sweep["finished_at"] is None
    return Completeness(None if planned is None else len(planned), len(measured), analysed, interrupted, not_measured)


def _planned(text: str | None) -> list[str] | None:
    """The stored planned hosts (None: a sweep stored before the store kept them)."""
    if text is None:
        return None
    planned = json.loads(text)
    return [str(host) for host in planned] if isinstance(planned, list) else None
