"""Reaching nodes the way ``ssh`` does, on real sshd hosts (sshd_hosts.py): ProxyCommand (``nc %h %p``,
``ssh -W``), jump hosts that have jump hosts of their own, comma chains, ``ssh://`` and bracketed IPv6
jump hosts, and the probe bundle's staging folder when two hosts share one home.

Which hop carried a connection is read from the sshd logs: at LogLevel DEBUG1 a jump host logs each
forwarded channel as ``target ADDRESS port PORT``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sshd_hosts import (
    SESSION_MARKER,
    SshdFleet,
    TestHost,
    descendant_pids,
    generate_ed25519_key,
    marked_pids,
    pid_is_running,
    process_ids_matching,
    sshd_config_text,
)

from gpudiag.bundle import Bundle
from gpudiag.cli.main import main
from gpudiag.hosts import HostSpec
from gpudiag.transport.fleet import FleetConnector
from gpudiag.transport.ssh import SshSettings
from gpudiag.transport.sshconfig import ResolvedFleet, SshOptions, resolve_host

# Hosts on one machine's two cores are no fleet to compare: no key gets enough peers, and the
# test run's own load must not make a host a starved node.
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')


def _write(fleet: SshdFleet, tmp_path: Path, extra: dict[str, str], names: list[str],
           extra_known_hosts: str = "") -> dict[str, Path]:
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    with known_hosts.open("a") as handle:
        handle.write(extra_known_hosts)
    config = fleet.write_ssh_config(tmp_path / "ssh_config", extra_by_host=extra, known_hosts_path=known_hosts)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt", names)
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    return {"known_hosts": known_hosts, "config": config, "hosts": hosts, "thresholds": thresholds,
            "json": tmp_path / "sweep.json", "store": tmp_path / "gpudiag.db"}


def _sweep_args(fleet: SshdFleet, paths: dict[str, Path], python: str = sys.executable) -> list[str]:
    return ["sweep", "--hosts", str(paths["hosts"]), "--ssh-config", str(paths["config"]),
            "--known-hosts", str(paths["known_hosts"]), "-i", str(fleet.client_key_path),
            "--thresholds", str(paths["thresholds"]), "--store", str(paths["store"]), "--python", python,
            "--probes", "facts", "--links", "none", "--json", str(paths["json"]), "-q"]


def _sweep(fleet: SshdFleet, paths: dict[str, Path]) -> tuple[int, dict[str, tuple[str, str | None]], str]:
    """Run a sweep in this process; returns (exit code, host → (status, error), output)."""
    result = CliRunner().invoke(main, _sweep_args(fleet, paths), catch_exceptions=False)
    document = json.loads(paths["json"].read_text())
    return result.exit_code, {h["host"]: (h["status"], h["error"]) for h in document["hosts"]}, result.output


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _forwarded_to(jump: TestHost, target: TestHost) -> bool:
    """Whether ``jump``'s sshd forwarded a channel to ``target`` (its log at DEBUG1)."""
    return f"target {target.address} port {target.port}" in jump.log_path.read_text(errors="replace")


def _logins(host: TestHost) -> int:
    return host.log_path.read_text(errors="replace").count("Accepted publickey")


@pytest.fixture(autouse=True)
def _marked(monkeypatch) -> None:
    """Every process this test's controller starts (a ProxyCommand, an orphan too) carries a marker
    of its own in its environment, by which ``_local_pids`` finds it and no other test run's."""
    monkeypatch.setenv(SESSION_MARKER, uuid.uuid4().hex)


def _local_pids(pattern: str) -> set[int]:
    """This test's controller-side processes (ProxyCommands) whose command line matches ``pattern``."""
    return process_ids_matching(pattern, marked_pids(os.environ[SESSION_MARKER]))


def _nc_pids(fleet: SshdFleet) -> set[int]:
    ports = "|".join(str(host.port) for host in fleet.hosts)
    return _local_pids(rf"^nc 127\.0\.1\.\d+ ({ports})$")


# --- ProxyCommand ----------------------------------------------------------------------------------


