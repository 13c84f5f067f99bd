"""Pruning the store: deleting old sweeps, every row of them, and giving their space back.

A sweep is kept when a rule asked for it (the newest N, those started within the last N days)
and, whatever the rules say, when a stored baseline names it as a source, when it is the newest
sweep, or when it is still running (unfinished and started within the last day; an older
unfinished sweep is an interrupted leftover and may go). The choice and the deletions happen in
one write transaction (BEGIN IMMEDIATE), so a gpudiag writing the store meanwhile waits, and
never sees half a sweep. ``VACUUM`` then shrinks the file; it needs free disk about the size of
the store, and when it cannot have it the deletions stay committed and the freed pages are
reused by later sweeps.
"""

from __future__ import annotations

import enum
import json
import os
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from ..errors import InputError, StoreError
from ..schema.times import parse_time
from .hosts import release_bases
from .schema import refuse_unusable
from .store import Store

# An unfinished sweep started within this long is taken to be running (another gpudiag is
# writing it); an older one was interrupted and is a leftover.
RUNNING_WINDOW = timedelta(days=1)
# A sweep's rows, children before their parents (the foreign keys cascade too; deleting each
# table explicitly does not depend on PRAGMA foreign_keys being on). Not ``repairs``: an
# operator's record of a repair is kept whatever is pruned (it names its sweep, not a row of it).
SWEEP_TABLES = ("retests", "figures", "results", "hosts", "links", "findings", "sweeps")


class KeepReason(enum.Enum):
    """Why a sweep was kept: the first that applies, in this order."""

    NEWEST_N = "newest_n"  # --keep N
    RECENT = "recent"  # --keep-days N
    RUNNING = "running"  # unfinished, started within RUNNING_WINDOW
    BASELINE_SOURCE = "baseline_source"  # a stored baseline was built from it
    NEWEST = "newest"  # the newest sweep is never pruned
    UNDATED = "undated"  # its start time cannot be read, so no age rule can drop it


@dataclass(frozen=True)
class StoredSweep:
    """A stored sweep as pruning sees it: its id, its start (None when unreadable) and whether it finished."""

    sweep_id: str
    started_at: datetime | None
    finished: bool


@dataclass(frozen=True)
class PruneResult:
    """What a prune did (or, with ``dry_run``, would do).

    ``pruned``: the ids of the sweeps deleted, newest first. ``kept_*``: how many sweeps were kept
    for each reason (KeepReason; a sweep counts once, for the first reason that applies).
    ``keys_removed``: ``result_keys`` rows no figure used any more. ``size_before_bytes`` and
    ``size_after_bytes``: the store's file and its WAL, in bytes (after is before for a dry run).
    ``vacuumed``: whether VACUUM was tried; ``vacuum_failure`` says why it failed (None: it
    worked or was not tried).
    """

    pruned: tuple[str, ...]
    kept_newest_n: int
    kept_recent: int
    kept_running: int
    kept_baseline_sources: int
    kept_newest: int
    kept_undated: int
    keys_removed: int
    size_before_bytes: int
    size_after_bytes: int
    vacuumed: bool
    vacuum_failure: str | None
    dry_run: bool

    @property
    def kept(self) -> int:
        """All the sweeps kept."""
        return (self.kept_newest_n + self.kept_recent + self.kept_running + self.kept_baseline_sources
                + self.kept_newest + self.kept_undated)


@dataclass(frozen=True)
class Selection:
    """The sweeps to delete (newest first) and the reason each kept one was kept."""

    pruned: tuple[str, ...]
    kept: Counter[KeepReason]


def open_for_prune(path: Path | str, *, dry_run: bool) -> Store:
    """The store at ``path``, opened writable (read-only for a dry run). Unlike the sweep, never
    creates one: raises StoreError for a missing file, and for everything Store.open refuses."""
    refuse_unusable(Path(path).expanduser(), readonly=True)
    return Store.open(path, readonly=dry_run)


