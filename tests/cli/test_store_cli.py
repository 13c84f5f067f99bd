"""``gpudiag store prune`` on stores written by real simulated sweeps: what it prints and keeps,
the file it shrinks, the commands that still read the store afterwards, and the stores it refuses
(exit 2, left byte for byte as they were)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main
from gpudiag.store.baselines import load_baseline
from gpudiag.store.schema import SCHEMA_VERSION
from gpudiag.store.store import Store

# Every table that holds a sweep's rows.
TABLES = ("sweeps", "hosts", "results", "figures", "links", "findings")
# Days before now at which the four stored sweeps started, oldest first (the last is now).
AGES_DAYS = (30, 20, 10, 0)
LINE = re.compile(r"^pruned (\d+) sweeps? \(kept (\d+): (.*)\); (\d+\.\d) MB → (\d+\.\d) MB$")


@contextmanager
def _db(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to the store file, committed and closed after the block (an open one
    would keep the store's write-ahead log alive)."""
    with closing(sqlite3.connect(path)) as connection, connection:
        yield connection


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _sweep(fleet: Path, store: Path, nodes: int = 3) -> None:
    fleet.write_text(json.dumps({"nodes": nodes}))
    result = _run("sweep", "--simulate", str(fleet), "--store", str(store), "--links", "none", "-q")
    assert result.exit_code == 0, result.output


def _ids(store: Path) -> list[str]:
    """The stored sweeps, oldest first."""
    with _db(store) as db:
        return [row[0] for row in db.execute("SELECT sweep_id FROM sweeps ORDER BY started_at, sweep_id")]


def _rows(store: Path, sweep_id: str) -> dict[str, int]:
    with _db(store) as db:
        return {table: db.execute(f"SELECT count(*) FROM {table} WHERE sweep_id = ?", (sweep_id,)).fetchone()[0]
                for table in TABLES}


def _on_disk(store: Path) -> int:
    """The store's bytes on disk: its file and its write-ahead log."""
    wal = Path(f"{store}-wal")
    return os.stat(store).st_size + (os.stat(wal).st_size if wal.exists() else 0)


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file of the folder and its digest: to show that nothing was created or changed."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def built_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four sweeps of 3 simulated nodes, started 30, 20, 10 and 0 days ago; a baseline ``keep``
    built from the oldest."""
    folder = tmp_path_factory.mktemp("built")
    store = folder / "gpudiag.db"
    for _ in AGES_DAYS:
        _sweep(folder / "fleet.json", store)
    now = datetime.now(timezone.utc)
    with _db(store) as db:  # in the order they were stored (rowid), each moved back in time
        for rowid, days in zip(range(1, len(AGES_DAYS) + 1), AGES_DAYS, strict=True):
            started = (now - timedelta(days=days, minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
            db.execute("UPDATE sweeps SET started_at = ? WHERE rowid = ?", (started, rowid))
    oldest = _ids(store)[0]
    assert _run("baseline", "build", "--sweep", oldest, "--name", "keep", "--store", str(store)).exit_code == 0
    return store


@pytest.fixture
def store(built_store: Path, tmp_path: Path) -> Path:
    """A copy of the built store of this test's own."""
    copy = tmp_path / "gpudiag.db"
    shutil.copy(built_store, copy)
    return copy


def test_keep_one_prunes_all_but_the_newest_and_the_baselines_source(store: Path):
    oldest, second, third, newest = _ids(store)
    assert _rows(store, second)["hosts"] == 3 and _rows(store, second)["figures"] > 0
    before = _on_disk(store)

    result = _run("store", "prune", "--keep", "1", "--store", str(store))

    assert result.exit_code == 0, result.output
    line = LINE.match(result.output.strip())
    assert line, result.output
    assert line.groups()[:3] == ("2", "2", "the newest sweep, 1 source of a baseline")
    assert _ids(store) == [oldest, newest]
    for sweep_id in (second, third):
        assert _rows(store, sweep_id) == dict.fromkeys(TABLES, 0)
    after = _on_disk(store)
    # two of four sweeps gone (the later ones keep only what changed since the oldest); the schema,
    # keys and baseline stay
    assert after < before * 0.9
    with _db(store) as db:
        assert db.execute("PRAGMA freelist_count").fetchone()[0] == 0  # VACUUM gave the freed pages back
    assert (float(line[4]), float(line[5])) == (round(before / 1e6, 1), round(after / 1e6, 1))