def test_a_proxy_command_carries_the_connection_with_its_tokens_expanded(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(4, log_level="DEBUG1")
    calls = tmp_path / "proxy-calls"
    logging_nc = _script(tmp_path / "logging-nc", f'echo "$@" >> {calls}\nexec nc "$1" "$2"\n')
    extra = {"node01": "ProxyCommand nc %h %p",
             "node02": f"ProxyCommand {logging_nc} %h %p %r %n 100%%",
             "node03": f"ProxyCommand ssh -F {tmp_path / 'ssh_config'} -W %h:%p node01",
             "node04": "ProxyJump node01"}  # a jump host reached by its own ProxyCommand
    paths = _write(fleet, tmp_path, extra, fleet.host_names())

    code, hosts, output = _sweep(fleet, paths)

    assert {name: status for name, (status, _) in hosts.items()} == dict.fromkeys(fleet.host_names(), "ok"), output
    node01, node02, node03, node04 = fleet.hosts
    assert calls.read_text() == f"{node02.address} {node02.port} {fleet.user} node02 100%\n"
    assert _forwarded_to(node01, node03)  # ssh -W through node01
    assert _forwarded_to(node01, node04)
    assert not _nc_pids(fleet) and not _local_pids(rf"ssh -F \S+ -W {node03.address}")


def test_a_failing_proxy_command_is_that_hosts_status_with_its_own_words(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(4)
    refusing = _script(tmp_path / "refusing-proxy", "echo 'bastion says: access denied for this project' >&2\n"
                                                    "exit 3\n")
    extra = {"node01": "ProxyCommand nc %h %p",
             "node02": "ProxyCommand gpudiag-no-such-proxy %h %p",
             "node03": f"ProxyCommand {refusing} %h %p",
             "node04": "ProxyCommand nc %h %x"}
    paths = _write(fleet, tmp_path, extra, ["node01", "node02", "node03", "node04"])

    code, hosts, output = _sweep(fleet, paths)

    # a proxy command that exits is not waited out as a banner timeout (15 s): each such host took a
    # small part of that, whatever the reachable host's probes cost on a loaded machine
    took = {host["host"]: host["duration_s"] for host in json.loads(paths["json"].read_text())["hosts"]}
    assert all(took[name] < 7.5 for name in ("node02", "node03", "node04")), took
    assert code == 3, output
    assert {name: status for name, (status, _) in hosts.items()} == {
        "node01": "ok", "node02": "unreachable", "node03": "unreachable", "node04": "unreachable"}
    assert "exited with status 127" in hosts["node02"][1] and "gpudiag-no-such-proxy: not found" in hosts["node02"][1]
    assert "exited with status 3: bastion says: access denied for this project" in hosts["node03"][1]
    assert "%x is not a token ssh expands there" in hosts["node04"][1]
    assert _logins(fleet.host("node04")) == 0


def test_closing_a_session_or_the_connector_ends_its_proxy_command(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    paths = _write(fleet, tmp_path, {"node01": "ProxyCommand nc %h %p", "node02": "ProxyCommand nc %h %p"},
                   ["node01", "node02"])
    options = SshOptions(config_file=str(paths["config"]), known_hosts=str(paths["known_hosts"]))
    resolved = {name: resolve_host(HostSpec(name), options) for name in ("node01", "node02")}
    connector = FleetConnector(ResolvedFleet(resolved, {}), options, SshSettings())
    try:
        first = connector.connect(HostSpec("node01"))
        second = connector.connect(HostSpec("node02"))
        assert first.run(["true"], 10).exit_status == 0 and second.run(["true"], 10).exit_status == 0
        proxies = {pid for pid in descendant_pids([os.getpid()]) if pid in _nc_pids(fleet)}
        assert len(proxies) == 2
        first.close()
        assert len([pid for pid in proxies if pid_is_running(pid)]) == 1
    finally:
        connector.close()  # second is still open: the connector ends its command too
    assert not [pid for pid in proxies if pid_is_running(pid)]


def test_ctrl_c_ends_the_remote_probes_through_the_proxy_and_then_the_proxy(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    paths = _write(fleet, tmp_path, {"node01": "ProxyCommand nc %h %p", "node02": "ProxyCommand nc %h %p"},
                   ["node01", "node02"])
    nap = f"{300 + time.monotonic_ns() % 9000}"  # a sleep no other test runs
    hang = _script(tmp_path / "python", f"exec sleep {nap}\n")
    # Its own process group, signalled as a whole: what Ctrl-C at a terminal does.
    process = subprocess.Popen([sys.executable, "-m", "gpudiag", *_sweep_args(fleet, paths, python=hang)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # however busy the machine: both probes hang on their nodes first
        while len(fleet.processes_matching(f"^sleep {nap}$")) < 2 and time.monotonic() < deadline \
                and process.poll() is None:
            time.sleep(0.1)
        assert len(fleet.processes_matching(f"^sleep {nap}$")) == 2, "the probes never started on both nodes"
        assert len(_nc_pids(fleet)) == 2
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    statuses = {host["host"]: host["status"] for host in json.loads(paths["json"].read_text())["hosts"]}
    assert statuses == {"node01": "interrupted", "node02": "interrupted"}
    # the probes were ended on the nodes (over the proxied connections), and no proxy was left behind;
    # the node's `timeout` passes the TERM on to its child a moment after `kill` returned
    deadline = time.monotonic() + 5
    while fleet.processes_matching(f"^sleep {nap}$") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not fleet.processes_matching(f"^sleep {nap}$")
    assert not _nc_pids(fleet)


# --- ProxyJump -------------------------------------------------------------------------------------


def test_a_jump_host_with_a_jump_host_of_its_own_is_reached_through_it(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3, log_level="DEBUG1")
    j1, j2, target = fleet.host("node01"), fleet.host("node02"), fleet.host("node03")
    # the target's block knows only j2; j2's knows j1; j1's knows nothing of either
    paths = _write(fleet, tmp_path, {"node03": "ProxyJump node02", "node02": "ProxyJump node01"}, ["node03"])

    code, hosts, output = _sweep(fleet, paths)

    assert hosts == {"node03": ("ok", None)}, output
    assert _forwarded_to(j1, j2) and not _forwarded_to(j1, target)
    assert _forwarded_to(j2, target)
    assert (_logins(j1), _logins(j2), _logins(target)) == (1, 1, 1)


def test_a_comma_chain_is_followed_in_order(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3, log_level="DEBUG1")
    j1, j2, target = fleet.host("node01"), fleet.host("node02"), fleet.host("node03")
    paths = _write(fleet, tmp_path, {"node03": "ProxyJump node01,node02"}, ["node03"])

    code, hosts, output = _sweep(fleet, paths)

    assert hosts == {"node03": ("ok", None)}, output
    assert _forwarded_to(j1, j2) and not _forwarded_to(j1, target)
    assert _forwarded_to(j2, target)


@pytest.fixture
def ipv6_jump_host(make_sshd_fleet) -> Iterator[tuple[SshdFleet, TestHost]]:
    """A 3-host fleet and one more sshd on [::1] that accepts its client key (LogLevel DEBUG1)."""
    fleet = make_sshd_fleet(3, log_level="DEBUG1")
    assert fleet.directory is not None
    folder = fleet.directory / "v6"
    folder.mkdir()
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        port = int(probe.getsockname()[1])
    key_line = generate_ed25519_key(folder / "ssh_host_ed25519_key", "v6")
    host = TestHost("v6", "[::1]", port, folder / "ssh_host_ed25519_key", key_line, folder / "authorized_keys",
                    folder / "sshd.log")
    host.authorized_keys_path.write_text(Path(f"{fleet.client_key_path}.pub").read_text())
    host.config_path.write_text(sshd_config_text(host, "DEBUG1", fleet.marker, {"HOME": str(fleet.home)}))
    host.start()
    try:
        _wait_for_port(("::1", port), 10.0)
        yield fleet, host
    finally:
        host.stop()
    assert host.process is not None and not pid_is_running(host.process.pid)


def _wait_for_port(address: tuple[str, int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(address, timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_uri_and_bracketed_ipv6_jump_hosts_reach_the_right_host_user_and_port(ipv6_jump_host, tmp_path: Path):
    fleet, v6 = ipv6_jump_host
    node01, node02, node03 = (fleet.host(name) for name in ("node01", "node02", "node03"))
    key_line = f"[::1]:{v6.port} {v6.host_public_key_line}\n"
    paths = _write(fleet, tmp_path, {
        "node02": f"ProxyJump ssh://{fleet.user}@{node01.address}:{node01.port}",  # no block names the jump host
        "node03": f"ProxyJump {fleet.user}@[::1]:{v6.port}",
    }, ["node02", "node03"], extra_known_hosts=key_line)

    code, hosts, output = _sweep(fleet, paths)

    assert hosts == {"node02": ("ok", None), "node03": ("ok", None)}, output
    assert _forwarded_to(node01, node02) and not _forwarded_to(node01, node03)
    assert _forwarded_to(v6, node03) and not _forwarded_to(v6, node02)
    assert _logins(v6) == 1

    # a chain that starts at the IPv6 host and goes on to a URI (ssh 9.2 refuses ssh://[v6]: not used here)
    paths["json"].unlink()
    paths["config"].write_text(paths["config"].read_text().replace(
        f"ProxyJump {fleet.user}@[::1]:{v6.port}", f"ProxyJump [::1]:{v6.port},ssh://{fleet.user}@node01"))
    paths["hosts"].write_text("node03\n")
    code, hosts, output = _sweep(fleet, paths)
    assert hosts == {"node03": ("ok", None)}, output
    assert _forwarded_to(v6, node01) and _forwarded_to(node01, node03)


# --- the probe bundle on a shared home -------------------------------------------------------------


def test_hosts_that_share_a_home_ship_the_bundle_once_and_the_loser_removes_its_staging(
        make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    paths = _write(fleet, tmp_path, {}, ["node01", "node02"])
    # A bundle of its own (a fresh hash), large enough that both hosts are still copying when the
    # first renames its copy into place: both stage, one loses the rename.
    root = tmp_path / "bundle"
    (root / "probes").mkdir(parents=True)
    (root / "probes" / "__init__.py").write_bytes(os.urandom(16))
    (root / "probes" / "ballast.py").write_bytes(os.urandom(24 * 1024 * 1024))
    bundle = Bundle(root=root, files=(Path("probes/__init__.py"), Path("probes/ballast.py")))
    cache = Path.home() / ".cache" / "gpudiag"
    name = f"bundle-{bundle.content_hash[:16]}"
    options = SshOptions(config_file=str(paths["config"]), known_hosts=str(paths["known_hosts"]))
    resolved = {host: resolve_host(HostSpec(host), options) for host in ("node01", "node02")}
    connector = FleetConnector(ResolvedFleet(resolved, {}), options, SshSettings())
    staged: set[str] = set()
    watching = threading.Event()
    watching.set()

    def watch() -> None:
        while watching.is_set():
            staged.update(entry.name for entry in os.scandir(cache) if entry.name.startswith(f"{name}.tmp-"))
            time.sleep(0.01)

    try:
        sessions = [connector.connect(HostSpec(host)) for host in ("node01", "node02")]
        cache.mkdir(parents=True, exist_ok=True)
        watcher = threading.Thread(target=watch)
        watcher.start()
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def ship(session) -> None:
            start.wait()
            try:
                session.prepare(bundle)
            except OSError as error:
                errors.append(error)

        shippers = [threading.Thread(target=ship, args=(session,)) for session in sessions]
        for shipper in shippers:
            shipper.start()
        for shipper in shippers:
            shipper.join(120)
        watching.clear()
        watcher.join()
        assert not errors
        assert len(staged) == 2  # both hosts staged a copy: the race was run
        left = sorted(entry for entry in os.listdir(cache) if entry.startswith(name))
        assert left == [name]  # the loser removed its staging folder
        assert (cache / name / ".complete").read_text() == bundle.content_hash
        assert (cache / name / "probes" / "ballast.py").read_bytes() == (root / "probes" / "ballast.py").read_bytes()
        for session in sessions:  # both run from the winner's copy
            assert session.run(["ls", "probes/ballast.py"], 10).exit_status == 0
    finally:
        watching.clear()
        connector.close()
        for entry in os.listdir(cache) if cache.exists() else ():
            if entry.startswith(name):
                subprocess.run(["rm", "-rf", str(cache / entry)], check=True)
