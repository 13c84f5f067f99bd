"""A routed leaf–spine fabric of Linux network namespaces, with an sshd on every host, for integration tests
that locate a slow switch uplink.

``NetnsFabric(leaves=3, hosts_per_leaf=3, spines=2)`` is a ``NetnsFleet`` (``netns_hosts.py``) whose data
network is routed instead of bridged. Hosts ``node01``.. (``hosts_per_leaf`` to a leaf, in order) keep the
fleet's management bridge in the root namespace (this process reaches every sshd), and have ONE data interface
``data0`` cabled to their leaf. Every switch is a namespace of its own that routes (``ip_forward=1``):

* ``leafL`` holds a bridge ``br0`` over its host ports ``swp1``.. with the gateway address of its hosts' /24,
  and one uplink ``swp5S`` to each ``spineS`` (a veth, a /31 each end). Another leaf's /24 is an ECMP route
  with one nexthop per spine, hashed on the five-tuple as a switch does (``fib_multipath_hash_policy=3``,
  ``fib_multipath_hash_fields=0x37``): a TCP stream's source port picks its spine.
* ``spineS`` has a port ``swpL`` to each leaf and one route per leaf's /24.
* Switches answer TTL-limited probes without a rate limit (``icmp_ratelimit=0``, ``icmp_msgs_per_sec`` and
  ``icmp_msgs_burst`` raised), so a traced stream's hops all answer.

Addresses: management 10.x.0.0/24 as the fleet's; data 10.(x+1).0.0/16, leaf L's hosts in 10.(x+1).L.0/24
(gateway .254), the uplink of leaf L to spine S the /31 10.(x+1).250.(2i) with i = (L-1)·spines + (S-1), leaf
side first. Names: namespaces ``gd<tag>h01`` (hosts), ``gd<tag>l1`` (leaves), ``gd<tag>s1`` (spines); in the
root namespace only the fleet's ``gd<tag>m01``.. and ``gd<tag>bm``; every data link lives inside namespaces.

Rates: every host link is an htb class at ``host_mbit`` (2000) on both ends (``cap_all`` / ``cap_host`` /
``cap_pair`` / ``cut_data`` act on host links as on a fleet's data links, and never lift the nominal rate), every
uplink one at ``uplink_mbit`` (``hosts_per_leaf`` × ``host_mbit``). Injectors: ``slow_uplink`` (one leaf–spine
cable at a lower rate, both directions), ``slow_spine`` (all its cables), ``cut_uplink`` (both ends down), and
``heal`` (all of it undone). ``write_topology`` writes the fabric as gpudiag's topology JSON; the hosts file,
ssh config and known_hosts writers are the fleet's (``write_hosts_file(path, data_field=True)`` gives
``nodeNN net=<data address>``). ``route_spine``, ``trace_hop`` and ``measure_streams`` look at the fabric from
outside gpudiag: the spine a five-tuple hashes onto, the switch that answers a TTL-limited SYN, per-stream rates.

Measured on the 2-core development machine (kernel 6.18), three runs each. Building the default 3×3×2 fabric
(15 namespaces, 9 sshd, shaping, routes) takes 0.3–0.5 s, stopping it 0.26–0.31 s. A host's path through leaf,
spine and leaf, unshaped, carries 11–17 Gbit/s in one stream and 21–28 Gbit/s in 8 (1 s transfers), neither
steady; at ``host_mbit`` 2000 it reads 1.92 Gbit/s in one stream (1.85 under one leaf) and 1.93–1.95 in 8, the
TCP payload of the htb rate (1.83–1.95 with a busy loop on each core). A pair's 8 streams with 4 of them hashed
over an uplink held to 500 Mbit/s (a quarter of the host rate): those 4 read 77–146 Mbit/s each (470–490
together, all the cable carries), the 4 over the other spine 348–389 Mbit/s each (the rest of the host link);
the same in the other direction, and 8 streams under one leaf still read 1.93 Gbit/s together.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netns_hosts import (
    BRIDGE_HOST_NUMBER,
    DATA_INTERFACE,
    MGMT_INTERFACE,
    SSH_PORT,
    TC,
    NetnsFleet,
    NetnsHost,
    NetnsSetupError,
    _run_ip_batch,
    _Shaping,
    link_names,
    namespace_names,
    shaping_commands,
)
from sshd_hosts import IP, TestHost, pid_is_running

LEAF_TIER, SPINE_TIER = 1, 2
# A rate the 2-core machine carries steadily through leaf, spine and leaf, with room to spare for a few pairs at
# once and a busy machine (see the module docstring).
HOST_MBIT = 2000
LEAF_BRIDGE = "br0"
UPLINK_PORT_BASE = 50  # leaf L's uplink to spine S is swp(50+S), host ports run swp1..; spine S's port to leaf L: swpL
GATEWAY_HOST_NUMBER = 254
UPLINK_THIRD_OCTET = 250
MAX_UPLINKS = 128  # /31s in 10.(x+1).250.0/24
TOPOLOGY_SCHEMA = "gpudiag.topology/1"
SWITCH_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.fib_multipath_hash_policy": "3",  # custom: the fields below
    "net.ipv4.fib_multipath_hash_fields": "0x37",  # source and destination address, protocol, both ports
    "net.ipv4.conf.all.rp_filter": "0",  # a stream's answers may come back over another spine
    "net.ipv4.conf.default.rp_filter": "0",
    "net.ipv4.icmp_ratelimit": "0",
}
# Set where the kernel has them per namespace: the global ICMP budget (per namespace since 6.2), and a fixed
# hash seed (6.11 on), so that the same five-tuple takes the same spine in every run.
OPTIONAL_SWITCH_SYSCTLS = {
    "net.ipv4.icmp_msgs_per_sec": "100000",
    "net.ipv4.icmp_msgs_burst": "100000",
    "net.ipv4.fib_multipath_hash_seed": "20240601",
}

# Run with `python -c` in a host's namespace. `receive ADDRESS PORT STREAMS`: prints "ready", accepts STREAMS
# connections, reads each to its end and prints one JSON list of {source_port, bytes, first_s, last_s}.
# `send SOURCE DESTINATION PORT SECONDS SOURCE_PORTS`: one connection from each source port (comma separated),
# writes on all for SECONDS, half-closes and waits for the receiver to close.
_STREAMS_PROGRAM = r"""
import json, socket, sys, threading, time
BLOCK = 1 << 18
def receive(address, port, count):
    listener = socket.create_server((address, int(port)), backlog=int(count))
    print("ready", flush=True)
    counts = []
    def read(conn, peer):
        buffer, total, first, last = bytearray(BLOCK), 0, None, None
        while True:
            got = conn.recv_into(buffer)
            if not got:
                break
            last = time.monotonic()
            first = first or last
            total += got
        conn.close()
        counts.append({"source_port": peer[1], "bytes": total, "first_s": first, "last_s": last})
    readers = []
    for _ in range(int(count)):
        reader = threading.Thread(target=read, args=listener.accept())
        reader.start()
        readers.append(reader)
    for reader in readers:
        reader.join()
    print(json.dumps(counts), flush=True)
