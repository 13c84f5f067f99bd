"""Each tcp stream's path, traced with the stream's own 5-tuple (``net-client --trace-hops K``), through
real routers: a small ECMP fabric of network namespaces, built here, with a pair server and client
in two of them (as a controller starts them on two nodes)::

    client -- r1 --+-- r2a --+-- r3 -- server      r1 and r3 spread flows over both paths by their
                   +-- r2b --+                     5-tuple (fib_multipath_hash_policy 3)

Every router answers a SYN whose TTL ran out (ICMP rate limits off) from the address of the link
the SYN came in on, so the hops at TTL 2 and 3 name the path: r2a's and r3's ends of the upper
links, or r2b's and r3's of the lower. The link r2b -> r3 is slow (tbf): the streams the trace put
on it must be the slow ones, which holds only if each data connection kept its traced 5-tuple.
On 127.0.0.1 (no namespaces needed) the first probe reaches the server: no hop, and still a figure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from netns_hosts import namespace_names, namespace_pids, requires_netns
from pair_probes import TOKEN, Probe, closed_port, start_probe

from probes.context import Deadline
from probes.net import trace

IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
SLOW_LINK_MBIT = 40
# namespace -> {interface: address/24}; the links pair interfaces of two namespaces.
ADDRESSES = {
    "client": {"vup": "10.77.1.2"},
    "r1": {"vdown": "10.77.1.1", "va": "10.77.2.1", "vb": "10.77.3.1"},
    "r2a": {"vup": "10.77.2.2", "vdown": "10.77.4.1"},
    "r2b": {"vup": "10.77.3.2", "vdown": "10.77.5.1"},
    "r3": {"va": "10.77.4.2", "vb": "10.77.5.2", "vdown": "10.77.6.1"},
    "server": {"vup": "10.77.6.2"},
}
LINKS = [("client", "vup", "r1", "vdown"), ("r1", "va", "r2a", "vup"), ("r1", "vb", "r2b", "vup"),
         ("r2a", "vdown", "r3", "va"), ("r2b", "vdown", "r3", "vb"), ("r3", "vdown", "server", "vup")]
ROUTES = {
    "client": ["default via 10.77.1.1"],
    "server": ["default via 10.77.6.1"],
    "r1": ["10.77.6.0/24 nexthop via 10.77.2.2 nexthop via 10.77.3.2",
           "10.77.4.0/24 via 10.77.2.2", "10.77.5.0/24 via 10.77.3.2"],
    "r2a": ["10.77.1.0/24 via 10.77.2.1", "10.77.6.0/24 via 10.77.4.2"],
    "r2b": ["10.77.1.0/24 via 10.77.3.1", "10.77.6.0/24 via 10.77.5.2"],
    "r3": ["10.77.1.0/24 nexthop via 10.77.4.1 nexthop via 10.77.5.1",
           "10.77.2.0/24 via 10.77.4.1", "10.77.3.0/24 via 10.77.5.1"],
}
# ECMP by the 5-tuple as a switch hashes it: policy 3 with the fields source and destination address,
# protocol, source and destination port (0x37). Not policy 1: a veth hands on the sending socket's own
# random flow hash, which policy 1 would take instead of hashing the packet.
ROUTER_SYSCTLS = ["net.ipv4.ip_forward=1", "net.ipv4.icmp_ratelimit=0", "net.ipv4.icmp_msgs_per_sec=100000",
                  "net.ipv4.icmp_errors_use_inbound_ifaddr=1", "net.ipv4.fib_multipath_hash_policy=3",
                  "net.ipv4.fib_multipath_hash_fields=0x0037"]
# The hops at TTL 2 and 3 of each path: r2's end of the link from r1, r3's end of the link from r2.
UPPER_PATH = ["10.77.2.2", "10.77.4.2"]
LOWER_PATH = ["10.77.3.2", "10.77.5.2"]


@dataclass(frozen=True)
class Fabric:
    """The namespaces of one built fabric: ``prefix`` + the role names of ADDRESSES."""

    prefix: str

    def namespace(self, role: str) -> str:
        return f"{self.prefix}{role}"

    @property
    def namespaces(self) -> list[str]:
        return [self.namespace(role) for role in ADDRESSES]

    def exec_prefix(self, role: str) -> list[str]:
        return [IP, "netns", "exec", self.namespace(role)]


def _ip(*args: str) -> None:
    done = subprocess.run([IP, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _build(fabric: Fabric) -> None:
    for role in ADDRESSES:
        _ip("netns", "add", fabric.namespace(role))
        _ip("-n", fabric.namespace(role), "link", "set", "lo", "up")
    for left, left_if, right, right_if in LINKS:
        _ip("link", "add", "name", left_if, "netns", fabric.namespace(left), "type", "veth",
            "peer", "name", right_if, "netns", fabric.namespace(right))
    for role, interfaces in ADDRESSES.items():
        for interface, address in interfaces.items():
            _ip("-n", fabric.namespace(role), "addr", "add", f"{address}/24", "dev", interface)
            _ip("-n", fabric.namespace(role), "link", "set", interface, "up")
        for route in ROUTES[role]:
            _ip("-n", fabric.namespace(role), "route", "add", *route.split())
        if role.startswith("r"):
            subprocess.run([*fabric.exec_prefix(role), "sysctl", "-qw", *ROUTER_SYSCTLS], check=True)
    subprocess.run([TC, "-n", fabric.namespace("r2b"), "qdisc", "add", "dev", "vdown", "root", "tbf", "rate",
                    f"{SLOW_LINK_MBIT}mbit", "burst", "32kb", "latency", "100ms"], check=True, capture_output=True)


def _tear_down(fabric: Fabric) -> None:
    """Kill whatever runs in the fabric's namespaces, delete them, and wait until they are gone."""
    names = [name for name in fabric.namespaces if name in namespace_names()]
    for name in names:
        for pid in namespace_pids(name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run([IP, "netns", "delete", name], capture_output=True)
    deadline = time.monotonic() + 10
    while set(fabric.namespaces) & namespace_names() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture(scope="module")
def fabric() -> Iterator[Fabric]:
    """The fabric of the module docstring, built once; every namespace of it deleted after the last test."""
    built = Fabric(f"gdst{secrets.token_hex(3)}")
    try:
        _build(built)
        yield built
    finally:
        _tear_down(built)
    assert not set(built.namespaces) & namespace_names(), "namespaces of the test fabric left after its removal"


def _traced_pair(probes: list[Probe], fabric: Fabric, *client_args: str, prefix: tuple[str, ...] = (),
                 python: str = sys.executable) -> list[dict]:
    """Run a tcp pair test from the client namespace to the server namespace; the client's records."""
    server_address = ADDRESSES["server"]["vup"]
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", server_address, "--deadline", "90",
                         prefix=[*fabric.exec_prefix("server"), *prefix], python=python)
    listening = server.next_json(timeout_s=30)
    assert listening["event"] == "listening", listening
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect",
                         f"{server_address}:{listening['port']}", "--direction", "client_to_server",
                         "--deadline", "90", *client_args, prefix=[*fabric.exec_prefix("client"), *prefix],
                         python=python)
    status, records, _ = client.finish(timeout_s=90)
    assert status == 0, client.stderr()
    assert TOKEN not in str(records)
    status, rest, _ = server.finish(timeout_s=30)
    assert status == 0 and rest[-1]["status"] == "ok", (rest, server.stderr())
    return records


