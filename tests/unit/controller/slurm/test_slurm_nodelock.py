"""One check at a time on a node (gpudiag.slurm.nodelock): a flock per node name, taken whole or
not at all, let go by the kernel when its holder dies, never held by what the holder starts, in a
folder no one else can write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag.slurm.nodelock import Busy, NodeLockError, NodeLocks, lock_folder, lock_nodes


def _held(result: NodeLocks | Busy) -> NodeLocks:
    assert isinstance(result, NodeLocks), result
    return result


def test_a_second_check_of_a_node_is_kept_out_and_told_whose_it_is(tmp_path: Path) -> None:
    with _held(lock_nodes(["n1", "n2"], tmp_path, holder="gpudiag preflight n[1-2]")) as first:
        assert sorted(first.nodes) == ["n1", "n2"]
        second = lock_nodes(["n2"], tmp_path)
        assert isinstance(second, Busy) and second.node == "n2"
        assert second.holder.startswith(f"pid={os.getpid()} since=") and second.holder.endswith(
            "gpudiag preflight n[1-2]")
        assert second.describe().startswith("another gpudiag check holds n2 (pid=")
    _held(lock_nodes(["n2"], tmp_path)).release()  # let go on leaving


def test_a_check_kept_out_of_one_node_holds_none_of_the_others(tmp_path: Path) -> None:
    with _held(lock_nodes(["n3"], tmp_path)):
        assert isinstance(lock_nodes(["n1", "n2", "n3", "n4"], tmp_path), Busy)
        with _held(lock_nodes(["n1", "n2", "n4"], tmp_path)):
            pass


def test_a_node_is_one_lock_whatever_the_case_of_its_name(tmp_path: Path) -> None:
    with _held(lock_nodes(["GPU01"], tmp_path)):
        assert isinstance(lock_nodes(["gpu01"], tmp_path), Busy)
    with _held(lock_nodes(["../etc/x", "a" * 300, ".", "h:22"], tmp_path)):
        names = sorted(path.name for path in tmp_path.iterdir())
        assert all("/" not in name and name not in (".lock", "..lock") and len(name) < 200 for name in names), names
        assert {path.parent for path in tmp_path.iterdir()} == {tmp_path}


def test_the_lock_of_a_check_killed_outright_does_not_hold_the_node(tmp_path: Path) -> None:
    """SIGKILL leaves no chance to clean up: the kernel lets a dead process's flock go."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from gpudiag.slurm.nodelock import lock_nodes\n"
        f"locks = lock_nodes(['n1'], Path({str(tmp_path)!r}))\nprint('held', flush=True)\ntime.sleep(600)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert isinstance(lock_nodes(["n1"], tmp_path), Busy)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    _held(lock_nodes(["n1"], tmp_path)).release()


def test_a_program_the_check_starts_never_keeps_its_lock(tmp_path: Path) -> None:
    """A probe, ssh or srun the check started may outlive it; the lock is close-on-exec, so even a
    child that keeps every descriptor it may does not hold the node."""
    locks = _held(lock_nodes(["n1"], tmp_path))
    child = subprocess.Popen(["sleep", "600"], close_fds=False)
    try:
        locks.release()
        _held(lock_nodes(["n1"], tmp_path)).release()
    finally:
        child.kill()
        child.wait()


def test_a_lock_folder_another_user_could_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(NodeLockError, match=r"the node lock folder .*locks: .* is writable by its group and everyone"):
        lock_nodes(["n1"], folder)
    folder.chmod(0o700)
    (folder / "n1.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NodeLockError, match="cannot be opened"):
        lock_nodes(["n1"], folder)
    assert not (tmp_path / "elsewhere").exists()


def test_the_lock_folder_is_the_one_named_else_root_s_or_the_user_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lock_folder({"GPUDIAG_LOCK_DIR": "/srv/locks"}) == Path("/srv/locks")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert lock_folder({}) == Path("/run/gpudiag/locks")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert lock_folder({"XDG_RUNTIME_DIR": "/run/user/1000"}) == Path("/run/user/1000/gpudiag/locks")
    assert lock_folder({}) == Path("/tmp/gpudiag-1000/locks")