def send(source, destination, port, seconds, ports):
    conns = []
    for source_port in map(int, ports.split(",")):
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        conn.bind((source, source_port))
        conn.connect((destination, int(port)))
        conns.append(conn)
    payload, end = bytes(BLOCK), time.monotonic() + float(seconds)
    def write(conn):
        while time.monotonic() < end:
            conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)
        conn.close()
    writers = [threading.Thread(target=write, args=(conn,)) for conn in conns]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
{"receive": receive, "send": send}[sys.argv[1]](*sys.argv[2:])
"""

# Run with `python -c` in a host's namespace: `SOURCE SOURCE_PORT DESTINATION PORT TTL`. Sends one TCP SYN
# with that TTL and IP_RECVERR, prints the address that answered with an ICMP error (time exceeded), or
# nothing if none came within a second.
_HOP_PROGRAM = r"""
import select, socket, sys
IP_RECVERR, SO_EE_ORIGIN_ICMP = 11, 2
source, source_port, destination, port, ttl = sys.argv[1:]
probe = socket.socket()
probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
probe.bind((source, int(source_port)))
probe.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, int(ttl))
probe.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
probe.setblocking(False)
probe.connect_ex((destination, int(port)))
poller = select.poll()
poller.register(probe, select.POLLERR)
if poller.poll(1000):
    _, ancillary, _, _ = probe.recvmsg(512, 512, socket.MSG_ERRQUEUE)
    for level, kind, data in ancillary:
        if level == socket.IPPROTO_IP and kind == IP_RECVERR and data[4] == SO_EE_ORIGIN_ICMP:
            print(socket.inet_ntoa(data[20:24]))