@requires_netns
def test_each_stream_is_traced_on_its_own_ecmp_path_and_its_data_follows_it(probes: list[Probe], fabric: Fabric):
    (record,) = _traced_pair(probes, fabric, "--streams", "16", "--duration", "1", "--trace-hops", "3")
    assert record["status"] == "ok", record
    hops, gbps = record["details"]["stream_hops"], record["details"]["stream_gbps"]
    assert len(hops) == len(gbps) == 16
    # TTL 4 reaches the server: no router there, and the tracing of the stream ends
    assert {(*path[:2],) for path in hops} == {tuple(UPPER_PATH), tuple(LOWER_PATH)}, hops
    assert all(path[2] is None for path in hops), hops
    slow = [rate for path, rate in zip(hops, gbps, strict=True) if path[:2] == LOWER_PATH]
    fast = [rate for path, rate in zip(hops, gbps, strict=True) if path[:2] == UPPER_PATH]
    assert max(slow) < SLOW_LINK_MBIT / 1000 * 1.2 < min(fast), (hops, gbps)


@requires_netns
def test_hops_past_the_routers_are_null_and_only_the_traced_direction_carries_them(probes: list[Probe],
                                                                                  fabric: Fabric):
    server_address = ADDRESSES["server"]["vup"]
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", server_address, "--deadline", "60",
                         prefix=fabric.exec_prefix("server"))
    port = server.next_json(timeout_s=30)["port"]
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"{server_address}:{port}",
                         "--deadline", "60", "--streams", "2", "--duration", "0.3", "--trace-hops", "5",
                         prefix=fabric.exec_prefix("client"))
    status, records, _ = client.finish(timeout_s=60)
    assert status == 0
    by_direction = {record["params"]["direction"]: record for record in records}
    assert {record["status"] for record in records} == {"ok"}, records
    for path in by_direction["client_to_server"]["details"]["stream_hops"]:
        assert path[:2] in (UPPER_PATH, LOWER_PATH) and path[2:] == [None, None, None]
    assert "stream_hops" not in by_direction["server_to_client"]["details"]
    assert len(by_direction["server_to_client"]["details"]["stream_gbps"]) == 2


