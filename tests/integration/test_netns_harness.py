"""The network-namespace harness itself: SSH over the management bridge, and its faults on the data bridge
measured with the project's own tcp pair probe (``python -m probes net-server`` / ``net-client``) run inside
the namespaces. Skips where network namespaces cannot be made (no root, no CAP_NET_ADMIN)."""

from __future__ import annotations

import json
import secrets
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest
from netns_hosts import MakeNetnsFleet, NetnsFleet, NetnsHost, NetnsSetupError, requires_netns
from sshd_hosts import SshdStartError, pid_is_running

pytestmark = requires_netns

BUNDLE_ROOT = Path(__file__).resolve().parents[2]  # python -m probes runs from here, as from a bundle
DIRECTIONS = {"client_to_server", "server_to_client"}
LINE_RATE_MBIT = 200
SLOW_MBIT = 50


@pytest.fixture
def fleet(clean_netns_fleet: NetnsFleet) -> NetnsFleet:
    return clean_netns_fleet


def _connect(fleet: NetnsFleet, host: NetnsHost, known_hosts: Path) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(host.mgmt_address, 22, username=fleet.user, key_filename=str(fleet.client_key_path),
                   look_for_keys=False, allow_agent=False, timeout=10)
    return client


def _run(client: paramiko.SSHClient, command: str) -> str:
    _, stdout, _ = client.exec_command(command, timeout=10)
    return stdout.read().decode()


