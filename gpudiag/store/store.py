"""The local store: every sweep with its hosts, results, links and findings, and the named fleet
baselines, in one SQLite file (stdlib sqlite3) on the controller's disk.

Hosts are written as they finish (``record_host``, from the sweep's worker threads), so an
interrupted sweep keeps what it gathered. A file this gpudiag cannot use (a newer schema, not
SQLite, corrupt, unreadable, another program's database) raises StoreError and is left exactly as
it was: never migrated, truncated, replaced or deleted.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import StoreError
from ..exitcodes import ExitCode
from ..findings import SWEEP_SCHEMA, Kind
from .completeness import Completeness, sweep_completeness
from .historyrows import grouped_figures, history_row
from .hosts import (
    KeyIds,
    StoredFigure,
    StoredHost,
    figures,
    host_results,
    insert_figures,
    latest_ok,
    one_host_results,
    packed_for,
    release_bases,
)
from .retests import Retested, insert_retests, read_retests
from .rows import (
    DOCUMENT_FIELDS,
    FINDING_FIELDS,
    HOST_FIELDS,
    LINK_FIELDS,
    RESULT_FIELDS,
    decode,
    extra_json,
    insert_rows,
    json_text,
    loads,
)
from .schema import (
    SCHEMA_VERSION,
    checked_connection,
    make_folder,
    migrate,
    refuse_unusable,
    refuse_upgrade_without_write_access,
    sqlite_errors,
    transaction,
)

LATEST_SHOWN = 5
# Findings about the link between two hosts (or a pair that could not be tested): they say
# nothing about either host's GPUs.
LINK_KINDS = frozenset({Kind.SLOW_LINK, Kind.SLOW_NIC, Kind.LINK_ERROR})
# Store.recent_figures reads this many hosts or fewer host by host, more with every host's rows.
HOSTS_READ_ALONE = 256


@dataclass(frozen=True)
class BaselineSample:
    """One stored measurement that may go into a baseline (``value`` in ``unit``); ``gpu`` is the
    GPU's UUID, or its device name where the UUID is unknown. A link figure (probe ``link``) is
    a pair's: ``host`` and ``peer`` are its ends, and ``gpu`` is None."""

    sweep_id: str
    baseline_key: str
    probe: str
    metric: str
    value: float
    unit: str | None
    host: str
    gpu: str | None
    peer: str | None = None


@dataclass(frozen=True)
class StoredLinks:
    """One stored sweep's ``links[]`` items and its findings (``kind``, ``host``, ``peer``,
    ``metric``), in their stored order: what a baseline of link figures is built from."""

    sweep_id: str
    links: tuple[dict[str, Any], ...]
    findings: tuple[dict[str, Any], ...]


def default_store_path(environ: Mapping[str, str]) -> Path:
    """``$XDG_DATA_HOME/gpudiag/gpudiag.db``, else ``~/.local/share/gpudiag/gpudiag.db`` (a relative
    XDG_DATA_HOME is ignored, as the XDG spec says)."""
    data_home = environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data_home):
        home = environ.get("HOME") or str(Path.home())
        data_home = os.path.join(home, ".local", "share")
    return Path(data_home) / "gpudiag" / "gpudiag.db"


