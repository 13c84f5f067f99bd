"""One host's bad ssh configuration is that host's status, never the sweep's end (issue 9), on real sshd hosts
(sshd_hosts.py): a host ssh -G rejects, or whose block the paramiko fallback rejects, is ``unreachable`` with
the file, line and fix, and the other hosts are swept; a configuration that fails every host the same way, or
cannot be read, still ends the sweep with exit 2 before any host is contacted."""

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


def _write(fleet: SshdFleet, tmp_path: Path, first_lines: str) -> dict[str, Path]:
    """The harness's files, with ``first_lines`` at the top of the ssh config (ssh takes a setting's first value)."""
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known_hosts)
    config.write_text(first_lines + "\n" + config.read_text())
    (tmp_path / "thresholds.json").write_text(NO_COMPARISON)
    return {"config": config, "hosts": fleet.write_hosts_file(tmp_path / "hosts.txt"), "json": tmp_path / "sweep.json"}


def _sweep(paths: dict[str, Path]) -> Result:
    folder = paths["hosts"].parent
    args = ["sweep", "--hosts", str(paths["hosts"]), "--ssh-config", str(paths["config"]),
            "--thresholds", str(folder / "thresholds.json"), "--store", str(folder / "gpudiag.db"),
            "--python", sys.executable, "--probes", "facts", "--links", "none", "--json", str(paths["json"]), "-q"]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def _hosts(paths: dict[str, Path]) -> dict[str, tuple[str, str | None]]:
    document = json.loads(paths["json"].read_text())
    return {host["host"]: (host["status"], host["error"]) for host in document["hosts"]}


def _unchecked(paths: dict[str, Path]) -> list[str]:
    document = json.loads(paths["json"].read_text())
    return sorted(finding["host"] for finding in document["findings"] if finding["kind"] == "unchecked")


def _contacted(fleet: SshdFleet, name: str) -> bool:
    return "Connection from" in fleet.host(name).log_path.read_text(errors="replace")


def test_a_host_whose_configuration_ssh_rejects_is_unreachable_and_the_others_are_swept(
        make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3)
    paths = _write(fleet, tmp_path, "Host node02\n    HostName %z.example\n")

    result = _sweep(paths)

    assert result.exit_code == 3, result.output
    hosts = _hosts(paths)
    assert (hosts["node01"], hosts["node03"]) == (("ok", None), ("ok", None))
    status, error = hosts["node02"]
    assert status == "unreachable"
    assert error.startswith(f"{paths['config']}:2: ssh rejects the configuration: ") and "unknown key %z" in error
    assert error.endswith("(for host node02); fix: correct the ssh config file")
    assert _unchecked(paths) == ["node02"]
    assert not _contacted(fleet, "node02")


def test_the_fallback_refuses_a_bad_port_in_one_block_for_that_host_only(
        make_sshd_fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fleet = make_sshd_fleet(3)
    paths = _write(fleet, tmp_path, "Host node03\n    Port 99999\n")
    no_ssh = tmp_path / "bin"
    no_ssh.mkdir()
    monkeypatch.setenv("PATH", str(no_ssh))  # no ssh to ask: paramiko's parser reads the file
    assert shutil.which("ssh") is None

    result = _sweep(paths)

    assert result.exit_code == 3, result.output
    assert _hosts(paths) == {
        "node01": ("ok", None), "node02": ("ok", None),
        "node03": ("unreachable", f"{paths['config']}:2: Port '99999' is not a number from 1 to 65535 "
                                  "(for host node03); fix: correct the ssh config file")}
    assert _unchecked(paths) == ["node03"]
    assert not _contacted(fleet, "node03")


@pytest.mark.parametrize(("first_lines", "said"), [
    # ssh checks a Port in every block, whatever the host: the file is broken for the whole fleet
    ("Host node03\n    Port 99999\n", "line 2: Bad port '99999'"),
    ("Host *\n    Portt 22\n", "line 2: Bad configuration option: portt"),
])
def test_a_configuration_that_fails_every_host_the_same_way_ends_the_sweep_before_it_starts(
        make_sshd_fleet, tmp_path: Path, first_lines: str, said: str):
    fleet = make_sshd_fleet(2)
    paths = _write(fleet, tmp_path, first_lines)

    result = _sweep(paths)

    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"gpudiag: error: {paths['config']}: ssh rejects the configuration: ")
    assert said in line and line.endswith("(for every host); fix: correct the ssh config file")
    assert not paths["json"].exists()
    assert not any(_contacted(fleet, name) for name in fleet.host_names())


def test_an_unreadable_ssh_config_ends_the_sweep_before_it_starts(tmp_path: Path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("node01\nnode02\n")
    paths = {"config": tmp_path / "missing_config", "hosts": hosts, "json": tmp_path / "sweep.json"}
    (tmp_path / "thresholds.json").write_text(NO_COMPARISON)

    result = _sweep(paths)

    assert result.exit_code == 2
    assert result.output.strip() == (f"gpudiag: error: --ssh-config {paths['config']}: cannot read it "
                                     "(No such file or directory); fix: check the path and its permissions")