def _pair_test(fleet: NetnsFleet, client: str, server: str, deadline_s: float = 30.0) -> tuple[dict[str, dict], float]:
    """Run a tcp pair test from host ``client`` to host ``server`` over the data network: (the client's
    records by direction, the client's seconds)."""
    data_address = fleet.host(server).data_address
    secret = secrets.token_hex(32)  # the pair test's secret, which both ends prove to each other
    served = fleet.run_in(server, [sys.executable, "-m", "probes", "net-server", "--backend", "tcp", "--bind",
                                   data_address, "--token", secret, "--deadline", f"{deadline_s:g}"],
                          cwd=BUNDLE_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert served.stdout is not None
    assert select.select([served.stdout], [], [], 10)[0], "net-server printed no listening line in 10 s"
    listening = json.loads(served.stdout.readline())
    assert listening["event"] == "listening"
    started = time.monotonic()
    measured = fleet.run_in(client, [sys.executable, "-m", "probes", "net-client", "--backend", "tcp", "--connect",
                                     f"{data_address}:{listening['port']}", "--duration", "1.5", "--streams", "2",
                                     "--token", secret, "--deadline", f"{deadline_s:g}"],
                            cwd=BUNDLE_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = measured.communicate(timeout=deadline_s + 10)
    seconds = time.monotonic() - started
    assert measured.returncode == 0, err
    try:
        served.wait(timeout=2)  # it ends by itself once the client says bye
    except subprocess.TimeoutExpired:  # a server no client reached waits for its deadline
        served.kill()
        served.wait()
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert {record["params"]["direction"] for record in records} == DIRECTIONS, records
    return {record["params"]["direction"]: record for record in records}, seconds


def _gbps(fleet: NetnsFleet, client: str, server: str) -> dict[str, float]:
    """Both directions' Gbit/s between two hosts; fails on an error record."""
    records, _ = _pair_test(fleet, client, server)
    for record in records.values():
        assert record["status"] == "ok", record["reason"]
    return {direction: record["value"] for direction, record in records.items()}


def test_six_hosts_answer_ssh_from_the_root_namespace_each_in_its_own_namespace(fleet: NetnsFleet, tmp_path: Path):
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    assert [host.name for host in fleet.hosts] == [f"node{index:02d}" for index in range(1, 7)]
    assert len({host.namespace for host in fleet.hosts}) == 6
    for host in fleet.hosts:
        with _connect(fleet, host, known_hosts) as client:
            shown = _run(client, "ip -4 -o addr show data0; ip -4 -o addr show mgmt0; ip netns identify $$")
        assert f"inet {host.data_address}/24" in shown and f"inet {host.mgmt_address}/24" in shown
        assert shown.split()[-1] == host.namespace


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_the_written_ssh_config_logs_in_by_host_name(fleet: NetnsFleet, tmp_path: Path):
    config = fleet.write_ssh_config(tmp_path / "ssh_config")
    done = subprocess.run(["ssh", "-F", str(config), "node04", "ip netns identify $$"],
                          capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, fleet.host("node04").namespace), done.stderr
    hosts = fleet.write_hosts_file(tmp_path / "hosts", ["node01", "node02"], data_field=True).read_text()
    assert hosts == f"node01 net={fleet.host('node01').data_address}\nnode02 net={fleet.host('node02').data_address}\n"


def test_cap_all_gives_each_link_that_rate_both_ways(fleet: NetnsFleet):
    fleet.cap_all(LINE_RATE_MBIT)
    for direction, gbps in _gbps(fleet, "node01", "node02").items():
        assert 0.15 <= gbps <= 0.21, (direction, gbps)


def test_cap_host_slows_that_host_with_any_partner(fleet: NetnsFleet):
    fleet.cap_all(LINE_RATE_MBIT)
    fleet.cap_host("node03", SLOW_MBIT)
    measured = {**{("to node04", d): g for d, g in _gbps(fleet, "node03", "node04").items()},
                **{("from node05", d): g for d, g in _gbps(fleet, "node05", "node03").items()}}
    assert all(0.03 <= gbps <= 0.06 for gbps in measured.values()), measured


def test_cap_pair_slows_that_pair_only(fleet: NetnsFleet):
    fleet.cap_all(LINE_RATE_MBIT)
    fleet.cap_pair("node01", "node02", SLOW_MBIT)
    slow, normal = _gbps(fleet, "node01", "node02"), _gbps(fleet, "node01", "node03")
    assert all(0.03 <= gbps <= 0.06 for gbps in slow.values()), slow
    assert all(0.15 <= gbps <= 0.21 for gbps in normal.values()), normal


def test_cut_data_makes_pair_tests_fail_as_records_while_ssh_still_works(fleet: NetnsFleet, tmp_path: Path):
    fleet.cut_data("node06")
    records, seconds = _pair_test(fleet, "node06", "node05", deadline_s=20)
    assert {record["status"] for record in records.values()} == {"error"}
    assert all(record["value"] is None and record["reason"] for record in records.values())
    assert seconds < 20
    with _connect(fleet, fleet.host("node06"), fleet.write_known_hosts(tmp_path / "known_hosts")) as client:
        assert _run(client, "echo up").strip() == "up"


def _names_shown() -> str:
    listed = [subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout
              for args in (["netns", "list"], ["-o", "link"])]
    return "\n".join(listed)


def test_stop_leaves_no_namespace_link_or_process(netns_fleet_factory: MakeNetnsFleet, tmp_path: Path):
    fleet = netns_fleet_factory(2)
    fleet.run_in("node01", ["sleep", "60"])
    client = _connect(fleet, fleet.host("node02"), fleet.write_known_hosts(tmp_path / "known_hosts"))
    client.exec_command("sleep 60")
    time.sleep(0.2)
    pids = fleet.process_ids()
    assert len(pids) >= 4  # two listeners, the run_in sleep, the session's sleep (and its sshd processes)
    assert fleet.prefix in _names_shown()
    directory = fleet.directory
    fleet.stop()
    client.close()
    assert fleet.prefix not in _names_shown()
    assert not [pid for pid in pids if pid_is_running(pid)]
    assert not directory.exists()


def test_a_failed_start_removes_what_it_made(netns_fleet_factory: MakeNetnsFleet):
    with pytest.raises(SshdStartError):
        netns_fleet_factory(2, tag="badlog", log_level="NOT-A-LEVEL")  # sshd rejects its config at start
    assert "gdbadlog" not in _names_shown()


def test_a_fleet_never_takes_names_that_exist(netns_fleet_factory: MakeNetnsFleet):
    subprocess.run(["ip", "netns", "add", "gdclashh02"], check=True)
    try:
        with pytest.raises(NetnsSetupError, match="gdclashh02"):
            netns_fleet_factory(2, tag="clash")
        assert "gdclashh02" in _names_shown() and "gdclashh01" not in _names_shown()
    finally:
        subprocess.run(["ip", "netns", "delete", "gdclashh02"], check=True)
