"""A node cannot exhaust the controller, and nothing a node printed is lost: real sshd hosts (and this
machine) whose node Python prints one endless line, or endless valid-looking records, are a
``probe_error`` naming the cap while the sweep goes on; the command is ended on the node; a command
that prints many lines and exits at once is read to its last line.

The controller runs in a child process under an address-space limit (limited_run.py): a regression
that keeps a node's output fails these tests instead of taking the machine down."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from limited_run import run_limited
from sshd_hosts import SshdFleet, pid_is_running

from gpudiag.hosts import HostSpec
from gpudiag.transport import Session
from gpudiag.transport.bounded import MIB, OutputLimits
from gpudiag.transport.fleet import FleetConnector
from gpudiag.transport.local import LocalSession
from gpudiag.transport.ssh import ConnectionLost, SshSettings
from gpudiag.transport.sshconfig import SshOptions, resolve_all

ROOT = Path(__file__).resolve().parents[2]
RECORD = ('{"probe": "gemm", "device": "cuda:0", "metric": "tflops", "value": 700.0, "unit": "TFLOP/s", '
          '"status": "ok"}')
# These tests are about what a host printed, not about judging its figures (see test_sweep_ssh.py).
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')
# A controller reading bounded output stays far below this; one keeping an endless line would not.
PEAK_RSS_LIMIT_KIB = 600 * 1024


def _endless_line(pid_file: Path) -> str:
    """Shell that notes its PID, then becomes a program printing one line that never ends."""
    return f"echo $$ > {pid_file}; exec tr '\\0' x </dev/zero"


def _endless_records(pid_file: Path) -> str:
    """Shell that notes its PID, then becomes ``yes`` printing a valid-looking record forever."""
    return f"echo $$ > {pid_file}; exec yes '{RECORD}'"


def _wrapper(tmp_path: Path, fleet: SshdFleet | None, misbehaviour: dict[str, str]) -> str:
    """A node Python that runs ``misbehaviour[name]`` (shell) on host ``name``, told apart by the
    server address of its SSH connection, and the real Python everywhere else. Without a fleet
    (this machine) it runs the one misbehaviour given."""
    wrapper = tmp_path / "python"
    if fleet is None:
        (shell,) = misbehaviour.values()
        wrapper.write_text(f"#!/bin/sh\n{shell}\n")
    else:
        branches = "".join(f'  *" {fleet.host(name).address} "*) {shell} ;;\n' for name, shell in misbehaviour.items())
        wrapper.write_text(f'#!/bin/sh\ncase "$SSH_CONNECTION" in\n{branches}  *) exec {sys.executable} "$@" ;;\n'
                           f"esac\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def _ended(pid_file: Path, timeout_s: float = 10.0) -> bool:
    """Whether the process whose PID ``pid_file`` holds has ended (waiting at most ``timeout_s``)."""
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + timeout_s
    while pid_is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not pid_is_running(pid)


def _fleet_files(fleet: SshdFleet, tmp_path: Path) -> list[str]:
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt")
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    return ["--hosts", str(hosts), "--ssh-config", str(config), "--known-hosts", str(known),
            "--thresholds", str(thresholds)]


def _connect(fleet: SshdFleet, tmp_path: Path, name: str, limits: OutputLimits) -> tuple[FleetConnector, Session]:
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    options = SshOptions(config_file=str(config), known_hosts=str(known))
    spec = HostSpec(name)
    connector = FleetConnector(resolve_all([spec], options), options, SshSettings(output=limits))
    return connector, connector.connect(spec)


def test_a_sweep_with_a_host_printing_an_endless_line_and_one_printing_endless_records_goes_on(
        make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(4)
    line_pid, records_pid = tmp_path / "line.pid", tmp_path / "records.pid"
    python = _wrapper(tmp_path, fleet, {"node02": _endless_line(line_pid), "node03": _endless_records(records_pid)})
    document = tmp_path / "sweep.json"
    run = run_limited([sys.executable, "-m", "gpudiag", "sweep", *_fleet_files(fleet, tmp_path), "--no-store",
                       "--python", python, "--probes", "facts", "--links", "none", "--json", str(document), "-q"],
                      timeout_s=240, cwd=ROOT)
    assert run.returncode == 3, run.stderr[-3000:]
    hosts = {host["host"]: host for host in json.loads(document.read_text())["hosts"]}
    assert {name: host["status"] for name, host in hosts.items()} == {
        "node01": "ok", "node02": "probe_error", "node03": "probe_error", "node04": "ok"}, run.stderr[-3000:]
    assert "a line longer than 1 MiB" in hosts["node02"]["error"]
    assert "more than 16 MiB of output" in hosts["node03"]["error"]
    assert "--max-output-mib" in hosts["node03"]["error"]  # the fix, where the output is genuine
    assert _ended(line_pid) and _ended(records_pid)  # ended on the node, not left printing
    assert run.peak_rss_kib < PEAK_RSS_LIMIT_KIB, f"controller peak {run.peak_rss_kib} KiB"
    assert run.wall_s < 120


def test_the_caps_are_settable_on_the_command_line(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    records_pid = tmp_path / "records.pid"
    python = _wrapper(tmp_path, fleet, {"node02": _endless_records(records_pid)})
    document = tmp_path / "sweep.json"
    run = run_limited([sys.executable, "-m", "gpudiag", "sweep", *_fleet_files(fleet, tmp_path), "--no-store",
                       "--python", python, "--probes", "facts", "--links", "none", "--max-output-mib", "2",
                       "--max-line-kib", "64", "--json", str(document), "-q"], timeout_s=240, cwd=ROOT)
    assert run.returncode == 3, run.stderr[-3000:]
    hosts = {host["host"]: host for host in json.loads(document.read_text())["hosts"]}
    assert hosts["node01"]["status"] == "ok"  # its records are far below 2 MiB
    assert hosts["node02"]["status"] == "probe_error"
    assert "more than 2 MiB of output (the cap: 2 MiB of output, 64 KiB a line)" in hosts["node02"]["error"]
    assert _ended(records_pid)


def test_the_command_past_a_cap_is_ended_on_the_node_while_the_connection_stays(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(1)
    limits = OutputLimits(max_bytes=1 * MIB, max_line_bytes=64 * 1024)
    connector, session = _connect(fleet, tmp_path, "node01", limits)
    try:
        for name, shell, cap in (("line", _endless_line, "a line longer than 64 KiB"),
                                 ("records", _endless_records, "more than 1 MiB of output")):
            pid_file = tmp_path / f"{name}.pid"
            result = session.run(["sh", "-c", shell(pid_file)], 60.0)
            assert result.overflow is not None and cap in result.overflow
            assert result.exit_status is None and not result.timed_out
            assert len(result.stdout) <= limits.max_bytes
            assert session.is_open() and _ended(pid_file)  # killed, not left to the connection's end
        assert session.run(["echo", "fine"], 10.0).stdout == "fine\n"
    finally:
        session.close()
        connector.close()


def test_a_command_that_prints_many_lines_and_exits_at_once_is_read_to_its_last_line(make_sshd_fleet,
                                                                                    tmp_path: Path):
    fleet = make_sshd_fleet(1)
    connector, session = _connect(fleet, tmp_path, "node01", OutputLimits())
    print_records = "seq 1 2000 | sed 's/.*/{\"probe\": \"gemm\", \"n\": &}/'; printf last >&2; exit 0"
    try:
        for attempt in range(40):
            result = session.run(["sh", "-c", print_records], 60.0)
            lines = result.stdout.splitlines()
            assert (result.exit_status, len(lines)) == (0, 2000), f"run {attempt}: {len(lines)} lines"
            assert lines[-1] == '{"probe": "gemm", "n": 2000}' and result.stderr == "last"
    finally:
        session.close()
        connector.close()


def test_output_a_child_writes_after_the_command_exited_is_read_before_the_exit_status(make_sshd_fleet,
                                                                                      tmp_path: Path):
    # The exit status arrives before the end of the output: the child holds the pipe half a second more.
    fleet = make_sshd_fleet(1)
    connector, session = _connect(fleet, tmp_path, "node01", OutputLimits())
    try:
        result = session.run(["sh", "-c", "(sleep 0.5; echo late; echo late-error >&2) & echo early; exit 0"], 30.0)
        assert (result.exit_status, result.stdout, result.stderr) == (0, "early\nlate\n", "late-error\n")
        local = LocalSession().run(["sh", "-c", "(sleep 0.5; echo late) & echo early; exit 0"], 30.0)
        assert (local.exit_status, local.stdout) == (0, "early\nlate\n")
    finally:
        session.close()
        connector.close()


def test_a_connection_that_breaks_before_the_end_of_the_output_is_lost_never_a_short_result(make_sshd_fleet,
                                                                                           tmp_path: Path):
    fleet = make_sshd_fleet(1)
    connector, session = _connect(fleet, tmp_path, "node01", OutputLimits())
    outcome: list[object] = []
    try:
        runner = threading.Thread(target=lambda: outcome.append(_run_or_error(session)))
        runner.start()
        time.sleep(2.0)
        fleet.host("node01").stop()  # the node goes away mid-command (its sessions die with its sshd)
        runner.join(60.0)
        assert not runner.is_alive()
        (error,) = outcome
        assert isinstance(error, ConnectionLost), error
        assert "the SSH connection broke during a command" in str(error)
    finally:
        session.close()
        connector.close()


def _run_or_error(session: Session) -> object:
    try:
        return session.run(["sh", "-c", "echo first; sleep 60; echo never"], 120.0)
    except ConnectionLost as error:
        return error


def test_gpudiag_probe_on_this_machine_ends_an_endless_line_at_the_cap(tmp_path: Path):
    pid_file = tmp_path / "line.pid"
    python = _wrapper(tmp_path, None, {"localhost": _endless_line(pid_file)})
    run = run_limited([sys.executable, "-m", "gpudiag", "probe", "--python", python, "facts"], timeout_s=120, cwd=ROOT)
    assert run.returncode == 3, run.stderr[-2000:]
    assert "localhost: the node printed a line longer than 1 MiB" in run.stderr
    assert _ended(pid_file)
    assert run.peak_rss_kib < PEAK_RSS_LIMIT_KIB


def test_endless_records_on_this_machine_are_ended_at_the_cap_of_the_local_session(tmp_path: Path):
    pid_file = tmp_path / "records.pid"
    session = LocalSession(limits=OutputLimits(max_bytes=1 * MIB, max_line_bytes=4096))
    result = session.run(["sh", "-c", _endless_records(pid_file)], 60.0)
    assert result.overflow is not None and "more than 1 MiB of output" in result.overflow
    assert result.stdout.endswith(RECORD + "\n") and len(result.stdout) <= MIB
    assert _ended(pid_file)