class Store:
    """An open store. Safe to share between threads (one connection behind a lock); close it, or
    use it as a context manager. Every method raises StoreError naming the file and the fix when
    SQLite fails."""

    def __init__(self, connection: sqlite3.Connection, path: Path, readonly: bool) -> None:
        self.path = path
        self.readonly = readonly
        self._connection = connection
        self._lock = threading.RLock()
        self._keys = KeyIds()

    @classmethod
    def open(cls, path: Path | str, *, readonly: bool = False) -> Store:
        """Open the store at ``path``, upgrading an older schema in place.

        Writable: creates the file and its folder when missing. Read-only: never creates anything
        (a missing file is a StoreError). Raises StoreError for a file of a newer schema, a file
        that is not a gpudiag store, a corrupt or unreadable one, all left untouched.
        """
        store_path = Path(path).expanduser()
        refuse_unusable(store_path, readonly)
        if readonly:
            with sqlite_errors(store_path, "opening the store"):
                connection, version = checked_connection(store_path, readonly=True)
                if version < SCHEMA_VERSION:  # an older store: upgrade it in place, then read it
                    connection.close()
                    refuse_upgrade_without_write_access(store_path, version)
                    cls.open(store_path).close()
                    connection, _ = checked_connection(store_path, readonly=True)
            return cls(connection, store_path, readonly=True)
        make_folder(store_path)
        with sqlite_errors(store_path, "opening the store"):
            connection, _ = checked_connection(store_path, readonly=False)
            try:
                connection.execute("PRAGMA journal_mode = WAL")
                migrate(connection)
            except sqlite3.Error:
                connection.close()
                raise
        return cls(connection, store_path, readonly=False)

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        with self._lock:
            self._connection.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # -- writing a sweep, as it runs ---------------------------------------------------------------

    def begin_sweep(self, sweep_id: str, started_at: str, options: Mapping[str, Any],
                    planned: Sequence[str] | None = None) -> None:
        """Store a new sweep (``started_at`` ISO 8601 UTC; ``options`` as JSON; ``planned``: the
        hosts it sets out to measure, so that a sweep killed before its end says how far it got:
        gpudiag.store.completeness). Raises StoreError when the id is already stored."""
        with self.writing(f"beginning sweep {sweep_id}") as db:
            if _sweep_row(db, sweep_id) is not None:
                raise StoreError(f"{self.path}: sweep {sweep_id} is already stored; a sweep id is used once")
            db.execute("INSERT INTO sweeps (sweep_id, started_at, options_json, document_schema, planned_json)"
                       " VALUES (?, ?, ?, ?, ?)", (sweep_id, started_at, json_text(options), SWEEP_SCHEMA,
                                                   None if planned is None else json_text(list(planned))))

    def record_host(self, sweep_id: str, host: Mapping[str, Any]) -> bool:
        """Store one host's outcome (HostOutcome.to_dict(), with its results) in one transaction,
        replacing an earlier record of the same host. Returns False, storing nothing, when the
        sweep is already finished (its document is final). Raises StoreError for an unknown sweep."""
        with self.writing(f"recording host {host['host']} of sweep {sweep_id}") as db:
            if self._begun_sweep(db, sweep_id)["finished_at"] is not None:
                return False
            known = db.execute("SELECT ordinal FROM hosts WHERE sweep_id = ? AND host = ?",
                               (sweep_id, host["host"])).fetchone()
            ordinal = known[0] if known else _next_ordinal(db, "hosts", sweep_id)
            release_bases(db, [sweep_id], host["host"])  # another sweep's row may keep only what changed since
            db.execute("DELETE FROM hosts WHERE sweep_id = ? AND host = ?", (sweep_id, host["host"]))
            self._insert_host(db, sweep_id, ordinal, host)
        return True

    def record_links(self, sweep_id: str, links: Sequence[Mapping[str, Any]]) -> None:
        """Append link results (the document's ``links[]`` items) after those already stored."""
        with self.writing(f"recording links of sweep {sweep_id}") as db:
            self._begun_sweep(db, sweep_id)
            _insert_links(db, sweep_id, _next_ordinal(db, "links", sweep_id), links)

    def record_findings(self, sweep_id: str, findings: Sequence[Mapping[str, Any]]) -> None:
        """Replace the sweep's findings with ``findings`` (Finding.to_dict() items), in order."""
        with self.writing(f"recording findings of sweep {sweep_id}") as db:
            self._begun_sweep(db, sweep_id)
            _replace_findings(db, sweep_id, findings)

    def finish_sweep(self, sweep_id: str, document: Mapping[str, Any]) -> None:
        """Store the final sweep document: finished_at, summary, exit code, interruption and any
        extra top-level fields (e.g. ``impact``). Its ``hosts`` (any Mapping: a HostOutcome too)
        complete what was recorded as hosts finished: a host not recorded yet is added with its
        records; a recorded one keeps its records, and its status and error are updated where
        they changed (so 10,000 recorded hosts are not written twice). Its ``links`` and
        ``findings`` replace what was recorded, in its order. A sweep not begun is begun from the
        document."""
        with self.writing(f"finishing sweep {sweep_id}") as db:
            if _sweep_row(db, sweep_id) is None:
                db.execute("INSERT INTO sweeps (sweep_id, started_at, document_schema) VALUES (?, ?, ?)",
                           (sweep_id, document["started_at"], SWEEP_SCHEMA))
            if "hosts" in document:
                self._complete_hosts(db, sweep_id, document["hosts"])
            if "links" in document:
                db.execute("DELETE FROM links WHERE sweep_id = ?", (sweep_id,))
                _insert_links(db, sweep_id, 0, document["links"])
            if "findings" in document:
                _replace_findings(db, sweep_id, document["findings"])
            _update_finished(db, sweep_id, document)

    def _complete_hosts(self, db: sqlite3.Connection, sweep_id: str, hosts: Sequence[Mapping[str, Any]]) -> None:
        recorded = {row["host"]: tuple(row) for row in db.execute(
            "SELECT host, ordinal, status, error FROM hosts WHERE sweep_id = ?", (sweep_id,))}
        # The document's order is the hosts' order; recorded hosts came in the order they finished.
        db.execute("UPDATE hosts SET ordinal = -1 - ordinal WHERE sweep_id = ?", (sweep_id,))
        for ordinal, host in enumerate(hosts):
            name = host["host"]
            known = recorded.pop(name, None)
            if known is None:
                self._insert_host(db, sweep_id, ordinal, host)
            else:
                db.execute("UPDATE hosts SET ordinal = ?, status = ?, error = ? WHERE sweep_id = ? AND host = ?",
                           (ordinal, host["status"], host.get("error"), sweep_id, name))
        for extra, name in enumerate(sorted(recorded, key=lambda name: recorded[name][1]), start=len(hosts)):
            db.execute("UPDATE hosts SET ordinal = ? WHERE sweep_id = ? AND host = ?", (extra, sweep_id, name))

    def _insert_host(self, db: sqlite3.Connection, sweep_id: str, ordinal: int, host: Mapping[str, Any]) -> None:
        """The host's row, its records packed (gpudiag.store.hosts) and its compared figures."""
        results = host.get("results") or []
        packed, base_sweep_id = packed_for(db, sweep_id, host["host"], results)
        insert_rows(db, "hosts", HOST_FIELDS, [({"sweep_id": sweep_id, "ordinal": ordinal, "results_z": packed,
                                              "base_sweep_id": base_sweep_id}, host)],
                ignored=("results",))
        try:
            insert_figures(db, self._keys, sweep_id, host, results)
        except sqlite3.Error:
            self._keys.forget()  # key ids added in this transaction are rolled back with it
            raise

    # -- reading sweeps ------------------------------------------------------------------------------

    def load_document(self, sweep_id: str) -> dict[str, Any]:
        """The sweep document as stored: hosts in their recorded order, results, links, findings,
        summary and extra fields. A sweep that never finished has ``finished_at`` None,
        ``"interrupted": True``, a summary of what was recorded and ``completeness``: how far it got
        (gpudiag.store.completeness). Raises StoreError for an unknown id (naming the latest ones)."""
        with self.reading(f"reading sweep {sweep_id}") as db:
            sweep = self._known_sweep(db, sweep_id)
            hosts = _load_hosts(db, sweep_id)
            links = [decode(row, LINK_FIELDS) for row in db.execute(
                "SELECT * FROM links WHERE sweep_id = ? ORDER BY ordinal", (sweep_id,))]
            findings = [_hostless(decode(row, FINDING_FIELDS)) for row in db.execute(
                "SELECT * FROM findings WHERE sweep_id = ? ORDER BY ordinal", (sweep_id,))]
            completeness = sweep_completeness(db, sweep)
        document = _document(sweep, hosts, links, findings)
        # A finished document says itself how it ended; a killed sweep's never got to say it.
        return document if sweep["finished_at"] is not None else {**document, "completeness": completeness.to_dict()}

    def completeness(self, sweep_id: str) -> Completeness:
        """How far the stored sweep got (gpudiag.store.completeness). Raises StoreError for an
        unknown id."""
        with self.reading(f"reading sweep {sweep_id}") as db:
            return sweep_completeness(db, self._known_sweep(db, sweep_id))

    def latest_sweep_id(self) -> str | None:
        """The id of the sweep started last, or None when none is stored."""
        with self.reading("finding the latest sweep") as db:
            ids = _latest_ids(db, 1)
        return ids[0] if ids else None

    def list_sweeps(self, limit: int = 20) -> list[dict[str, Any]]:
        """The last ``limit`` sweeps, newest first: id, start and finish times, interrupted, exit
        code, options, the counts of hosts stored, hosts ok and findings, ``links`` (pair tests
        stored, one per rail), ``links_failed`` (of them, those with no figure),
        ``slowest_link``: the test with the lowest figure (a, b, backend, rail, value in Gbit/s,
        whatever its group), or None, and ``completeness`` (None for a finished sweep: see
        gpudiag.store.completeness)."""
        with self.reading("listing sweeps") as db:
            rows = db.execute(
                "SELECT s.*, (SELECT count(*) FROM hosts h WHERE h.sweep_id = s.sweep_id) AS hosts_total,"
                " (SELECT count(*) FROM hosts h WHERE h.sweep_id = s.sweep_id AND h.status = 'ok') AS hosts_ok,"
                " (SELECT count(*) FROM findings f WHERE f.sweep_id = s.sweep_id) AS findings"
                " FROM sweeps s ORDER BY s.started_at DESC, s.sweep_id DESC LIMIT ?", (limit,)).fetchall()
            links = _link_counts(db, limit)
            progress = {row["sweep_id"]: sweep_completeness(db, row) for row in rows}
        return [{"sweep_id": row["sweep_id"], "started_at": row["started_at"], "finished_at": row["finished_at"],
                 "interrupted": bool(row["interrupted"]) or row["finished_at"] is None,
                 "exit_code": row["exit_code"], "options": json.loads(row["options_json"]),
                 "hosts_total": row["hosts_total"], "hosts_ok": row["hosts_ok"], "findings": row["findings"],
                 **links.get(row["sweep_id"], {"links": 0, "links_failed": 0, "slowest_link": None}),
                 "completeness": None if progress[row["sweep_id"]].finished else progress[row["sweep_id"]].to_dict()}
                for row in rows]

    def host_history(self, host: str, limit: int = 20) -> list[dict[str, Any]]:
        """The host in its last ``limit`` stored sweeps, newest first: sweep_id, started_at, status,
        error; ``findings``: the sweep's findings naming the host (``host_findings``), most costly
        first; ``figures``: per compared metric (``probe.metric``) and parameters, the count, min,
        median and max of its ok values of the first pass over the host's GPUs, in their unit, and
        ``per_gpu``: each value as ``[GPU index, value]`` (the index None for a figure of no GPU);
        ``judged``: the GPU figures the sweep's findings judged at another value (after a re-test:
        ``judged_values``; ``judged_figures`` applies them); ``links``: the sweep's ``links[]``
        items that the host is an end of, in their stored order; and ``analysed``: whether the
        sweep's analysis ran (a killed sweep measured the host but judged nothing)."""
        with self.reading(f"reading the history of {host}") as db:
            rows = db.execute(
                "SELECT s.sweep_id, s.started_at, s.analysed, h.status, h.error FROM hosts h JOIN sweeps s"
                " USING (sweep_id)"
                " WHERE h.host = ? ORDER BY s.started_at DESC, s.sweep_id DESC LIMIT ?", (host, limit)).fetchall()
            return [history_row(db, row, host) for row in rows]

    def recent_figures(self, hosts: Iterable[str] | None, sweeps: int) -> dict[str, list[dict[str, Any]]]:
        """Each of ``hosts``' (None: every host's) figures in the store's last ``sweeps`` sweeps
        (by start time, the sweep being written among them) where the host has any, newest first,
        as ``host_history`` gives them: sweep_id, started_at and ``figures`` (the first pass's),
        nothing else. One read per sweep for every host at once (what a sweep's trends need,
        gpudiag.store.trend); a host with no figure in any is absent."""
        wanted = None if hosts is None else set(hosts)
        # A few hosts are read host by host (by the figures' key); many, with every host's rows.
        alone = sorted(wanted) if wanted is not None and len(wanted) <= HOSTS_READ_ALONE else None
        found: dict[str, list[dict[str, Any]]] = {}
        with self.reading("reading the hosts' recent figures") as db:
            recent = db.execute("SELECT sweep_id, started_at FROM sweeps ORDER BY started_at DESC, sweep_id DESC"
                                " LIMIT ?", (sweeps,)).fetchall()
            for sweep in recent:
                retests = read_retests(db, sweep["sweep_id"])
                groups: dict[str, dict[str, list[StoredFigure]]] = {}
                read = (figures(db, sweep["sweep_id"]) if alone is None
                        else (pair for host in alone for pair in figures(db, sweep["sweep_id"], host)))
                for host, figure in read:
                    if wanted is None or host in wanted:
                        groups.setdefault(host, {}).setdefault(figure.key, []).append(figure)
                for host, keyed in groups.items():
                    found.setdefault(host, []).append({"sweep_id": sweep["sweep_id"], "started_at": sweep["started_at"],
                                                       "figures": grouped_figures(keyed.values(),
                                                                                  retests.get(host))})
        return found

    def record_retests(self, sweep_id: str, host: str, figures: Iterable[Retested]) -> None:
        """Keep the figures the sweep re-tested on ``host`` for its trends (gpudiag.store.retests),
        replacing any it kept; the host must be recorded in the sweep."""
        with self.writing(f"recording the re-test of host {host} in sweep {sweep_id}") as db:
            self._known_sweep(db, sweep_id)
            insert_retests(db, self._keys, sweep_id, host, figures)

    def recent_hosts(self, sweeps: int) -> list[str]:
        """The hosts that answered in any of the store's last ``sweeps`` sweeps, by name."""
        with self.reading("listing the hosts of the recent sweeps") as db:
            return [row[0] for row in db.execute(
                "SELECT DISTINCT host FROM hosts WHERE status = 'ok' AND sweep_id IN (SELECT sweep_id FROM sweeps"
                " ORDER BY started_at DESC, sweep_id DESC LIMIT ?) ORDER BY host", (sweeps,))]

    def last_holder(self, gpu_uuid: str, besides: str, sweeps: int = 20) -> str | None:
        """The host whose facts named GPU ``gpu_uuid`` in the newest of the last ``sweeps``
        stored sweeps but ``besides`` (the sweep asking) where an ok host named it; None when none
        did. Only analysed sweeps count: a sweep killed before its analysis never set impostors
        aside. (Asked only where two hosts of a sweep claim one GPU: it reads those sweeps' facts.)"""
        with self.reading(f"finding which host had GPU {gpu_uuid}") as db:
            row = db.execute(
                "SELECT h.host FROM hosts h JOIN sweeps s USING (sweep_id) WHERE h.status = 'ok' AND s.sweep_id IN "
                "(SELECT sweep_id FROM sweeps WHERE sweep_id != ? AND analysed = 1"
                " ORDER BY started_at DESC, sweep_id DESC LIMIT ?) AND instr(h.facts_json, ?) > 0"
                " ORDER BY s.started_at DESC, s.sweep_id DESC LIMIT 1",
                (besides, sweeps, json.dumps(gpu_uuid))).fetchone()
        return None if row is None else str(row["host"])

    def previous_hosts(self, hosts: Iterable[str], before: str) -> list[StoredHost]:
        """Each of ``hosts`` as it was in its newest stored sweep other than ``before`` in which it
        was ok (for counters judged on their growth since then); its records are read from the
        store only when asked for, one host at a time."""
        with self.reading("finding the hosts' previous sweeps") as db:
            found = latest_ok(db, hosts, before)
        return [StoredHost(self._host_results, sweep_id, host, "ok", loads(facts) or {})
                for host, sweep_id, facts in found]

    def _host_results(self, sweep_id: str, host: str) -> list[dict[str, Any]]:
        with self.reading(f"reading host {host} of sweep {sweep_id}") as db:
            return one_host_results(db, sweep_id, host)

    def results_for_baseline(self, sweep_ids: Sequence[str]) -> Iterator[BaselineSample]:
        """The compared, ok results of the given sweeps that may go into a baseline: leaving out
        hosts that were not ok, and hosts and GPUs with a finding in that sweep (a finding with a
        GPU leaves out that GPU; one without, the whole host; link findings leave out nothing).
        Raises StoreError at once for an unknown sweep id."""
        ids = list(dict.fromkeys(sweep_ids))
        with self.reading("checking the sweeps") as db:
            for sweep_id in ids:
                self._known_sweep(db, sweep_id)
        return (sample for sweep_id in ids for sample in self._baseline_samples(sweep_id))

    def links_for_baseline(self, sweep_ids: Sequence[str]) -> Iterator[StoredLinks]:
        """The link entries and findings of each given sweep (each once, in the order given), for
        a baseline of link figures; which of them may go in is the caller's rule
        (gpudiag.store.baselines.link_samples). Raises StoreError at once for an unknown sweep id."""
        ids = list(dict.fromkeys(sweep_ids))
        with self.reading("checking the sweeps") as db:
            for sweep_id in ids:
                self._known_sweep(db, sweep_id)
        return (self._stored_links(sweep_id) for sweep_id in ids)

    # -- for gpudiag's own modules, and helpers --------------------------------------------------

    @contextmanager
    def writing(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock; SQLite errors become StoreError saying what the
        store was ``doing``. For gpudiag's own modules (e.g. baselines), which own their SQL."""
        if self.readonly:
            raise StoreError(f"{self.path}: the store was opened read-only, so it cannot be written ({doing})")
        with self._lock, sqlite_errors(self.path, doing), transaction(self._connection):
            yield self._connection

    @contextmanager
    def reading(self, doing: str) -> Iterator[sqlite3.Connection]:
        """The connection under the lock, for reads; SQLite errors become StoreError."""
        with self._lock, sqlite_errors(self.path, doing):
            yield self._connection

    def _begun_sweep(self, db: sqlite3.Connection, sweep_id: str) -> sqlite3.Row:
        row = _sweep_row(db, sweep_id)
        if row is None:
            raise StoreError(f"{self.path}: sweep {sweep_id} was not begun in this store; call begin_sweep first")
        return row

    def _known_sweep(self, db: sqlite3.Connection, sweep_id: str) -> sqlite3.Row:
        row = _sweep_row(db, sweep_id)
        if row is None:
            latest = _latest_ids(db, LATEST_SHOWN)
            known = f"the latest are {', '.join(latest)}" if latest else "the store holds no sweeps yet"
            raise StoreError(f"{self.path}: no sweep {sweep_id!r} is stored; {known}")
        return row

    def _stored_links(self, sweep_id: str) -> StoredLinks:
        with self.reading(f"reading the links of sweep {sweep_id}") as db:
            links = tuple(decode(row, LINK_FIELDS) for row in db.execute(
                "SELECT * FROM links WHERE sweep_id = ? ORDER BY ordinal", (sweep_id,)))
            findings = tuple(dict(row) for row in db.execute(
                "SELECT kind, host, peer, metric FROM findings WHERE sweep_id = ? ORDER BY ordinal", (sweep_id,)))
        return StoredLinks(sweep_id, links, findings)

    def _baseline_samples(self, sweep_id: str) -> list[BaselineSample]:
        with self.reading(f"reading sweep {sweep_id}") as db:
            findings = db.execute("SELECT kind, host, gpu FROM findings WHERE sweep_id = ?", (sweep_id,)).fetchall()
            ok_hosts = {row[0] for row in db.execute(
                "SELECT host FROM hosts WHERE sweep_id = ? AND status = 'ok'", (sweep_id,))}
            stored = list(figures(db, sweep_id))
        hosts_out, gpus_out = _excluded(findings)
        return [BaselineSample(sweep_id=sweep_id, baseline_key=figure.key, probe=figure.probe, metric=figure.metric,
                               value=figure.value, unit=figure.unit, host=host,
                               gpu=figure.gpu_uuid or figure.device or (None if figure.gpu is None
                                                                        else f"cuda:{figure.gpu}"))
                for host, figure in stored
                if host in ok_hosts and host not in hosts_out and (host, figure.gpu) not in gpus_out]


# -- rows --------------------------------------------------------------------------------------------


def _sweep_row(db: sqlite3.Connection, sweep_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = db.execute("SELECT * FROM sweeps WHERE sweep_id = ?", (sweep_id,)).fetchone()
    return row


def _latest_ids(db: sqlite3.Connection, limit: int) -> list[str]:
    return [row[0] for row in db.execute(
        "SELECT sweep_id FROM sweeps ORDER BY started_at DESC, sweep_id DESC LIMIT ?", (limit,))]


def _next_ordinal(db: sqlite3.Connection, table: str, sweep_id: str) -> int:
    # ``table`` is one of this module's literals, never user input.
    return int(db.execute(f"SELECT coalesce(max(ordinal) + 1, 0) FROM {table} WHERE sweep_id = ?",
                          (sweep_id,)).fetchone()[0])


def _insert_links(db: sqlite3.Connection, sweep_id: str, first: int, links: Sequence[Mapping[str, Any]]) -> None:
    insert_rows(db, "links", LINK_FIELDS, [({"sweep_id": sweep_id, "ordinal": first + index}, link)
                                        for index, link in enumerate(links)], packed=True)


def _replace_findings(db: sqlite3.Connection, sweep_id: str, findings: Sequence[Mapping[str, Any]]) -> None:
    """The sweep's findings, in order; a finding of no host (the fabric's) is stored with the
    empty host name, which no host has, and read back as None."""
    db.execute("DELETE FROM findings WHERE sweep_id = ?", (sweep_id,))
    insert_rows(db, "findings", FINDING_FIELDS, [({"sweep_id": sweep_id, "ordinal": index},
                                               finding if finding.get("host") is not None else {**finding, "host": ""})
                                              for index, finding in enumerate(findings)])


def _hostless(finding: dict[str, Any]) -> dict[str, Any]:
    """A stored finding with the empty host name (one of no host) as it was: host None."""
    if finding.get("host") == "":
        finding["host"] = None
    return finding


def _update_finished(db: sqlite3.Connection, sweep_id: str, document: Mapping[str, Any]) -> None:
    summary = document.get("summary")
    exit_code = summary.get("exit_code") if isinstance(summary, Mapping) else None
    interrupted = bool(document.get("interrupted")) or exit_code == ExitCode.INTERRUPTED
    db.execute("UPDATE sweeps SET finished_at = ?, interrupted = ?, exit_code = ?, summary_json = ?,"
               " document_schema = ?, layout_json = ?, extra_json = ?, analysed = 1 WHERE sweep_id = ?",
               (document.get("finished_at"), interrupted, exit_code, json_text(summary),
                document.get("schema", SWEEP_SCHEMA), json_text(list(document)),
                extra_json(document, DOCUMENT_FIELDS), sweep_id))


def _load_hosts(db: sqlite3.Connection, sweep_id: str) -> list[dict[str, Any]]:
    legacy: dict[str, list[dict[str, Any]]] = {}  # the rows of a sweep stored before schema 3
    for row in db.execute("SELECT * FROM results WHERE sweep_id = ? ORDER BY host, ordinal", (sweep_id,)):
        legacy.setdefault(row["host"], []).append(decode(row, RESULT_FIELDS))
    return [{**decode(row, HOST_FIELDS), "results": host_results(db, row, legacy)}
            for row in db.execute("SELECT * FROM hosts WHERE sweep_id = ? ORDER BY ordinal", (sweep_id,))]


def _document(sweep: sqlite3.Row, hosts: list[dict[str, Any]], links: list[dict[str, Any]],
              findings: list[dict[str, Any]]) -> dict[str, Any]:
    """The document in the field order it was stored with; extra fields where they stood."""
    extra: dict[str, Any] = loads(sweep["extra_json"]) or {}
    summary = loads(sweep["summary_json"])
    if sweep["finished_at"] is None:  # never finished: the controller died, was stopped, or is still running
        extra = {**extra, "interrupted": True}
        summary = summary or {"hosts_total": len(hosts), "hosts_ok": sum(h["status"] == "ok" for h in hosts),
                              "findings": len(findings), "exit_code": int(ExitCode.INTERRUPTED)}
    fields = {"schema": sweep["document_schema"], "sweep_id": sweep["sweep_id"], "started_at": sweep["started_at"],
              "finished_at": sweep["finished_at"], "hosts": hosts, "links": links, "findings": findings,
              "summary": summary, **extra}
    layout: list[str] = loads(sweep["layout_json"]) or []
    order = [*layout, *(name for name in fields if name not in layout)]
    return {name: fields[name] for name in order if name in fields}


def _link_counts(db: sqlite3.Connection, limit: int) -> dict[str, dict[str, Any]]:
    """Per sweep of the last ``limit``: its pair tests, those with no figure, the slowest measured one."""
    # SQLite gives the bare columns of an aggregate query with one min() from the row holding the minimum.
    rows = db.execute("SELECT sweep_id, count(*) AS tests, count(value) AS measured, min(value) AS slowest,"
                      " a, b, backend, rail FROM links WHERE sweep_id IN (SELECT sweep_id FROM sweeps"
                      " ORDER BY started_at DESC, sweep_id DESC LIMIT ?) GROUP BY sweep_id", (limit,)).fetchall()
    return {row["sweep_id"]: {"links": row["tests"], "links_failed": row["tests"] - row["measured"],
                              "slowest_link": None if row["slowest"] is None else {
                                  "a": row["a"], "b": row["b"], "backend": row["backend"], "rail": row["rail"],
                                  "value": row["slowest"]}}
            for row in rows}


def _excluded(findings: Sequence[sqlite3.Row]) -> tuple[set[str], set[tuple[str, int]]]:
    """The hosts and (host, GPU index) pairs whose results a baseline must leave out."""
    hosts: set[str] = set()
    gpus: set[tuple[str, int]] = set()
    for finding in findings:
        if finding["kind"] in LINK_KINDS:
            continue
        if finding["gpu"] is None:
            hosts.add(finding["host"])
        else:
            gpus.add((finding["host"], int(finding["gpu"])))
    return hosts, gpus

