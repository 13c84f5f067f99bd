"""Interrupts and store faults never cost the outputs: ``gpudiag sweep`` as a process, on a simulated
fleet, signalled at each phase (the node probes, the analysis and the final writes) and again while it
writes; and a store whose disk fills up half-way."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

NODES = 120
WRITING = "writing the sweep document"
SPEED_KINDS = ("slow_gpu", "slow_node", "slow_link")


def _fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": NODES, "seed": 5, "faults": [
        {"kind": "slow_gpu", "host": "node007", "gpu": 1, "factor": 0.8},
        {"kind": "throttled", "host": "node011", "gpu": 0, "reason": "hw_thermal", "factor": 0.7}]}))
    return path


class _Sweep:
    """``gpudiag sweep --simulate`` as a child process, its stderr read line by line as it comes."""

    def __init__(self, tmp_path: Path, store: Path, *extra: str) -> None:
        self.json, self.exclude = tmp_path / "sweep.json", tmp_path / "exclude.txt"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpudiag", "sweep", "--simulate", str(_fleet(tmp_path)), "--links", "none",
             "--json", str(self.json), "--exclude-file", str(self.exclude), "--store", str(store), *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip())

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait_for(self, text: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.said(text):
            assert self.process.poll() is None, f"ended before saying {text!r}: {self.lines[-5:]}"
            assert time.monotonic() < deadline, f"never said {text!r}: {self.lines[-5:]}"
            time.sleep(0.02)

    def signal_until_writing(self, signum: int, interval_s: float = 0.15) -> int:
        """Send ``signum`` again and again until it says it is writing the document; returns how many."""
        sent = 0
        while not self.said(WRITING) and self.process.poll() is None:
            self.process.send_signal(signum)
            sent += 1
            time.sleep(interval_s)
        return sent

    def finish(self) -> int:
        code = self.process.wait(timeout=120)
        self._reader.join(timeout=10)
        return code


def _stored_hosts(store: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(store) as db:
        return db.execute("SELECT host, status FROM hosts ORDER BY host").fetchall()


def _check_whole(document: dict, sweep: _Sweep) -> None:
    """Every host given appears once; the exclude list is the document's."""
    names = [host["host"] for host in document["hosts"]]
    assert len(names) == NODES == len(set(names))
    assert sweep.exclude.read_text().split() == document["impact"]["exclude"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupts_during_the_node_probes_and_again_while_it_writes_still_write_every_output(
        tmp_path: Path, signum: int):
    store = tmp_path / "gpudiag.db"
    sweep = _Sweep(tmp_path, store)
    # the node probes are under way (they take several seconds here), and so gpudiag's own handling
    # of the signal: a signal while Python itself still starts would test nothing of gpudiag's
    sweep.wait_for(" hosts done ")
    sweep.signal_until_writing(signum, interval_s=0.05)
    assert sweep.finish() == 130, sweep.lines[-8:]
    document = json.loads(sweep.json.read_text())
    _check_whole(document, sweep)
    statuses = {host["status"] for host in document["hosts"]}
    assert "interrupted" in statuses and document["summary"]["exit_code"] == 130
    # the hosts an interrupt stopped are listed as unfinished, apart: none of them is excluded for it
    unfinished = sorted(host["host"] for host in document["hosts"] if host["status"] == "interrupted")
    assert document["impact"]["unfinished"] == unfinished
    assert not set(document["impact"]["exclude"]) & set(unfinished)
    assert set(document["impact"]["exclude"]) <= {f["host"] for f in document["findings"] if f["severity"] == "fail"}
    # the hosts that never started are in the store too, each once
    stored = _stored_hosts(store)
    assert len(stored) == NODES == len({host for host, _ in stored})
    assert sorted(stored) == sorted((h["host"], h["status"]) for h in document["hosts"])
    # no re-test ran: a dip seen once is no finding of an interrupted sweep
    assert not [f for f in document["findings"] if f["kind"] in SPEED_KINDS and not f["confirmed"]]
    assert sweep.said("ending the probes") and sweep.said("analysing the"), sweep.lines


def test_an_interrupt_after_the_node_probes_lands_in_the_analysis_and_the_outputs_are_whole(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    sweep = _Sweep(tmp_path, store)
    sweep.wait_for(f"{NODES}/{NODES} hosts done")  # the last progress line: the first pass is over
    sent = sweep.signal_until_writing(signal.SIGINT, interval_s=0.02)
    assert sweep.finish() == 130, sweep.lines[-8:]
    assert sent >= 2  # a second and later Ctrl-C while it analysed and stored changed nothing
    document = json.loads(sweep.json.read_text())
    _check_whole(document, sweep)
    assert {host["status"] for host in document["hosts"]} == {"ok"}  # every host had finished
    assert sweep.said("finishing the analysis and writing what was gathered first")
    with sqlite3.connect(store) as db:
        (finished,) = db.execute("SELECT finished_at FROM sweeps").fetchone()
    assert finished is not None


def _may_mount() -> bool:
    """Root with CAP_SYS_ADMIN in its effective set (what mount(2) asks) and a mount command."""
    status = Path("/proc/self/status").read_text()
    effective = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    cap_sys_admin = 21
    return os.geteuid() == 0 and bool(effective >> cap_sys_admin & 1) and shutil.which("mount") is not None


@pytest.mark.skipif(not _may_mount(), reason="mounting a small tmpfs for the store needs root with CAP_SYS_ADMIN")
def test_a_store_whose_disk_fills_half_way_costs_warnings_never_the_sweep_or_its_document(tmp_path: Path):
    disk = tmp_path / "small-disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], capture_output=True,
                             text=True, check=False)
    assert mounted.returncode == 0, f"mount -t tmpfs: {mounted.stderr.strip()}"
    try:
        sweep = _Sweep(tmp_path, disk / "gpudiag.db", "-q")
        code = sweep.finish()
        document = json.loads(sweep.json.read_text())
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    assert code == 1, sweep.lines[-8:]  # the slow and the throttled GPU: the sweep itself completed
    _check_whole(document, sweep)
    assert {host["status"] for host in document["hosts"]} == {"ok"}
    warnings = document.get("warnings") or []
    assert any("could not record" in warning and "hosts" in warning for warning in warnings), warnings
    assert any("could not keep this sweep" in warning for warning in warnings), warnings
    assert sweep.said("gpudiag: warning: the store could not")
