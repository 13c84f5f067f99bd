"""A node that says nothing has not passed: real sshd hosts whose node Python prints nothing, or
leaves out one probe's records, are never ``ok`` with nothing to show (issue: fail closed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from sshd_hosts import SshdFleet

from gpudiag.cli.main import main

# These tests are about what a host printed, not about judging its figures (see test_sweep_ssh.py).
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')


def _on_one_host(tmp_path: Path, fleet: SshdFleet, name: str, misbehaviour: str) -> str:
    """A node Python that runs ``misbehaviour`` (shell, with the bundle's arguments in "$@") on the
    host ``name`` only, told apart by the server address of its SSH connection, and the real
    Python everywhere else."""
    address = fleet.host(name).address
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nset -- \"$@\"\ncase \"$SSH_CONNECTION\" in\n"
                       f"  *\" {address} \"*) {misbehaviour} ;;\n"
                       f"  *) exec {sys.executable} \"$@\" ;;\nesac\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def _sweep(fleet: SshdFleet, tmp_path: Path, python: str, probes: str) -> tuple[int, dict, list[str], str]:
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known_hosts)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt")
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    document, exclude = tmp_path / "sweep.json", tmp_path / "exclude.txt"
    result = CliRunner().invoke(main, [
        "sweep", "--hosts", str(hosts), "--ssh-config", str(config), "--known-hosts", str(known_hosts),
        "--thresholds", str(thresholds), "--no-store", "--python", python, "--probes", probes,
        "--duration", "0.1", "--links", "none", "--json", str(document), "--exclude-file", str(exclude), "-q"],
        catch_exceptions=False)
    return (result.exit_code, json.loads(document.read_text()), exclude.read_text().split(), result.output)


def test_a_host_whose_python_prints_nothing_and_exits_0_is_a_probe_error_never_ok(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3)
    silent = fleet.host_names()[1]
    code, document, exclude, output = _sweep(fleet, tmp_path, _on_one_host(tmp_path, fleet, silent, "exit 0"),
                                             "facts,membw")
    statuses = {host["host"]: host["status"] for host in document["hosts"]}
    assert statuses == {name: ("probe_error" if name == silent else "ok") for name in fleet.host_names()}, output
    error = next(host["error"] for host in document["hosts"] if host["host"] == silent)
    assert "printed no record at all" in error
    assert code == 3 and document["summary"]["exit_code"] == 3
    assert silent in exclude  # it could not be checked: a job must not get it on our word
    assert any(f["kind"] == "unchecked" and f["host"] == silent for f in document["findings"])


def test_a_probe_the_host_never_answered_is_unchecked_on_that_host_only(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3)
    quiet = fleet.host_names()[2]
    # The real bundle runs, but its membw records never reach the controller.
    drop_membw = f"{sys.executable} \"$@\" | grep -v '\"probe\": \"membw\"'"
    code, document, _, output = _sweep(fleet, tmp_path, _on_one_host(tmp_path, fleet, quiet, drop_membw),
                                       "facts,membw")
    assert {host["status"] for host in document["hosts"]} == {"ok"}, output
    # (The figures of the other hosts are not compared here: too few peers, see NO_COMPARISON.)
    gaps = [f for f in document["findings"] if f["kind"] == "unchecked" and f["metric"] == "membw.record"]
    assert [f["host"] for f in gaps] == [quiet], output
    assert "printed no record of this probe" in gaps[0]["evidence"]
    assert code == 3 and quiet in (document["impact"] or {}).get("exclude", [])


def test_gpudiag_probe_with_a_python_that_prints_nothing_exits_3_and_says_so():
    result = CliRunner().invoke(main, ["probe", "--python", "/bin/true", "facts"])
    assert result.exit_code == 3
    assert "printed no record at all" in result.output