def prune(store: Store, keep_days: int | None, keep: int | None, now: datetime, dry_run: bool) -> PruneResult:
    """Delete the sweeps that neither rule keeps (``keep``: the newest N; ``keep_days``: those
    started within N days of ``now``, an aware datetime; both: their union) nor a safeguard
    keeps (baseline sources, the newest, running sweeps), with all their rows, in one
    transaction; then drop unused result keys and VACUUM.

    Returns a PruneResult. Raises InputError when neither rule is given or one is below 1;
    StoreError when the store cannot be read or written (nothing is deleted then), or when
    VACUUM fails for a reason other than a full disk or a busy store (the deletions stay).
    """
    check_rules(keep_days, keep)
    before = store_size_bytes(store.path)
    if dry_run:
        with store.reading("choosing the sweeps to prune") as db:
            selection = select_sweeps(db, store.path, keep_days, keep, now)
        return _result(selection, 0, before, before, vacuumed=False, failure=None, dry_run=True)
    selection, keys_removed = _delete_in_one_transaction(store, keep_days, keep, now)
    vacuumed = bool(selection.pruned) or _mostly_free(store)
    failure = vacuum(store) if vacuumed else None
    return _result(selection, keys_removed, before, store_size_bytes(store.path), vacuumed=vacuumed,
                   failure=failure, dry_run=False)


def _delete_in_one_transaction(store: Store, keep_days: int | None, keep: int | None,
                               now: datetime) -> tuple[Selection, int]:
    """Choose and delete under one write lock, so that no baseline or sweep slips in between;
    returns the selection and the result keys removed. Raises StoreError; nothing is deleted then."""
    try:
        with store.writing("pruning sweeps") as db:
            selection = select_sweeps(db, store.path, keep_days, keep, now)
            return selection, delete_sweeps(db, selection.pruned)
    except StoreError as error:
        if isinstance(error.__cause__, sqlite3.Error) and disk_full(error.__cause__):
            raise StoreError(f"{store.path}: the disk is full, and deleting sweeps needs some free space for the "
                             "store's write-ahead log; free some and run again; nothing was pruned") from error
        raise


def check_rules(keep_days: int | None, keep: int | None) -> None:
    """Raises InputError unless at least one rule is given and each given one is at least 1."""
    if keep_days is None and keep is None:
        raise InputError("say what to keep: --keep N (the newest N sweeps), --keep-days N (those started "
                         "within N days), or both")
    for name, value in (("--keep-days", keep_days), ("--keep", keep)):
        if value is not None and value < 1:
            raise InputError(f"{name} {value}: must be at least 1")


def _result(selection: Selection, keys_removed: int, before: int, after: int, *, vacuumed: bool,
            failure: str | None, dry_run: bool) -> PruneResult:
    kept = selection.kept
    return PruneResult(pruned=selection.pruned, kept_newest_n=kept[KeepReason.NEWEST_N],
                       kept_recent=kept[KeepReason.RECENT], kept_running=kept[KeepReason.RUNNING],
                       kept_baseline_sources=kept[KeepReason.BASELINE_SOURCE], kept_newest=kept[KeepReason.NEWEST],
                       kept_undated=kept[KeepReason.UNDATED], keys_removed=keys_removed, size_before_bytes=before,
                       size_after_bytes=after, vacuumed=vacuumed, vacuum_failure=failure, dry_run=dry_run)


# -- choosing ----------------------------------------------------------------------------------------


def select_sweeps(db: sqlite3.Connection, path: Path, keep_days: int | None, keep: int | None,
                  now: datetime) -> Selection:
    """Which stored sweeps go, and why each other one stays. Raises StoreError when a baseline's
    list of source sweeps cannot be read (pruning then could delete one of them)."""
    sweeps = stored_sweeps(db)
    sources = baseline_sources(db, path)
    pruned: list[str] = []
    kept: Counter[KeepReason] = Counter()
    for index, sweep in enumerate(sweeps):
        reason = keep_reason(index, sweep, sources, keep_days, keep, now)
        if reason is None:
            pruned.append(sweep.sweep_id)
        else:
            kept[reason] += 1
    return Selection(tuple(pruned), kept)


def keep_reason(index: int, sweep: StoredSweep, sources: frozenset[str], keep_days: int | None, keep: int | None,
                now: datetime) -> KeepReason | None:
    """Why the sweep at ``index`` (0: the newest) stays, or None when it may go."""
    started = sweep.started_at
    if keep is not None and index < keep:
        return KeepReason.NEWEST_N
    if keep_days is not None and started is not None and started >= now - timedelta(days=keep_days):
        return KeepReason.RECENT
    if not sweep.finished and started is not None and started >= now - RUNNING_WINDOW:
        return KeepReason.RUNNING
    if sweep.sweep_id in sources:
        return KeepReason.BASELINE_SOURCE
    if index == 0:
        return KeepReason.NEWEST
    if started is None:
        return KeepReason.UNDATED
    return None


