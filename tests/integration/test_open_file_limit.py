"""A sweep under a tight open-file limit (RLIMIT_NOFILE) on real sshd hosts: no healthy host is
called unreachable for want of descriptors; the sweep raises its soft limit where the hard one
allows, and otherwise caps its fan-out, reconnects hosts whose connection it closed for room, and
says so."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from quick_node import quick_facts_python
from sshd_hosts import SshdFleet

HOSTS = 24
# This test is about descriptors, not speeds: 24 hosts' tcp pairs on one 2-core loopback machine are
# too noisy to judge, so no GPU figure is compared and only a link 99 % below its fleet would count.
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}, '
                 '"link_deficit": {"value": 99, "unit": "percent"}, '
                 '"link_robust_z": {"value": -1000, "unit": "sigma"}, '
                 '"link_line_rate_efficiency": {"value": 1, "unit": "percent"}}')


@pytest.fixture(scope="module")
def fleet() -> SshdFleet:
    with SshdFleet(HOSTS) as started:
        yield started


@pytest.fixture(scope="module")
def quick_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Hosts that answer the facts probe at once: this test is about descriptors (quick_node.py)."""
    return quick_facts_python(tmp_path_factory.mktemp("quick-python"))


def _sweep(fleet: SshdFleet, tmp_path: Path, python: str, soft: int, hard: int, *extra: str
           ) -> tuple[int, dict, str]:
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    hosts = fleet.write_hosts_file(tmp_path / "hosts")
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    out = tmp_path / "sweep.json"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run(
        [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(hosts), "--ssh-config", str(config),
         "--known-hosts", str(known), "--python", python, "--probes", "facts", "--thresholds",
         str(thresholds), "--no-store", "--json", str(out), "-q", *extra],
        capture_output=True, text=True, timeout=600, preexec_fn=limit, check=False)
    return done.returncode, json.loads(out.read_text()) if out.exists() else {}, done.stdout + done.stderr


def _logins(fleet: SshdFleet) -> dict[str, int]:
    return {name: fleet.host(name).log_path.read_text(errors="replace").count("Accepted publickey")
            for name in fleet.host_names()}


def test_below_the_hosts_count_a_hard_limit_caps_the_fanout_and_every_host_is_still_reached(
        fleet: SshdFleet, quick_python: str, tmp_path: Path):
    before = _logins(fleet)
    # 32 descriptors: fewer than one per host on top of what the process holds anyway
    code, document, output = _sweep(fleet, tmp_path, quick_python, 32, 32, "--links", "screen", "--net-backend",
                                    "tcp", "--net-duration", "0.2", "--net-streams", "1", "--net-address", "ssh")
    assert code == 0, output[-3000:]
    assert {host["status"] for host in document["hosts"]} == {"ok"} and len(document["hosts"]) == HOSTS
    assert len([link for link in document["links"] if link["value"] is not None]) >= HOSTS
    (warning,) = [w for w in document["warnings"] if "open-file limit" in w]
    assert "fan-out" in warning and "ulimit -n" in warning and "gpudiag: warning: the open-file limit" in output
    # connections closed for room were opened again for the link rounds: some hosts logged in twice
    logins = {name: count - before[name] for name, count in _logins(fleet).items()}
    assert min(logins.values()) >= 1 and max(logins.values()) >= 2


def test_a_low_soft_limit_is_raised_to_what_the_sweep_needs(fleet: SshdFleet, quick_python: str, tmp_path: Path):
    code, document, output = _sweep(fleet, tmp_path, quick_python, 32, 4096, "--links", "none")
    assert code == 0, output[-3000:]
    assert {host["status"] for host in document["hosts"]} == {"ok"}
    (warning,) = document["warnings"]
    assert warning.startswith("raised the open-file limit from 32 to ")