def test_after_pruning_history_report_and_the_baseline_still_work(store: Path):
    oldest, _, _, newest = _ids(store)
    assert _run("store", "prune", "--keep", "1", "--store", str(store)).exit_code == 0
    listed = _run("history", "--store", str(store))
    assert listed.exit_code == 0 and oldest in listed.output and newest in listed.output
    assert len(re.findall(r"\d{8}T\d{6}Z-[0-9a-f]{4}", listed.output)) == 2
    host = _run("history", "node001", "--store", str(store))
    assert host.exit_code == 0 and "gemm.tflops" in host.output
    latest = json.loads(_run("report", "--store", str(store), "--format", "json").output)
    assert latest["sweep_id"] == newest and len(latest["hosts"]) == 3
    assert _run("report", oldest, "--store", str(store)).exit_code == 0
    shown = _run("baseline", "show", "keep", "--store", str(store))
    assert shown.exit_code == 0 and "gemm" in shown.output
    with Store.open(store, readonly=True) as opened:
        assert load_baseline(opened, "keep").source_sweeps == (oldest,)
    with _db(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_keep_days_prunes_what_started_before_them(store: Path):
    oldest, second, third, newest = _ids(store)
    result = _run("store", "prune", "--keep-days", "15", "--store", str(store))
    assert result.exit_code == 0
    assert result.output.startswith("pruned 1 sweep (kept 3: 2 from the last 15 days, 1 source of a baseline); ")
    assert _ids(store) == [oldest, third, newest] and _rows(store, second)["hosts"] == 0


def test_a_dry_run_lists_what_would_go_and_changes_nothing(store: Path):
    oldest, second, third, newest = _ids(store)
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    result = _run("store", "prune", "--keep", "1", "--dry-run", "--store", str(store))
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("would prune 2 sweeps (kept 2: the newest sweep, 1 source of a baseline); the store is ")
    assert [line.strip() for line in lines[1:]] == [third, second]
    # Reading a store in WAL mode may leave an empty -wal and a -shm beside it; the store itself is unchanged.
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before and len(_ids(store)) == 4


def test_the_default_store_is_pruned(built_store: Path):
    default = Path(os.environ["XDG_DATA_HOME"]) / "gpudiag" / "gpudiag.db"  # set for every test (conftest)
    default.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(built_store, default)
    result = _run("store", "prune", "--keep", "2")
    assert result.exit_code == 0 and result.output.startswith("pruned 1 sweep (kept 3: the newest 2, ")
    assert len(_ids(default)) == 3


def test_a_store_of_a_newer_schema_is_refused_untouched(store: Path):
    with _db(store) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = _snapshot(store.parent)
    result = _run("store", "prune", "--keep", "1", "--store", str(store))
    assert result.exit_code == 2 and "newer gpudiag" in result.output and str(store) in result.output
    assert _snapshot(store.parent) == before


def test_a_missing_store_is_refused_and_not_created(tmp_path: Path):
    path = tmp_path / "nowhere.db"
    result = _run("store", "prune", "--keep", "1", "--store", str(path))
    assert result.exit_code == 2 and "no store there yet" in result.output
    assert list(tmp_path.iterdir()) == []
    default = _run("store", "prune", "--keep-days", "3")
    assert default.exit_code == 2 and "no store there yet" in default.output
    assert not (Path(os.environ["XDG_DATA_HOME"]) / "gpudiag").exists()


def test_a_file_that_is_not_a_store_is_refused_untouched(tmp_path: Path):
    path = tmp_path / "notes.db"
    path.write_text("not a database\n" * 100)
    result = _run("store", "prune", "--keep", "1", "--store", str(path))
    assert result.exit_code == 2 and "not a gpudiag store" in result.output
    assert path.read_text() == "not a database\n" * 100 and [p.name for p in tmp_path.iterdir()] == ["notes.db"]


@pytest.mark.parametrize(("args", "message"), [
    ((), "say what to keep"),
    (("--keep", "0"), "0 is not in the range"),
    (("--keep-days", "-3"), "-3 is not in the range"),
    (("--keep", "two"), "--keep: two is not a valid integer"),
])
def test_a_bad_option_is_exit_2_and_prunes_nothing(store: Path, args: tuple[str, ...], message: str):
    before = _snapshot(store.parent)
    result = _run("store", "prune", *args, "--store", str(store))
    assert result.exit_code == 2 and message in result.output
    assert _snapshot(store.parent) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as root, whom file permissions do not stop")
def test_a_store_the_user_may_not_write_is_refused_untouched(store: Path):
    store.chmod(0o444)
    before = _snapshot(store.parent)
    result = _run("store", "prune", "--keep", "1", "--store", str(store))
    assert result.exit_code == 2 and "permission denied" in result.output
    assert _snapshot(store.parent) == before
    assert _run("store", "prune", "--keep", "1", "--dry-run", "--store", str(store)).exit_code == 0


# -- in a mount namespace of their own (root): a read-only and a full file system ---------------------------


def _mount_namespace_missing() -> str | None:
    """Why this machine cannot give a test a mount namespace of its own, or None when it can."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare to mount a file system of the test's own"
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return f"cannot make a mount namespace here: {probe.stderr.decode().strip()}"
    return None


_NO_MOUNT_NAMESPACE = _mount_namespace_missing()
# The tests that mount a file system of their own, in a mount namespace that vanishes with them.
requires_mount_namespace = pytest.mark.skipif(_NO_MOUNT_NAMESPACE is not None, reason=_NO_MOUNT_NAMESPACE or "")


def _in_mount_namespace(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with sh in a private mount namespace (its mounts vanish with it)."""
    return subprocess.run(["unshare", "--mount", "sh", "-ec", script], capture_output=True, text=True, check=False,
                          timeout=120)


def _prune_command(store: Path, *args: str) -> str:
    return f"{sys.executable} -m gpudiag store prune --store {store} {' '.join(args)}"


@requires_mount_namespace
def test_a_store_on_a_read_only_file_system_is_refused_untouched(store: Path):
    before = _snapshot(store.parent)
    folder = store.parent
    ran = _in_mount_namespace(f"mount --bind {folder} {folder}; mount -o remount,bind,ro {folder}; "
                              f"{_prune_command(store, '--keep', '1')} || echo rc=$?")
    assert "rc=2" in ran.stdout and "permission denied" in ran.stderr, ran
    assert _snapshot(store.parent) == before


@requires_mount_namespace
def test_vacuum_on_a_full_disk_keeps_the_deletions_and_says_so(store: Path, tmp_path: Path):
    """A tmpfs with room for the deletions' log but not for VACUUM's copy of the store."""
    full, out = tmp_path / "full", tmp_path / "out"
    full.mkdir()
    out.mkdir()
    left = int(_on_disk(store) * 0.6)
    ran = _in_mount_namespace(
        f"mount -t tmpfs -o size=8m tmpfs {full}; cp {store} {full}/s.db; "
        f"{sys.executable} -c \"import shutil; open('{full}/filler', 'wb').write(bytes("
        f"shutil.disk_usage('{full}').free - {left}))\"; "
        f"SQLITE_TMPDIR={full} {_prune_command(full / 's.db', '--keep', '2')}; cp {full}/s.db* {out}/")
    assert ran.returncode == 0, ran
    assert "pruned 1 sweep (kept 3: the newest 2, 1 source of a baseline); the store stays " in ran.stdout
    assert "VACUUM failed (the disk is full" in ran.stdout and "reused by later sweeps" in ran.stdout
    assert f"sqlite3 {full}/s.db VACUUM" in ran.stdout
    oldest, _, third, newest = _ids(store)
    assert _ids(out / "s.db") == [oldest, third, newest]
    with _db(out / "s.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA freelist_count").fetchone()[0] > 0  # the freed pages, for later sweeps


@requires_mount_namespace
def test_a_disk_too_full_to_delete_prunes_nothing(store: Path, tmp_path: Path):
    full = tmp_path / "full"
    full.mkdir()
    ran = _in_mount_namespace(
        f"mount -t tmpfs -o size=8m tmpfs {full}; cp {store} {full}/s.db; "
        f"{sys.executable} -c \"import shutil; open('{full}/filler', 'wb').write(bytes("
        f"shutil.disk_usage('{full}').free - 65536))\"; "
        f"{_prune_command(full / 's.db', '--keep', '1')} || echo rc=$?; cp {full}/s.db {tmp_path}/after.db")
    assert "rc=2" in ran.stdout and "the disk is full" in ran.stderr and "nothing was pruned" in ran.stderr, ran
    assert _ids(tmp_path / "after.db") == _ids(store)


def test_a_sweep_running_while_pruning_is_stored_whole(store: Path, tmp_path: Path):
    """Another gpudiag sweeps into the store while prunes run: neither corrupts it, and the
    running sweep (the newest, and running) is never pruned."""
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 24}))
    sweep = subprocess.Popen([sys.executable, "-m", "gpudiag", "sweep", "--simulate", str(fleet), "--store",
                              str(store), "--links", "none", "-q"], stdout=subprocess.DEVNULL)
    try:
        while sweep.poll() is None:
            assert _run("store", "prune", "--keep", "1", "--store", str(store)).exit_code == 0
            time.sleep(0.05)  # leave the sweep the CPU between prunes
    finally:
        sweep.wait(timeout=120)
    assert sweep.returncode == 0
    newest = _ids(store)[-1]
    with _db(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT count(*), sum(status = 'ok') FROM hosts WHERE sweep_id = ?",
                          (newest,)).fetchone() == (24, 24)
        assert db.execute("SELECT finished_at FROM sweeps WHERE sweep_id = ?", (newest,)).fetchone()[0]
    assert _run("report", newest, "--store", str(store)).exit_code == 0


@pytest.mark.parametrize("target", ["loop.db", "elsewhere/missing.db"])
@pytest.mark.parametrize("command", [("report",), ("history",), ("store", "prune", "--keep", "1"),
                                     ("sweep", "--simulate", "FLEET", "--links", "none", "-q")])
def test_a_store_path_that_is_a_loop_or_a_dangling_link_is_bad_input(tmp_path: Path, target: str,
                                                                       command: tuple[str, ...]):
    link = tmp_path / "loop.db"
    link.symlink_to(tmp_path / target)
    fleet = tmp_path / "fleet.json"
    fleet.write_text('{"nodes": 2}')
    args = [str(fleet) if word == "FLEET" else word for word in command]
    result = CliRunner().invoke(main, [*args, "--store", str(link)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"gpudiag: error: {link}: a symbolic link ")
    assert "Traceback" not in result.output and not (tmp_path / "elsewhere").exists()
