"""The pair runner over real sessions: a net-server and a net-client started as a controller
starts them on two nodes (here both ends are LocalSessions on this machine, in the bundle root)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from sshd_hosts import descendant_pids

from gpudiag.bundle import locate_bundle
from gpudiag.links.remote import PairTestOptions, RemotePairRunner
from gpudiag.transport.local import LocalSession

FAST = PairTestOptions(backend="tcp", duration_s=0.3, streams=2, python=sys.executable)


def _pair_processes() -> list[int]:
    """This test process's pair servers and clients still running (LocalSession starts them as its children)."""
    found = []
    for pid in descendant_pids([os.getpid()]):
        try:
            if b" probes net-" in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" "):
                found.append(pid)
        except OSError:
            continue
    return found


def _sessions() -> dict[str, LocalSession]:
    root = locate_bundle().root
    return {name: LocalSession(root) for name in ("node01", "node02")}


def _runner(options: PairTestOptions = FAST, address: str = "127.0.0.1") -> tuple[RemotePairRunner, dict]:
    sessions = _sessions()
    return RemotePairRunner(sessions.get, {"node01": address, "node02": address}, options), sessions


def test_a_pair_is_measured_in_both_directions_and_reported_at_the_slower_one():
    runner, _ = _runner()
    (result,) = runner.run_pair("node01", "node02")
    assert (result.a, result.b, result.backend, result.rail, result.error) == ("node01", "node02", "tcp", None, None)
    assert result.gbps is not None and result.gbps > 0.05
    assert _pair_processes() == []


def test_the_line_rate_given_replaces_an_unknown_port_speed():
    runner, _ = _runner(PairTestOptions(backend="tcp", duration_s=0.2, streams=1, python=sys.executable,
                                        line_rate_gbps=25.0))
    (result,) = runner.run_pair("node01", "node02")
    assert result.line_rate_gbps == 25.0 and result.gbps is not None


def test_a_data_address_that_is_not_the_servers_own_is_its_error_not_a_figure():
    # TEST-NET-1 is no address of this machine: the server, bound to it, cannot listen, and says so at once.
    runner, _ = _runner(address="192.0.2.254")
    started = time.monotonic()
    (result,) = runner.run_pair("node01", "node02")
    assert result.gbps is None and result.fault == "node02"
    assert result.error.startswith("node02: the pair server did not start: cannot listen on 192.0.2.254: ")
    assert time.monotonic() - started < 15
    assert _pair_processes() == []


def test_a_server_that_cannot_start_and_a_host_without_a_session_are_errors(tmp_path: Path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ImportError: no module named probes' >&2\nexit 1\n")
    broken.chmod(0o755)
    runner, _ = _runner(PairTestOptions(backend="tcp", duration_s=0.2, python=str(broken)))
    (result,) = runner.run_pair("node01", "node02")
    assert result.error == "node02: the pair server did not start: ImportError: no module named probes"
    (missing,) = runner.run_pair("node01", "node09")
    assert missing.error == "node09: no open SSH session for the pair test"


def test_cancel_ends_a_pair_in_flight_and_leaves_no_process():
    runner, sessions = _runner(PairTestOptions(backend="tcp", duration_s=20, streams=1, python=sys.executable))
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(runner.run_pair("node01", "node02")))
    worker.start()
    deadline = time.monotonic() + 20
    while len(_pair_processes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    runner.cancel()
    for session in sessions.values():
        session.cancel()
    worker.join(30)
    assert not worker.is_alive() and results and results[0].gbps is None
    assert _pair_processes() == []
