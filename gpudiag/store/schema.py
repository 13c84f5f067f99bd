"""The store's file: opening it safely, its schema versions and migrations, its transactions.

A file that is not a store of ours, is corrupt, or has a newer schema is refused with a
StoreError and never changed; an older one is migrated in one transaction per version.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import StoreError

BUSY_TIMEOUT_MS = 30_000

# One SQL script per schema version (index = version - 1), each applied in one transaction.
# Measured numbers have no declared type, so SQLite keeps each as it was given (an int stays an
# int, a float a float) and a stored document reads back exactly. extra_json keeps fields beyond
# the contract's. Never edit a released script: add the next one. Schema 3 keeps a host's records
# packed in hosts.results_z and its compared figures in figures (gpudiag.store.hosts); the results
# table stays for sweeps stored before it. Schema 4 adds the repairs an operator records
# (gpudiag.store.repairs): not a sweep's rows, so pruning sweeps never deletes them. Schema 5 lets a
# host's row keep only what changed since the host's newest full row (hosts.base_sweep_id;
# gpudiag.store.hosts): telemetry that did not change is not stored again. Schema 6 keeps the hosts a
# sweep planned (sweeps.planned_json; NULL for a sweep stored before) and whether its analysis ran
# (sweeps.analysed; a sweep stored before counts as analysed where it finished): gpudiag.store.completeness.
# Schema 7 keeps the figures a sweep re-tested for a trend (gpudiag.store.retests). Schema 8 keeps a
# link's fields beyond its columns compressed (links.extra_z; gpudiag.store.rows): a traced fabric's
# entry carries 16 stream figures and their paths a pair and rail, a third of a 100-node sweep's bytes.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sweeps (sweep_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, finished_at TEXT,
        interrupted INTEGER NOT NULL DEFAULT 0, exit_code INTEGER, options_json TEXT NOT NULL DEFAULT '{}',
        summary_json TEXT, document_schema TEXT NOT NULL, layout_json TEXT, extra_json TEXT);
    CREATE TABLE hosts (sweep_id TEXT NOT NULL REFERENCES sweeps (sweep_id) ON DELETE CASCADE,
        host TEXT NOT NULL, ordinal INTEGER NOT NULL, status TEXT NOT NULL, error TEXT, duration_s,
        facts_json TEXT, extra_json TEXT, PRIMARY KEY (sweep_id, host));
    CREATE INDEX hosts_by_host ON hosts (host);
    CREATE TABLE results (sweep_id TEXT NOT NULL, host TEXT NOT NULL, ordinal INTEGER NOT NULL,
        probe TEXT NOT NULL, device TEXT NOT NULL, gpu_uuid TEXT, metric TEXT NOT NULL, value, unit TEXT,
        samples INTEGER, cv, status TEXT NOT NULL, reason TEXT, params_json TEXT, details_json TEXT,
        baseline_key TEXT, extra_json TEXT, PRIMARY KEY (sweep_id, host, ordinal),
        FOREIGN KEY (sweep_id, host) REFERENCES hosts (sweep_id, host) ON DELETE CASCADE);
    CREATE INDEX results_by_baseline_key ON results (baseline_key) WHERE baseline_key IS NOT NULL;
    CREATE TABLE links (sweep_id TEXT NOT NULL REFERENCES sweeps (sweep_id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL, a TEXT NOT NULL, b TEXT NOT NULL, rail INTEGER, backend TEXT, metric TEXT,
        value, phase TEXT, details_json TEXT, extra_json TEXT, PRIMARY KEY (sweep_id, ordinal));
    CREATE TABLE findings (sweep_id TEXT NOT NULL REFERENCES sweeps (sweep_id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL, host TEXT NOT NULL, peer TEXT,
        gpu INTEGER, metric TEXT, value, reference, deficit_pct, robust_z, confirmed INTEGER NOT NULL,
        evidence TEXT, action TEXT, extra_json TEXT, PRIMARY KEY (sweep_id, ordinal));
    CREATE INDEX findings_by_host ON findings (host);
    """,
    """
    CREATE TABLE baselines (name TEXT NOT NULL, key TEXT NOT NULL, median REAL NOT NULL, mad REAL NOT NULL,
        count INTEGER NOT NULL, unit TEXT, created_at TEXT NOT NULL, source_sweeps_json TEXT NOT NULL,
        PRIMARY KEY (name, key));
    """,
    """
    ALTER TABLE hosts ADD COLUMN results_z BLOB;
    CREATE TABLE result_keys (key_id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
    CREATE TABLE figures (sweep_id TEXT NOT NULL, host TEXT NOT NULL, ordinal INTEGER NOT NULL,
        key_id INTEGER NOT NULL REFERENCES result_keys (key_id), gpu INTEGER, value NOT NULL,
        PRIMARY KEY (sweep_id, host, ordinal),
        FOREIGN KEY (sweep_id, host) REFERENCES hosts (sweep_id, host) ON DELETE CASCADE) WITHOUT ROWID;
    """,
    """
    CREATE TABLE repairs (repair_id INTEGER PRIMARY KEY, host TEXT NOT NULL, gpu INTEGER, recorded_at TEXT NOT NULL,
        operator TEXT, text TEXT NOT NULL, after_sweep_id TEXT NOT NULL, after_started_at TEXT NOT NULL);
    CREATE INDEX repairs_by_host ON repairs (host);
    """,
    """
    ALTER TABLE hosts ADD COLUMN base_sweep_id TEXT;
    CREATE INDEX hosts_by_base ON hosts (base_sweep_id) WHERE base_sweep_id IS NOT NULL;
    """,
    """
    ALTER TABLE sweeps ADD COLUMN planned_json TEXT;
    ALTER TABLE sweeps ADD COLUMN analysed INTEGER NOT NULL DEFAULT 0;
    UPDATE sweeps SET analysed = 1 WHERE finished_at IS NOT NULL;
    """,
    """
    CREATE TABLE retests (sweep_id TEXT NOT NULL, host TEXT NOT NULL,
        key_id INTEGER NOT NULL REFERENCES result_keys (key_id), gpu INTEGER NOT NULL, value NOT NULL,
        runs INTEGER NOT NULL, PRIMARY KEY (sweep_id, host, key_id, gpu),
        FOREIGN KEY (sweep_id, host) REFERENCES hosts (sweep_id, host) ON DELETE CASCADE) WITHOUT ROWID;
    """,
    """
    ALTER TABLE links ADD COLUMN extra_z BLOB;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


# -- opening -----------------------------------------------------------------------------------------


def refuse_unusable(path: Path, readonly: bool) -> None:
    if path.is_symlink() and not path.exists():
        raise StoreError(f"{path}: a symbolic link {_dangling(path)}; remove it or give another store path")
    if path.is_dir():
        raise StoreError(f"{path}: is a folder, not a store file; give a file path such as {path / 'gpudiag.db'}")
    if readonly and not path.exists():
        raise StoreError(f"{path}: no store there yet; run a sweep first (it stores every sweep), "
                         "or give the path of an existing store")
    wanted = os.R_OK if readonly else os.R_OK | os.W_OK
    if path.exists() and not os.access(path, wanted):
        access = "read" if readonly else "read and write"
        raise StoreError(f"{path}: permission denied; you need to {access} the store: fix its permissions "
                         "or give another store path")


def refuse_upgrade_without_write_access(path: Path, version: int) -> None:
    if not os.access(path, os.W_OK):
        raise StoreError(f"{path}: a store of an older schema ({version}; this gpudiag uses {SCHEMA_VERSION}) "
                         "that you may not write, so it cannot be upgraded; run a sweep with it once as a user "
                         "who may write it, or give another store path")


def _dangling(path: Path) -> str:
    """Why a symbolic link leads to no file: it loops, or points where nothing is."""
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 says so for a loop; later versions raise OSError (ELOOP)
        return "that loops"
    except OSError as error:
        return "that loops" if error.errno == errno.ELOOP else f"to {os.readlink(path)!r}, where nothing is"
    return "to a file that is not there"


def make_folder(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(f"{path.parent}: cannot create the store's folder ({error.strerror or error}); "
                         "give another store path") from error


def checked_connection(path: Path, *, readonly: bool) -> tuple[sqlite3.Connection, int]:
    """A connection to a file that is a gpudiag store of a schema this gpudiag knows (or an empty
    file), and that schema's version. Only reads happen before the checks pass. Raises StoreError
    or sqlite3.Error, having closed the connection."""
    mode = "ro" if readonly else "rwc"
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True, isolation_level=None,
                                 timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    try:
        connection.row_factory = sqlite3.Row
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        connection.execute("PRAGMA foreign_keys = ON")
        version = check_schema(connection, path)
    except (sqlite3.Error, StoreError):
        connection.close()
        raise
    return connection, version


def check_schema(connection: sqlite3.Connection, path: Path) -> int:
    version = user_version(connection)  # reading the header: "file is not a database" shows here
    tables = [row[0] for row in connection.execute(  # reading the schema: a corrupt first page shows here
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' ORDER BY name")]
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: written by a newer gpudiag (store schema {version}; this one knows up to "
                         f"{SCHEMA_VERSION}); upgrade gpudiag or give another store path; the file is left untouched")
    if version == 0 and tables:
        raise StoreError(f"{path}: an SQLite database that is not a gpudiag store (tables: {', '.join(tables)}); "
                         "give another store path; the file is left untouched")
    return version


def user_version(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA user_version").fetchone()[0])


def migrate(connection: sqlite3.Connection) -> None:
    """Apply the missing migrations, one transaction each; the version is checked again inside
    each, as another process may be upgrading the same file."""
    for version in range(user_version(connection) + 1, SCHEMA_VERSION + 1):
        with transaction(connection):
            if user_version(connection) >= version:
                continue
            for statement in statements(MIGRATIONS[version - 1]):
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {version}")


def statements(script: str) -> Iterator[str]:
    """The statements of an SQL script, one at a time (executescript would commit on its own)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""
    if pending.strip():
        raise ValueError(f"an incomplete SQL statement at the end of a migration: {pending.strip()[:80]!r}")


@contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE … COMMIT, rolled back when the block does not complete (Ctrl-C included)."""
    connection.execute("BEGIN IMMEDIATE")
    committed = False
    try:
        yield
        connection.execute("COMMIT")
        committed = True
    finally:
        if not committed and connection.in_transaction:
            connection.execute("ROLLBACK")


@contextmanager
def sqlite_errors(path: Path, doing: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as error:
        raise store_error(path, doing, error) from error


def store_error(path: Path, doing: str, error: sqlite3.Error) -> StoreError:
    """One line naming the file, what went wrong and the fix."""
    text = str(error)
    name = getattr(error, "sqlite_errorname", "") or ""
    untouched = "gpudiag leaves the file untouched"
    if name == "SQLITE_NOTADB" or "not a database" in text:
        return StoreError(f"{path}: not a gpudiag store (the file is not an SQLite database); give another "
                          f"store path or move the file away; {untouched}")
    if name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        return StoreError(f"{path}: the store is corrupt ({text}); move it aside (gpudiag then starts a new one) "
                          f"and try `sqlite3 {path} .recover` to rescue it; {untouched}")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return StoreError(f"{path}: the store stayed busy for {BUSY_TIMEOUT_MS // 1000} s while {doing} "
                          "(another gpudiag is writing it); try again")
    if name.startswith("SQLITE_READONLY") or "readonly" in text:
        return StoreError(f"{path}: cannot write the store while {doing} ({text}); check the permissions of "
                          "the file and its folder, or give another store path")
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")) or "unable to open" in text:
        return StoreError(f"{path}: cannot open the store ({text}); check that you may read and write the file "
                          "and its folder, or give another store path")
    return StoreError(f"{path}: store error while {doing}: {text}")
