"""The leaf–spine fabric harness itself (``fabric_hosts.py``): every host reaches every other over leaves and
spines, ECMP spreads TCP streams over the spines by their five-tuple (traced with TTL-limited SYNs), a healthy
fabric carries the host-link rate, a slow uplink slows exactly the streams hashed onto it, and stop leaves
nothing behind. One 3-leaf, 9-host, 2-spine fabric serves the module; transfers last 1 s. Skips where network
namespaces cannot be made (no root, no CAP_NET_ADMIN)."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fabric_hosts import LEAF_BRIDGE, NetnsFabric, StreamRate, checked_fabric
from netns_hosts import requires_netns
from sshd_hosts import pid_is_running

pytestmark = requires_netns

# Connects to port 9 of each address given; prints "<address> refused" where a host answered with a reset (it
# was reached; nothing listens there), else the error's name.
REACH_PROGRAM = r"""
import socket, sys
for address in sys.argv[1:]:
    try:
        socket.create_connection((address, 9), timeout=3).close()
        print(address, "open")
    except OSError as error:
        print(address, "refused" if isinstance(error, ConnectionRefusedError) else type(error).__name__)
"""
_server_ports = itertools.count(6000)  # a fresh server port per transfer: no four-tuple is reused (TIME_WAIT)


@pytest.fixture(scope="module")
def module_fabric() -> Iterator[NetnsFabric]:
    """The module's fabric; after its last test, fails if a process, namespace or link of it is left."""
    with checked_fabric() as fabric:
        yield fabric


@pytest.fixture
def fabric(module_fabric: NetnsFabric) -> Iterator[NetnsFabric]:
    """The module's fabric, healed after the test."""
    yield module_fabric
    module_fabric.heal()


def _total_mbit(rates: list[StreamRate]) -> float:
    return sum(rate.mbit_per_s for rate in rates)


def _addresses_in(namespace: str) -> set[str]:
    shown = subprocess.run(["ip", "-n", namespace, "-j", "-4", "address", "show"], capture_output=True, text=True,
                           check=True)
    return {entry["local"] for link in json.loads(shown.stdout) for entry in link["addr_info"]
            if not entry["local"].startswith("127.")}


def test_every_host_reaches_every_other_hosts_data_address(fabric: NetnsFabric):
    assert len(fabric.hosts) == 9 and fabric.leaves == ["leaf1", "leaf2", "leaf3"]
    assert fabric.spines == ["spine1", "spine2"]
    addresses = [host.data_address for host in fabric.hosts]
    assert len(set(addresses)) == 9
    probes = {host.name: fabric.run_in(host.name, [sys.executable, "-c", REACH_PROGRAM,
                                                   *(a for a in addresses if a != host.data_address)],
                                       stdout=subprocess.PIPE, text=True) for host in fabric.hosts}
    answers = {name: probe.communicate(timeout=30)[0].split() for name, probe in probes.items()}
    unreached = {name: words for name, words in answers.items() if words[1::2] != ["refused"] * 8}
    assert not unreached


def test_source_ports_spread_tcp_streams_over_the_spines_as_the_traced_hops_show(fabric: NetnsFabric):
    server_port = next(_server_ports)
    traced = {}
    for source_port in range(40000, 40008):
        hop = fabric.trace_hop("node01", "node07", source_port, server_port, ttl=2)
        traced[source_port] = fabric.switch_at(hop) if hop else None
        assert traced[source_port] == fabric.route_spine("node01", "node07", source_port, server_port)
    assert set(traced.values()) == {"spine1", "spine2"}, traced
    # the whole path, hop by hop: node01's leaf, the spine its five-tuple hashes onto, node07's leaf
    path = [fabric.trace_hop("node01", "node07", 40000, server_port, ttl) for ttl in (1, 2, 3)]
    assert [fabric.switch_at(hop) for hop in path if hop] == ["leaf1", traced[40000], "leaf3"]
    # the same source port towards another destination port may take the other spine: all five fields count
    spines = {fabric.route_spine("node01", "node07", 40000, port) for port in range(server_port, server_port + 16)}
    assert spines == {"spine1", "spine2"}
    assert fabric.route_spine("node01", "node02", 40000, server_port) is None  # one leaf: no spine