def stored_sweeps(db: sqlite3.Connection) -> list[StoredSweep]:
    """Every stored sweep, newest first (the order of ``Store.latest_sweep_id``)."""
    rows = db.execute("SELECT sweep_id, started_at, finished_at FROM sweeps"
                      " ORDER BY started_at DESC, sweep_id DESC").fetchall()
    return [StoredSweep(row[0], parse_time(row[1]), row[2] is not None) for row in rows]


def baseline_sources(db: sqlite3.Connection, path: Path) -> frozenset[str]:
    """The ids of every sweep a stored baseline was built from (they may name sweeps of another
    store, for an imported baseline)."""
    sources: set[str] = set()
    for name, text in db.execute("SELECT DISTINCT name, source_sweeps_json FROM baselines"):
        try:
            sources.update(str(sweep_id) for sweep_id in json.loads(text))
        except (json.JSONDecodeError, TypeError) as error:
            raise StoreError(f"{path}: baseline {name!r} has an unreadable list of source sweeps ({error}), so "
                             f"pruning could delete one of them; nothing was pruned; export and re-import or "
                             f"rebuild that baseline first") from error
    return frozenset(sources)


# -- deleting and reclaiming -------------------------------------------------------------------------


def delete_sweeps(db: sqlite3.Connection, sweep_ids: Sequence[str]) -> int:
    """Delete the sweeps' rows from every table, inside the caller's transaction, then the
    ``result_keys`` rows no figure (nor re-tested figure) uses any more; returns how many keys went."""
    if not sweep_ids:
        return 0
    release_bases(db, sweep_ids)  # a kept sweep's host rows may keep only what changed since a pruned one's
    rows = [(sweep_id,) for sweep_id in sweep_ids]
    for table in SWEEP_TABLES:  # one of this module's literals, never user input
        db.executemany(f"DELETE FROM {table} WHERE sweep_id = ?", rows)
    # figures has no index on key_id: NOT IN reads it once, where NOT EXISTS would scan it per key.
    return db.execute("DELETE FROM result_keys WHERE key_id NOT IN (SELECT key_id FROM figures"
                      " UNION SELECT key_id FROM retests)").rowcount


def vacuum(store: Store) -> str | None:
    """Rebuild the file without its free pages and empty the WAL. Returns None when it worked,
    else why it could not (a full disk, a busy store): the file then keeps its size and its free
    pages. Raises StoreError for any other SQLite failure."""
    # VACUUM cannot run inside a transaction, so not under Store.writing; it takes the write lock itself.
    with store.reading("reclaiming the space of pruned sweeps (VACUUM)") as db:
        try:
            db.execute("VACUUM")
            failure = None
        except sqlite3.OperationalError as error:
            failure = vacuum_failure(error, _file_size(store.path))  # the WAL now holds VACUUM's attempt
            if failure is None:
                raise
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # busy readers only leave the WAL as it is
    return failure


def vacuum_failure(error: sqlite3.OperationalError, size_bytes: int) -> str | None:
    """Why VACUUM failed in words, for the failures that leave a sound store (None for others)."""
    if disk_full(error):
        return (f"the disk is full: VACUUM needs about {size_bytes / 1e6:.1f} MB free beside the store "
                "and in the temporary folder ($SQLITE_TMPDIR or /tmp)")
    name = getattr(error, "sqlite_errorname", "") or ""  # Python 3.11+
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(error):
        return "another gpudiag kept the store busy"
    return None


def disk_full(error: sqlite3.Error) -> bool:
    """Whether SQLite failed for want of disk space (SQLITE_FULL)."""
    return getattr(error, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(error)


def _mostly_free(store: Store) -> bool:
    """Whether a tenth of the file or more is free pages (left by an earlier VACUUM that failed, say):
    worth a VACUUM even with nothing to prune. A sweep's own rewrites leave a few, not worth one."""
    with store.reading("counting the store's free pages") as db:
        free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
        total = int(db.execute("PRAGMA page_count").fetchone()[0])
    return free > 0 and free * 10 >= total


def store_size_bytes(path: Path) -> int:
    """The store's size on disk in bytes: its file and its write-ahead log."""
    return sum(_file_size(Path(f"{path}{suffix}")) for suffix in ("", "-wal"))


def _file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0

