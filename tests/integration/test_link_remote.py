"""The pair runner over real sessions: a net-server and a net-client started as a controller
starts them on two nodes (here both ends are LocalSessions on this machine, in the bundle root)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from sshd_hosts import process_count_matching

from gpudiag.bundle import locate_bundle
from gpudiag.links.remote import PairTestOptions, RemotePairRunner
from gpudiag.transport.local import LocalSession

FAST = PairTestOptions(backend="tcp", duration_s=0.3, streams=2, python=sys.executable)


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
    assert process_count_matching(r"probes net-(server|client)") == 0


def test_the_line_rate_given_replaces_an_unknown_port_speed():
    runner, _ = _runner(PairTestOptions(backend="tcp", duration_s=0.2, streams=1, python=sys.executable,
                                        line_rate_gbps=25.0))
    (result,) = runner.run_pair("node01", "node02")
    assert result.line_rate_gbps == 25.0 and result.gbps is not None


def test_an_unreachable_data_address_is_an_error_naming_the_cause_not_a_figure():
    # TEST-NET-1 is never routed: the client's connect times out within its deadline.
    runner, _ = _runner(address="192.0.2.254")
    started = time.monotonic()
    (result,) = runner.run_pair("node01", "node02")
    assert result.gbps is None and result.error and "192.0.2.254" in result.error
    assert time.monotonic() - started < FAST.deadline_s + 15
    assert process_count_matching(r"probes net-(server|client)") == 0


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
    while process_count_matching(r"probes net-client") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    runner.cancel()
    for session in sessions.values():
        session.cancel()
    worker.join(30)
    assert not worker.is_alive() and results and results[0].gbps is None
    assert process_count_matching(r"probes net-(server|client)") == 0
