"""A command started with ``Session.start`` (a pair server) has a stdin that stays open while its
controller holds it and reaches end of file when the controller dies: SIGKILL the controller, and a
command that reads stdin to its end finishes at once, over SSH (a real sshd) and on this machine.
``run`` commands keep stdin at /dev/null on this machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sshd_hosts import SshdFleet, pid_is_running

from gpudiag.hosts import HostSpec
from gpudiag.transport import RunningCommand, Session, TransportError
from gpudiag.transport.fleet import FleetConnector
from gpudiag.transport.local import LocalSession
from gpudiag.transport.ssh import SshSettings
from gpudiag.transport.sshconfig import SshOptions, resolve_all

ROOT = Path(__file__).resolve().parents[2]

# The controller, in a child process of its own: it starts the command, says so, and waits to be killed.
LOCAL_CONTROLLER = """
import sys, time
from gpudiag.transport.local import LocalSession
command = LocalSession().start(["sh", "-c", sys.argv[1]], 120.0)
print("started", flush=True)
time.sleep(120)
"""

SSH_CONTROLLER = """
import sys, time
from gpudiag.hosts import HostSpec
from gpudiag.transport.sshconfig import SshOptions, resolve_all
from gpudiag.transport.fleet import FleetConnector
from gpudiag.transport.ssh import SshSettings
options = SshOptions(config_file=sys.argv[2], known_hosts=sys.argv[3])
spec = HostSpec(sys.argv[4])
session = FleetConnector(resolve_all([spec], options), options, SshSettings()).connect(spec)
command = session.start(["sh", "-c", sys.argv[1]], 120.0)
print("started", flush=True)
time.sleep(120)
"""


def _reads_stdin_to_its_end(tmp_path: Path) -> tuple[str, Path, Path]:
    """Shell that notes its PID, reads stdin to its end, then leaves a marker; (shell, PID file, marker)."""
    pid_file, marker = tmp_path / "reader.pid", tmp_path / "stdin-ended"
    return f"echo $$ > {pid_file}; cat >/dev/null; echo eof > {marker}", pid_file, marker


def _wait_for(path: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


def _kill_controller_and_see_stdin_end(argv: list[str], pid_file: Path, marker: Path) -> float:
    """Start the controller, check its command holds on (stdin open), SIGKILL it; returns the seconds
    until the command saw the end of its stdin. Fails if it never did."""
    controller = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert controller.stdout is not None
        assert controller.stdout.readline().strip() == "started", controller.stderr.read() if controller.stderr else ""
        assert _wait_for(pid_file, 30.0) and pid_file.read_text().strip()
        time.sleep(1.0)
        assert not marker.exists(), "stdin reached its end while the controller still held the command"
        killed = time.monotonic()
        os.kill(controller.pid, signal.SIGKILL)
        assert _wait_for(marker, 30.0), "the command's stdin never reached its end after the controller died"
        return time.monotonic() - killed
    finally:
        controller.kill()
        controller.communicate()


def _ended(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while pid_is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not pid_is_running(pid)


def test_a_started_command_on_this_machine_sees_its_stdin_end_when_the_controller_is_killed(tmp_path: Path):
    shell, pid_file, marker = _reads_stdin_to_its_end(tmp_path)
    seconds = _kill_controller_and_see_stdin_end([sys.executable, "-c", LOCAL_CONTROLLER, shell], pid_file, marker)
    assert seconds < 10.0
    assert _ended(int(pid_file.read_text()))


def test_a_started_command_over_ssh_sees_its_stdin_end_when_the_controller_is_killed(make_sshd_fleet,
                                                                                    tmp_path: Path):
    fleet: SshdFleet = make_sshd_fleet(1)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    shell, pid_file, marker = _reads_stdin_to_its_end(tmp_path)
    argv = [sys.executable, "-c", SSH_CONTROLLER, shell, str(config), str(known), "node01"]
    seconds = _kill_controller_and_see_stdin_end(argv, pid_file, marker)
    assert seconds < 20.0
    assert _ended(int(pid_file.read_text()))


def test_finish_and_cancel_close_a_started_commands_stdin_and_run_keeps_it_at_dev_null(tmp_path: Path):
    session = LocalSession()
    shell, pid_file, marker = _reads_stdin_to_its_end(tmp_path)
    held = session.start(["sh", "-c", shell], 60.0)
    assert held.finish(1.0).timed_out  # stdin open: it was still reading when its time was up
    assert _ended(int(pid_file.read_text()))
    cancelled = session.start(["sh", "-c", "cat; echo after"], 60.0)
    cancelled.cancel()
    ended = cancelled.finish(10.0)
    assert ended.exit_status != 0 and "after" not in ended.stdout  # killed, not at the end of its stdin
    ran = LocalSession().run(["sh", "-c", "cat; echo after-eof"], 30.0)
    assert (ran.exit_status, ran.stdout, ran.timed_out) == (0, "after-eof\n", False)


def _sends_a_secret_line(session: Session) -> None:
    """A started command gets a line on its stdin (a secret kept off its command line); a line break
    in the text is refused, and writing to a command that ended is a TransportError."""
    command: RunningCommand = session.start(["sh", "-c", "read secret; echo \"got $secret\""], 30.0)
    with pytest.raises(ValueError, match="one line only"):
        command.send_line("two\nlines")
    command.send_line("0123abcd")
    assert command.first_line(30.0) == "got 0123abcd"
    ended = command.finish(30.0)
    assert (ended.exit_status, ended.stdout) == (0, "got 0123abcd\n")
    with pytest.raises(TransportError):
        command.send_line("too late")


def test_a_line_written_to_a_started_commands_stdin_reaches_it_here_and_over_ssh(make_sshd_fleet,
                                                                                 tmp_path: Path):
    _sends_a_secret_line(LocalSession())
    fleet: SshdFleet = make_sshd_fleet(1)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    options = SshOptions(config_file=str(config), known_hosts=str(known))
    spec = HostSpec("node01")
    connector = FleetConnector(resolve_all([spec], options), options, SshSettings())
    session = connector.connect(spec)
    try:
        _sends_a_secret_line(session)
    finally:
        session.close()
        connector.close()