"""


@dataclass(eq=False)
class FabricHost(NetnsHost):
    """A host of the fabric. Unlike a fleet's host, ``data_veth`` is the leaf's port its ``data0`` is cabled to
    (``swpJ``, inside ``leaf_namespace``), and there is no data bridge."""

    leaf: str
    leaf_namespace: str


@dataclass(eq=False)
class FabricSwitch:
    """One switch: its name as the topology and the findings give it, tier (1 leaf, 2 spine), namespace, and
    every address its namespace holds (filled at start)."""

    name: str
    tier: int
    namespace: str
    addresses: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Uplink:
    """The cable between ``leaf`` and ``spine``: the port and address at each end."""

    leaf: str
    spine: str
    leaf_port: str
    spine_port: str
    leaf_address: str
    spine_address: str


@dataclass(frozen=True)
class StreamRate:
    """One TCP stream of ``measure_streams``: its client's source port, the bytes the server read and their
    rate in Mbit/s from the first byte to the last."""

    source_port: int
    bytes: int
    mbit_per_s: float


class NetnsFabric(NetnsFleet):
    """A leaf–spine fabric of ``leaves`` leaves with ``hosts_per_leaf`` hosts each and ``spines`` spines.

    A context manager as ``NetnsFleet``; ``tag``, ``log_level`` and ``start_timeout_s`` as there. ``host_mbit``
    and ``uplink_mbit`` are the nominal rates of host links and uplinks in Mbit/s (htb on both ends); uplinks
    default to ``hosts_per_leaf`` × ``host_mbit``, so a healthy fabric never holds a stream back even where
    every stream of a leaf hashes onto one spine: a host link is the bottleneck."""

    def __init__(self, leaves: int = 3, hosts_per_leaf: int = 3, spines: int = 2, *,
                 host_mbit: int = HOST_MBIT, uplink_mbit: int | None = None, tag: str | None = None,
                 log_level: str = "ERROR", start_timeout_s: float = 15.0) -> None:
        if not (1 <= leaves < UPLINK_THIRD_OCTET and 1 <= spines and leaves * spines <= MAX_UPLINKS):
            raise ValueError(f"a fabric has 1..{UPLINK_THIRD_OCTET - 1} leaves and at most {MAX_UPLINKS} uplinks, "
                             f"not {leaves} leaves × {spines} spines")
        if not 1 <= hosts_per_leaf < UPLINK_PORT_BASE:
            raise ValueError(f"a leaf has 1..{UPLINK_PORT_BASE - 1} hosts, not {hosts_per_leaf}")
        super().__init__(leaves * hosts_per_leaf, tag=tag, log_level=log_level, start_timeout_s=start_timeout_s)
        self.hosts_per_leaf = hosts_per_leaf
        self.host_mbit = host_mbit
        self.uplink_mbit = hosts_per_leaf * host_mbit if uplink_mbit is None else uplink_mbit
        self.leaves = [f"leaf{number}" for number in range(1, leaves + 1)]
        self.spines = [f"spine{number}" for number in range(1, spines + 1)]
        self.switches = {name: FabricSwitch(name, LEAF_TIER, f"{self.prefix}l{name[4:]}") for name in self.leaves}
        self.switches |= {name: FabricSwitch(name, SPINE_TIER, f"{self.prefix}s{name[5:]}") for name in self.spines}
        self.hosts: list[FabricHost] = []  # type: ignore[assignment]  # the fleet's list, of fabric hosts
        self.uplinks: dict[tuple[str, str], Uplink] = {}
        self._uplink_caps: dict[tuple[str, str], int] = {}  # below uplink_mbit, by (leaf, spine)
        self._cut: set[tuple[str, str]] = set()
        self._withdrawn: set[tuple[str, str]] = set()  # cut uplinks the other leaves' routes leave out

    # --- names ---------------------------------------------------------------------------------

    def switch_names(self) -> list[str]:
        """``leaf1``.. then ``spine1``.."""
        return [*self.leaves, *self.spines]

    def namespaces(self) -> list[str]:
        """The hosts' namespaces, then the leaves' and the spines'."""
        return [*super().namespaces(), *(switch.namespace for switch in self.switches.values())]

    def root_links(self) -> list[str]:
        """The root namespace's links of the fabric: each host's management veth, then the management bridge."""
        return [f"{self.prefix}m{name[4:]}" for name in self.host_names()] + [self.mgmt_bridge]

    def leaf_of(self, name: str) -> str:
        """The leaf host ``name`` is cabled to. Raises KeyError for a host not in the fabric."""
        names = self.host_names()
        if name not in names:
            raise KeyError(name)
        return self.leaves[names.index(name) // self.hosts_per_leaf]

    def hosts_under(self, leaf: str) -> list[str]:
        """The hosts cabled to ``leaf``, in order."""
        return [name for name in self.host_names() if self.leaf_of(name) == leaf]

    def uplink(self, leaf: str, spine: str) -> Uplink:
        """The cable between ``leaf`` and ``spine``. Raises KeyError if there is none (or before start)."""
        return self.uplinks[(leaf, spine)]

    def switch_at(self, address: str) -> str | None:
        """The switch whose namespace holds ``address``, None if none does."""
        return next((switch.name for switch in self.switches.values() if address in switch.addresses), None)

    # --- building ------------------------------------------------------------------------------

    def _leaf_subnet(self, leaf: str) -> ipaddress.IPv4Network:
        assert self.data_network is not None
        return ipaddress.IPv4Network((int(self.data_network.network_address) + (int(leaf[4:]) << 8), 24))

    def _make_hosts(self, host_key_lines: list[str]) -> None:
        """The hosts (management as the fleet's, data in their leaf's /24) and the uplinks' addresses; the data
        network becomes the /16 the fleet's data /24 opens."""
        assert self.mgmt_network is not None and self.data_network is not None
        self.data_network = self.data_network.supernet(new_prefix=16)
        for index, (name, namespace, key_line) in enumerate(
                zip(self.host_names(), super().namespaces(), host_key_lines, strict=True)):
            directory = self.directory / name
            mgmt_address = str(self.mgmt_network[index + 1])
            sshd = TestHost(name, mgmt_address, SSH_PORT, directory / "ssh_host_ed25519_key", key_line,
                            directory / "authorized_keys", directory / "sshd.log", namespace=namespace)
            leaf = self.leaf_of(name)
            port_number = index % self.hosts_per_leaf + 1
            self.hosts.append(FabricHost(name, namespace, mgmt_address, str(self._leaf_subnet(leaf)[port_number]),
                                         f"{self.prefix}m{name[4:]}", f"swp{port_number}", sshd, leaf=leaf,
                                         leaf_namespace=self.switches[leaf].namespace))
        self._shaping = {host.name: _Shaping() for host in self.hosts}
        self._plan_uplinks()

    def _plan_uplinks(self) -> None:
        assert self.data_network is not None
        uplink_base = int(self.data_network.network_address) + (UPLINK_THIRD_OCTET << 8)
        for index, (leaf, spine) in enumerate((leaf, spine) for leaf in self.leaves for spine in self.spines):
            pair = ipaddress.IPv4Network((uplink_base + 2 * index, 31))
            self.uplinks[(leaf, spine)] = Uplink(leaf, spine, f"swp{UPLINK_PORT_BASE + int(spine[5:])}",
                                                 f"swp{leaf[4:]}", str(pair[0]), str(pair[1]))
        for leaf in self.leaves:
            self.switches[leaf].addresses = [str(self._leaf_subnet(leaf)[GATEWAY_HOST_NUMBER]),
                                             *(self.uplinks[(leaf, spine)].leaf_address for spine in self.spines)]
        for spine in self.spines:
            self.switches[spine].addresses = [self.uplinks[(leaf, spine)].spine_address for leaf in self.leaves]

    def _make_network(self) -> None:
        """Every namespace, the management bridge with its address, every veth (management, host links, uplinks)
        in one ``ip -batch``; what it makes is recorded first, so a failure half-way is cleaned up too."""
        assert self.mgmt_network is not None
        taken = sorted((set(self.namespaces()) & namespace_names()) | (set(self.root_links()) & link_names()))
        if taken:  # another fabric's or fleet's (or a leftover): never record, and so never delete, what is not ours
            raise NetnsSetupError(f"names of fabric {self.prefix} already exist: {', '.join(taken)}")
        self._resources.namespaces.extend(self.namespaces())
        self._resources.links.extend(self.root_links())
        commands = [f"netns add {namespace}" for namespace in self.namespaces()]
        bridge_address = f"{self.mgmt_network[BRIDGE_HOST_NUMBER]}/{self.mgmt_network.prefixlen}"
        commands += [f"link add {self.mgmt_bridge} type bridge", f"link set {self.mgmt_bridge} up",
                     f"address add {bridge_address} dev {self.mgmt_bridge}"]
        for host in self.hosts:
            commands += [f"link add {host.mgmt_veth} type veth peer name {MGMT_INTERFACE} netns {host.namespace}",
                         f"link set {host.mgmt_veth} master {self.mgmt_bridge} up",
                         f"link add {host.data_veth} netns {host.leaf_namespace} type veth "
                         f"peer name {DATA_INTERFACE} netns {host.namespace}"]
        for uplink in self.uplinks.values():
            commands.append(f"link add {uplink.leaf_port} netns {self.switches[uplink.leaf].namespace} type veth "
                            f"peer name {uplink.spine_port} netns {self.switches[uplink.spine].namespace}")
        _run_ip_batch(commands)

    def _configure_namespaces(self) -> None:
        """Addresses, links up and sysctls in every namespace, then the routes, then the nominal rates."""
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda host: _run_ip_batch(self._host_commands(host), namespace=host.namespace),
                          self.hosts))
            list(pool.map(self._configure_switch, self.switches.values()))
            list(pool.map(self._apply_routes, self.switches.values()))
        self._apply_shaping(self.hosts)
        self._apply_uplink_rates(list(self.uplinks.values()))

    def _host_commands(self, host: FabricHost) -> list[str]:
        assert self.mgmt_network is not None and self.data_network is not None
        gateway = self._leaf_subnet(host.leaf)[GATEWAY_HOST_NUMBER]
        return ["link set lo up",
                f"address add {host.mgmt_address}/{self.mgmt_network.prefixlen} dev {MGMT_INTERFACE}",
                f"address add {host.data_address}/24 dev {DATA_INTERFACE}",
                f"link set {MGMT_INTERFACE} up", f"link set {DATA_INTERFACE} up",
                f"route add {self.data_network} via {gateway} dev {DATA_INTERFACE}"]

    def _configure_switch(self, switch: FabricSwitch) -> None:
        _set_sysctls(switch.namespace)
        commands = ["link set lo up"]
        if switch.tier == LEAF_TIER:
            commands += [f"link add {LEAF_BRIDGE} type bridge",
                         *(f"link set {host.data_veth} master {LEAF_BRIDGE} up"
                           for host in self.hosts if host.leaf == switch.name),
                         f"address add {switch.addresses[0]}/24 dev {LEAF_BRIDGE}", f"link set {LEAF_BRIDGE} up"]
        for uplink in self.uplinks.values():
            if switch.name in (uplink.leaf, uplink.spine):
                port, address = ((uplink.leaf_port, uplink.leaf_address) if switch.name == uplink.leaf
                                 else (uplink.spine_port, uplink.spine_address))
                commands += [f"address add {address}/31 dev {port}", f"link set {port} up"]
        _run_ip_batch(commands, namespace=switch.namespace)

    def _route_commands(self, switch: FabricSwitch) -> list[str]:
        """``ip route replace`` lines for every other leaf's /24 from ``switch``: a spine's goes to that leaf, a
        leaf's over every spine whose uplinks at both ends carry routes (all but withdrawn cuts)."""
        if switch.tier == SPINE_TIER:
            return [f"route replace {self._leaf_subnet(uplink.leaf)} via {uplink.leaf_address} dev {uplink.spine_port}"
                    for uplink in self.uplinks.values()
                    if uplink.spine == switch.name and (uplink.leaf, uplink.spine) not in self._cut]
        commands = []
        for leaf in self.leaves:
            if leaf == switch.name:
                continue
            hops = [self.uplinks[(switch.name, spine)] for spine in self.spines
                    if (switch.name, spine) not in self._cut
                    and not {(switch.name, spine), (leaf, spine)} & self._withdrawn]
            nexthops = " ".join(f"nexthop via {uplink.spine_address} dev {uplink.leaf_port}" for uplink in hops)
            commands.append(f"route replace {self._leaf_subnet(leaf)} {nexthops}" if hops
                            else f"route replace unreachable {self._leaf_subnet(leaf)}")
        return commands

    def _apply_routes(self, switch: FabricSwitch) -> None:
        _run_ip_batch(self._route_commands(switch), namespace=switch.namespace)

    # --- host links: the fleet's injectors, on the leaf's port --------------------------------

    def _link_mbit(self, host: NetnsHost) -> int | None:
        """A host link never runs above the nominal ``host_mbit``: lifting every cap gives that back."""
        caps = [mbit for mbit in (self._all_mbit, self._shaping[host.name].host_mbit) if mbit is not None]
        return min([self.host_mbit, *caps])

    def _apply_shaping(self, hosts: list[NetnsHost]) -> None:
        """Rewrite the qdiscs of both ends of each host link: ``data0`` in the host (the link rate and the
        cap_pair classes), the leaf's port (the link rate, towards the host)."""
        by_leaf: dict[str, list[str]] = {}
        for host in hosts:
            assert isinstance(host, FabricHost)
            link_mbit = self._link_mbit(host)
            _run_ip_batch(shaping_commands(DATA_INTERFACE, link_mbit, self._shaping[host.name].pair_mbit),
                          namespace=host.namespace, tool=TC)
            by_leaf.setdefault(host.leaf_namespace, []).extend(shaping_commands(host.data_veth, link_mbit, {}))
        for namespace, commands in by_leaf.items():
            _run_ip_batch(commands, namespace=namespace, tool=TC)

    def cut_data(self, name: str) -> None:
        """Take host ``name``'s link down at the leaf's port: its ``data0`` loses carrier; SSH still works."""
        host = self._fabric_host(name)
        _run_ip_batch([f"link set {host.data_veth} down"], namespace=host.leaf_namespace)

    def restore_data(self, name: str) -> None:
        """Undo ``cut_data``."""
        host = self._fabric_host(name)
        _run_ip_batch([f"link set {host.data_veth} up"], namespace=host.leaf_namespace)

    def _fabric_host(self, name: str) -> FabricHost:
        host = self.host(name)
        assert isinstance(host, FabricHost)
        return host

    # --- uplinks -------------------------------------------------------------------------------

    def _apply_uplink_rates(self, uplinks: list[Uplink]) -> None:
        """Rewrite the htb of both ends of each uplink from its recorded rate (one batch per switch)."""
        by_namespace: dict[str, list[str]] = {}
        for uplink in uplinks:
            mbit = self._uplink_caps.get((uplink.leaf, uplink.spine), self.uplink_mbit)
            for switch, port in ((uplink.leaf, uplink.leaf_port), (uplink.spine, uplink.spine_port)):
                by_namespace.setdefault(self.switches[switch].namespace, []).extend(shaping_commands(port, mbit, {}))
        for namespace, commands in by_namespace.items():
            _run_ip_batch(commands, namespace=namespace, tool=TC)

    def slow_uplink(self, leaf: str, spine: str, mbit: int | None) -> None:
        """Hold the cable between ``leaf`` and ``spine`` to ``mbit`` Mbit/s in both directions (None: back to
        ``uplink_mbit``). Models a cable or optic trained at a lower rate: every stream hashed onto it slows.
        Raises KeyError for a leaf or spine not in the fabric."""
        uplink = self.uplink(leaf, spine)
        if mbit is None:
            self._uplink_caps.pop((leaf, spine), None)
        else:
            self._uplink_caps[(leaf, spine)] = mbit
        self._apply_uplink_rates([uplink])

    def slow_spine(self, spine: str, mbit: int | None) -> None:
        """``slow_uplink`` on every cable of ``spine`` (None: all back to ``uplink_mbit``)."""
        for leaf in self.leaves:
            self.slow_uplink(leaf, spine, mbit)

    def cut_uplink(self, leaf: str, spine: str, *, reroute: bool = False) -> None:
        """Take both ends of the cable between ``leaf`` and ``spine`` down. ``leaf`` then sends over its other
        spines; without ``reroute`` the other leaves still hash streams for ``leaf``'s hosts onto ``spine``,
        which has no way there left (they are lost, as before a routing protocol converges); with ``reroute``
        their routes leave ``spine`` out, as after it has."""
        uplink = self.uplink(leaf, spine)
        self._cut.add((leaf, spine))
        _run_ip_batch([f"link set {uplink.leaf_port} down"], namespace=self.switches[leaf].namespace)
        _run_ip_batch([f"link set {uplink.spine_port} down"], namespace=self.switches[spine].namespace)
        if reroute:
            self._withdrawn.add((leaf, spine))
            for other in self.leaves:
                self._apply_routes(self.switches[other])

    def heal(self) -> None:
        """Undo every injector: uplinks up at ``uplink_mbit`` with their routes, host links whole and back at
        ``host_mbit`` (``clear_caps`` and ``restore_data`` of every host)."""
        for leaf, spine in sorted(self._cut):
            uplink = self.uplink(leaf, spine)
            _run_ip_batch([f"link set {uplink.leaf_port} up"], namespace=self.switches[leaf].namespace)
            _run_ip_batch([f"link set {uplink.spine_port} up"], namespace=self.switches[spine].namespace)
        self._cut.clear()
        self._withdrawn.clear()
        self._uplink_caps.clear()
        for switch in self.switches.values():
            self._apply_routes(switch)  # a spine's route over a port that went down is gone
        self._apply_uplink_rates(list(self.uplinks.values()))
        self.clear_caps()
        for host in self.hosts:
            self.restore_data(host.name)

    # --- writers -------------------------------------------------------------------------------

    def topology(self) -> dict[str, Any]:
        """The fabric as gpudiag's topology document (one plane, ``rail`` null): switches with every address,
        leaf–spine links with their ports and nominal rate, each host's attachment to its leaf."""
        return {"schema": TOPOLOGY_SCHEMA, "planes": [{
            "rail": None,
            "switches": [{"name": switch.name, "tier": switch.tier, "addresses": list(switch.addresses)}
                         for switch in self.switches.values()],
            "links": [{"a": uplink.leaf, "b": uplink.spine,
                       "cables": [{"ports": [uplink.leaf_port, uplink.spine_port],
                                   "rate_gbps": self.uplink_mbit / 1000}]} for uplink in self.uplinks.values()],
            "nodes": [{"host": host.name, "switch": host.leaf, "port": host.data_veth,
                       "rate_gbps": self.host_mbit / 1000, "nic": DATA_INTERFACE} for host in self.hosts],
        }]}

    def write_topology(self, path: Path) -> Path:
        """Write ``topology()`` as JSON to ``path``; returns ``path``."""
        path.write_text(json.dumps(self.topology(), indent=1) + "\n")
        return path

    # --- looking at the fabric -----------------------------------------------------------------

    def route_spine(self, client: str, server: str, source_port: int, server_port: int) -> str | None:
        """The spine that ``client``'s leaf forwards the TCP stream from ``source_port`` to ``server``'s
        ``server_port`` to (``ip route get`` of that five-tuple as it arrives from the host), None when both
        hosts are under one leaf."""
        client_host, server_host = self._fabric_host(client), self._fabric_host(server)
        if client_host.leaf == server_host.leaf:
            return None
        shown = subprocess.run([str(IP), "-n", client_host.leaf_namespace, "-j", "route", "get",
                                server_host.data_address, "from", client_host.data_address, "iif", LEAF_BRIDGE,
                                "ipproto", "tcp", "sport", str(source_port), "dport", str(server_port)],
                               capture_output=True, text=True, check=True)
        (route,) = json.loads(shown.stdout)
        return self.switch_at(route["gateway"])

    def ports_by_spine(self, client: str, server: str, server_port: int, per_spine: int,
                       first_port: int = 40000) -> dict[str, list[int]]:
        """``per_spine`` source ports for each spine, from ``first_port`` up, whose TCP streams from ``client``
        to ``server``'s ``server_port`` ``client``'s leaf sends over that spine."""
        found: dict[str, list[int]] = {spine: [] for spine in self.spines}
        port = first_port
        while any(len(ports) < per_spine for ports in found.values()):
            spine = self.route_spine(client, server, port, server_port)
            if spine is None:
                raise ValueError(f"{client} and {server} are under one leaf")
            if len(found[spine]) < per_spine:
                found[spine].append(port)
            port += 1
            if port > first_port + 200 * per_spine * len(self.spines):
                raise RuntimeError(f"source ports from {first_port} never hash onto some spine: {found}")
        return found

    def trace_hop(self, client: str, server: str, source_port: int, server_port: int, ttl: int) -> str | None:
        """The address that answers a TCP SYN from ``client``'s ``source_port`` to ``server``'s ``server_port``
        sent with ``ttl`` (ICMP time exceeded, read with IP_RECVERR), None if none does within a second."""
        client_host = self._fabric_host(client)
        done = self.run_in(client, [sys.executable, "-c", _HOP_PROGRAM, client_host.data_address, str(source_port),
                                    self.host(server).data_address, str(server_port), str(ttl)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = done.communicate(timeout=10)
        if done.returncode != 0:
            raise RuntimeError(f"the hop probe failed in {client}: {err}")
        return out.strip() or None

    def measure_streams(self, client: str, server: str, source_ports: Iterable[int], server_port: int,
                        duration_s: float = 1.0) -> list[StreamRate]:
        """Send from ``client`` to ``server``'s ``server_port`` for ``duration_s`` seconds on one TCP stream per
        source port; each stream's rate as the server read it, in the order of ``source_ports``. Raises
        RuntimeError if either end fails. A four-tuple is not reused within a minute (TIME_WAIT): vary
        ``server_port`` between calls that use the same source ports."""
        ports = list(source_ports)
        receiver = self.run_in(server, [sys.executable, "-c", _STREAMS_PROGRAM, "receive",
                                        self.host(server).data_address, str(server_port), str(len(ports))],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert receiver.stdout is not None
        if receiver.stdout.readline().strip() != "ready":
            receiver.kill()
            raise RuntimeError(f"the receiver in {server} did not start: {receiver.communicate()[1]}")
        sender = self.run_in(client, [sys.executable, "-c", _STREAMS_PROGRAM, "send", self.host(client).data_address,
                                      self.host(server).data_address, str(server_port), f"{duration_s:g}",
                                      ",".join(map(str, ports))],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, sent_err = sender.communicate(timeout=duration_s + 30)
            if sender.returncode != 0:
                raise RuntimeError(f"the sender in {client} failed: {sent_err}")
            out, received_err = receiver.communicate(timeout=10)
            if receiver.returncode != 0:
                raise RuntimeError(f"the receiver in {server} failed: {received_err}")
        finally:
            for process in (sender, receiver):
                if process.poll() is None:
                    process.kill()
                    process.wait()
        counts = {count["source_port"]: count for count in json.loads(out)}
        return [StreamRate(port, counts[port]["bytes"], _mbit_per_s(counts[port])) for port in ports]


def _mbit_per_s(count: dict[str, Any]) -> float:
    seconds = (count["last_s"] or 0.0) - (count["first_s"] or 0.0)
    return count["bytes"] * 8 / seconds / 1e6 if seconds > 0 else 0.0


def _set_sysctls(namespace: str) -> None:
    """The switch sysctls inside ``namespace``: all of SWITCH_SYSCTLS, those of OPTIONAL_SWITCH_SYSCTLS the
    kernel has there. Raises NetnsSetupError."""
    def assignments(settings: dict[str, str]) -> str:
        return " ".join(f"{key}={value}" for key, value in settings.items())
    script = (f"sysctl -q -w {assignments(SWITCH_SYSCTLS)} && "
              f"sysctl -q -e -w {assignments(OPTIONAL_SWITCH_SYSCTLS)}")
    done = subprocess.run([str(IP), "netns", "exec", namespace, "sh", "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise NetnsSetupError(f"sysctl in {namespace} failed: {done.stderr.strip()}")


@contextlib.contextmanager
def checked_fabric(**kwargs: Any) -> Iterator[NetnsFabric]:
    """A started ``NetnsFabric(**kwargs)``, stopped at the end; then fails (AssertionError) if a
    process, namespace or root-namespace link of it is left."""
    fabric = NetnsFabric(**kwargs).start()
    try:
        yield fabric
    finally:
        pids = fabric.process_ids()
        fabric.stop()
    assert not [pid for pid in pids if pid_is_running(pid)]
    assert not set(fabric.namespaces()) & namespace_names() and not set(fabric.root_links()) & link_names()