def test_a_healthy_fabric_carries_the_host_link_rate_under_one_leaf_and_across_leaves(fabric: NetnsFabric):
    one_leaf = fabric.measure_streams("node01", "node02", [41000], next(_server_ports))
    across = fabric.measure_streams("node04", "node09", range(41000, 41008), next(_server_ports))
    for rates in (one_leaf, across):
        assert 0.85 * fabric.host_mbit <= _total_mbit(rates) <= fabric.host_mbit, rates


def test_a_slow_uplink_slows_the_streams_hashed_onto_it_and_no_pair_under_one_leaf(fabric: NetnsFabric):
    fabric.slow_uplink("leaf1", "spine1", fabric.host_mbit // 4)
    for client, server in (("node01", "node05"), ("node06", "node02")):  # up, then down through the cable
        server_port = next(_server_ports)
        ports = fabric.ports_by_spine(client, server, server_port, per_spine=4)
        rates = fabric.measure_streams(client, server, ports["spine1"] + ports["spine2"], server_port)
        slow, fast = rates[:4], rates[4:]
        assert _total_mbit(slow) <= 0.3 * fabric.host_mbit, rates
        assert _total_mbit(fast) >= 0.55 * fabric.host_mbit, rates
        assert max(rate.mbit_per_s for rate in slow) < min(rate.mbit_per_s for rate in fast) / 1.5, rates
    one_leaf = fabric.measure_streams("node01", "node03", range(41000, 41008), next(_server_ports))
    assert _total_mbit(one_leaf) >= 0.85 * fabric.host_mbit, one_leaf


def _class_mbit(namespace: str, device: str) -> float:
    """The rate of the htb class 1:1 on ``device`` in ``namespace``, in Mbit/s (``tc`` prints htb classes in
    text only: "class htb 1:1 root ... rate 300Mbit ceil ...")."""
    shown = subprocess.run(["tc", "-n", namespace, "class", "show", "dev", device], capture_output=True,
                           text=True, check=True).stdout
    found = re.search(r"^class htb 1:1 .*? rate (\d+(?:\.\d+)?)([KMG]?)bit ", shown, re.MULTILINE)
    assert found, shown
    return float(found[1]) * {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}[found[2]]


def test_slow_spine_shapes_every_cable_of_that_spine_at_both_ends_and_heal_gives_the_rate_back(
        fabric: NetnsFabric):
    fabric.slow_spine("spine2", 300)
    for uplink in fabric.uplinks.values():
        expected = 300 if uplink.spine == "spine2" else fabric.uplink_mbit
        assert _class_mbit(fabric.switches[uplink.leaf].namespace, uplink.leaf_port) == expected
        assert _class_mbit(fabric.switches[uplink.spine].namespace, uplink.spine_port) == expected
    fabric.heal()
    assert {_class_mbit(fabric.switches["spine2"].namespace, f"swp{leaf}") for leaf in (1, 2, 3)} == {
        fabric.uplink_mbit}


def test_a_cut_uplink_moves_its_leafs_streams_to_the_other_spine_and_heal_brings_it_back(fabric: NetnsFabric):
    server_port = next(_server_ports)
    ports = fabric.ports_by_spine("node04", "node01", server_port, per_spine=2)
    fabric.cut_uplink("leaf1", "spine1", reroute=True)
    assert {fabric.route_spine("node01", "node04", port, server_port) for port in range(40000, 40016)} == {"spine2"}
    assert {fabric.route_spine("node04", "node01", port, server_port) for port in ports["spine1"]} == {"spine2"}
    rates = fabric.measure_streams("node04", "node01", ports["spine1"], server_port)
    assert _total_mbit(rates) >= 0.85 * fabric.host_mbit, rates
    fabric.heal()
    assert {fabric.route_spine("node04", "node01", port, server_port) for port in ports["spine1"]} == {"spine1"}
    assert {fabric.route_spine("node01", "node04", port, server_port) for port in range(40000, 40016)} == {
        "spine1", "spine2"}


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
def test_the_written_files_describe_the_fabric(fabric: NetnsFabric, tmp_path: Path):
    document = json.loads(fabric.write_topology(tmp_path / "topology.json").read_text())
    assert document["schema"] == "gpudiag.topology/1"
    (plane,) = document["planes"]
    assert plane["rail"] is None
    assert [(s["name"], s["tier"]) for s in plane["switches"]] == [
        ("leaf1", 1), ("leaf2", 1), ("leaf3", 1), ("spine1", 2), ("spine2", 2)]
    for switch in plane["switches"]:  # every address a traced hop can answer from
        assert set(switch["addresses"]) == _addresses_in(fabric.switches[switch["name"]].namespace)
    assert len(plane["links"]) == 6
    for link in plane["links"]:
        (cable,) = link["cables"]
        assert cable["ports"] == [fabric.uplink(link["a"], link["b"]).leaf_port,
                                  fabric.uplink(link["a"], link["b"]).spine_port]
        assert cable["rate_gbps"] == fabric.uplink_mbit / 1000
    assert plane["nodes"][3] == {"host": "node04", "switch": "leaf2", "port": "swp1",
                                 "rate_gbps": fabric.host_mbit / 1000, "nic": "data0"}
    assert [node["switch"] for node in plane["nodes"]] == [fabric.leaf_of(name) for name in fabric.host_names()]
    assert fabric.hosts_under("leaf3") == ["node07", "node08", "node09"]
    shown = subprocess.run(["ip", "-n", fabric.switches["leaf2"].namespace, "-o", "link", "show", "master",
                            LEAF_BRIDGE], capture_output=True, text=True, check=True).stdout
    assert "swp1@" in shown  # node04's port, on leaf2's bridge
    hosts = fabric.write_hosts_file(tmp_path / "hosts", data_field=True).read_text().splitlines()
    assert hosts[6] == f"node07 net={fabric.host('node07').data_address}"
    config = fabric.write_ssh_config(tmp_path / "ssh_config")
    done = subprocess.run(["ssh", "-F", str(config), "node07", "ip -4 -o address show data0; ip netns identify $$"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert f"inet {fabric.host('node07').data_address}/24" in done.stdout
    assert done.stdout.split()[-1] == fabric.host("node07").namespace


def _names_shown() -> str:
    listed = [subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout
              for args in (["netns", "list"], ["-o", "link"])]
    return "\n".join(listed)


def test_stop_leaves_no_namespace_link_or_process():
    fabric = NetnsFabric(leaves=2, hosts_per_leaf=1, spines=2).start()
    try:
        fabric.run_in("node01", ["sleep", "60"])
        leaf_sleep = subprocess.Popen(["ip", "netns", "exec", fabric.switches["leaf2"].namespace, "sleep", "60"])
        # `ip netns exec` enters the namespace and then runs sleep: until both have, neither is found there
        deadline = time.monotonic() + 10
        while len(fabric.processes_matching(r"^sleep 60$")) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(fabric.processes_matching(r"^sleep 60$")) == 2 and len(fabric.process_ids()) >= 4  # two sshd
        pids, directory = fabric.process_ids(), fabric.directory
        assert fabric.prefix in _names_shown()
        started = time.monotonic()
    finally:
        fabric.stop()
    assert time.monotonic() - started < 10
    leaf_sleep.wait(timeout=5)  # killed with its namespace's processes; reaped here, its parent
    assert fabric.prefix not in _names_shown()
    assert not [pid for pid in pids if pid_is_running(pid)]
    assert not directory.exists()