@requires_netns
@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason=f"no {SYSTEM_PYTHON} to run as an unprivileged user")
def test_tracing_needs_no_privilege(probes: list[Probe], fabric: Fabric):
    nobody = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
    (record,) = _traced_pair(probes, fabric, "--streams", "4", "--duration", "0.3", "--trace-hops", "2",
                             prefix=nobody, python=SYSTEM_PYTHON)
    assert record["status"] == "ok", record
    assert all(path in (UPPER_PATH, LOWER_PATH) for path in record["details"]["stream_hops"]), record


def test_on_loopback_the_first_probe_reaches_the_server_and_the_test_still_measures(probes: list[Probe]):
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}",
                         "--duration", "0.3", "--streams", "3", "--trace-hops", "4")
    status, records, waited = client.finish(timeout_s=60)
    assert status == 0 and waited < 20
    assert {record["status"] for record in records} == {"ok"}, records
    (traced,) = [record for record in records if record["params"]["direction"] == "client_to_server"]
    assert traced["details"]["stream_hops"] == [[None] * 4] * 3
    assert len(traced["details"]["stream_gbps"]) == 3
    status, rest, _ = server.finish(timeout_s=15)
    assert status == 0 and rest[-1]["status"] == "ok"


def test_a_probe_reset_by_the_server_ends_the_streams_tracing_at_once():
    held = trace.reserve_source(("127.0.0.1", 0), socket.AF_INET)
    assert held is not None
    started = time.monotonic()
    hops = trace.trace_streams([held.getsockname()], ("127.0.0.1", closed_port()), socket.AF_INET, 3,
                               Deadline.after(10))
    held.close()
    assert hops == [[None, None, None]] and time.monotonic() - started < 1.0  # no wait for an answer


def test_a_data_connection_keeps_its_traced_source_port_or_falls_back_to_any():
    listener = socket.create_server(("127.0.0.1", 0))
    peer = listener.getsockname()
    held = trace.reserve_source(("127.0.0.1", 0), socket.AF_INET)
    assert held is not None
    kept, same = trace.connect_from(held.getsockname(), peer, socket.AF_INET, Deadline.after(10))
    assert same and kept.getsockname() == held.getsockname()
    # a source whose 5-tuple is taken (the same port to the same server) cannot be kept: any port will do
    other, same = trace.connect_from(held.getsockname(), peer, socket.AF_INET, Deadline.after(10))
    assert not same and other.getsockname()[1] != held.getsockname()[1]
    for sock in (kept, other, held, listener):
        sock.close()
