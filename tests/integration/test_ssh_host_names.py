"""A host name that would run a command in a ProxyCommand never reaches one, on real sshd hosts (sshd_hosts.py),
with the ``ssh`` binary (``ssh -G`` resolves) and without it (the paramiko fallback resolves): from the hosts
file (an IPv6 scope id ``%$(...)``) the sweep ends with exit 2 before any host is contacted; from the ssh config
(HostName, User, a ProxyJump hop) that host alone is ``unreachable`` naming the config line, and the others are
swept. In every case the file the command would create is absent.

Each ProxyCommand runs in the test's own directory (the sweep runs in this process, chdir'd there), so the
payloads create ``pwned`` there; names are lowercased on the way (ssh lowercases host names), so the
payloads hold no capital letter.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sshd_hosts import SshdFleet

from gpudiag.cli.main import main

NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')
PWNED = "pwned"
RESOLVERS = pytest.mark.parametrize("resolver", [
    pytest.param("ssh-G", marks=pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")),
    "paramiko"])


def _use(resolver: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the test from ``tmp_path``; for the paramiko fallback, with a PATH that has no ``ssh`` but the
    commands a ProxyCommand (and a payload) would run."""
    monkeypatch.chdir(tmp_path)
    if resolver == "paramiko":
        no_ssh = tmp_path / "bin"
        no_ssh.mkdir()
        for command in ("nc", "touch"):
            found = shutil.which(command)
            assert found is not None, command
            (no_ssh / command).symlink_to(found)
        monkeypatch.setenv("PATH", str(no_ssh))  # no ssh to ask: paramiko's parser reads the file
        assert shutil.which("ssh") is None


def _write(fleet: SshdFleet, tmp_path: Path, first_lines: str, extra_hosts: str = "") -> dict[str, Path]:
    """The harness's files; ``first_lines`` open the ssh config (ssh takes a setting's first value) and
    ``extra_hosts`` end the hosts file."""
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known_hosts)
    config.write_text(first_lines + "\n" + config.read_text())
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt")
    hosts.write_text(hosts.read_text() + extra_hosts)
    (tmp_path / "thresholds.json").write_text(NO_COMPARISON)
    return {"config": config, "hosts": hosts, "json": tmp_path / "sweep.json"}


def _sweep(paths: dict[str, Path]) -> Result:
    folder = paths["hosts"].parent
    args = ["sweep", "--hosts", str(paths["hosts"]), "--ssh-config", str(paths["config"]),
            "--thresholds", str(folder / "thresholds.json"), "--store", str(folder / "gpudiag.db"),
            "--python", sys.executable, "--probes", "facts", "--links", "none", "--json", str(paths["json"]), "-q"]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def _hosts(paths: dict[str, Path]) -> dict[str, tuple[str, str | None]]:
    document = json.loads(paths["json"].read_text())
    return {host["host"]: (host["status"], host["error"]) for host in document["hosts"]}


def _contacted(fleet: SshdFleet, name: str) -> bool:
    return "Connection from" in fleet.host(name).log_path.read_text(errors="replace")


@RESOLVERS
def test_a_hosts_file_scope_id_that_runs_a_command_ends_the_sweep_before_any_host(
        make_sshd_fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolver: str):
    fleet = make_sshd_fleet(2)
    # every host goes through a ProxyCommand: %h is where the scope id would run
    paths = _write(fleet, tmp_path, "Host *\n    ProxyCommand nc %h %p\n",
                   extra_hosts=f"[fe80::1%$(>{PWNED})]:{fleet.hosts[0].port}\n")
    _use(resolver, tmp_path, monkeypatch)

    result = _sweep(paths)

    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"gpudiag: error: {paths['hosts']}:3: host name 'fe80::1%$(>{PWNED})' contains '$'")
    assert "; fix: " in line
    assert not (tmp_path / PWNED).exists()
    assert not paths["json"].exists() and not any(_contacted(fleet, name) for name in fleet.host_names())


@RESOLVERS
@pytest.mark.parametrize(("block", "where", "said"), [
    # the space needs the quotes; ssh wants %% for a literal % in HostName (the fallback as well)
    ('    HostName "fe80::1%%$(touch pwned)"\n    ProxyCommand nc %h %p\n', 2,
     "HostName 'fe80::1%$(touch pwned)' contains '$'"),
    # OpenSSH allows '$' in a user name, not '(': a command substitution is refused
    ('    User "a$(touch pwned)"\n    ProxyCommand nc %h %p %r\n', 2, "User 'a$(touch pwned)' contains '('"),
    ("    ProxyJump j$(>pwned)\n\nHost j*\n    ProxyCommand nc %h %p\n", None,
     "node02: ProxyJump host 'j$(>pwned)': host name 'j$(>pwned)' contains '$'"),
])
def test_a_config_name_that_runs_a_command_is_that_hosts_unreachable_and_never_runs(
        make_sshd_fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolver: str,
        block: str, where: int | None, said: str):
    fleet = make_sshd_fleet(3)
    paths = _write(fleet, tmp_path, "Host node02\n" + block)
    _use(resolver, tmp_path, monkeypatch)

    result = _sweep(paths)

    assert result.exit_code == 3, result.output
    hosts = _hosts(paths)
    assert (hosts["node01"], hosts["node03"]) == (("ok", None), ("ok", None)), result.output
    status, error = hosts["node02"]
    assert status == "unreachable" and error is not None and said in error
    if where is not None:
        assert error.startswith(f"{paths['config']}:{where}: ")
    assert "fix: " in error
    assert not (tmp_path / PWNED).exists()
    assert not _contacted(fleet, "node02")
