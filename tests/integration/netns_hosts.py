"""Real hosts in Linux network namespaces, each with its own sshd, for integration tests of the link tests.

``NetnsFleet(count)`` makes ``count`` hosts ``node01``..``nodeNN``. Each is a network namespace with two veth
links: ``mgmt0`` on a management bridge and ``data0`` on a separate data bridge. The root namespace holds both
bridges and an address on the management one only, so this process reaches every host's sshd (port 22 of its
management address) while the hosts reach each other over the data network, as a GPU fleet's controller and
nodes do. One generated client key logs in to every host as root.

The fault injectors change the data network the way broken hardware does: ``cap_host`` (a port trained at a
lower rate), ``cap_pair`` (one slow path between two hosts), ``cut_data`` (a dead port or cable), and
``cap_all`` gives every link a known line rate. Rates are ``htb`` classes on both ends of each data veth.

Every name the fleet creates starts with ``gd<tag>`` (``gd<tag>h01`` namespaces, ``gd<tag>m01``/``gd<tag>d01``
host-side veths, ``gd<tag>bm``/``gd<tag>bd`` bridges), so fleets of parallel runs never collide. ``stop()``
removes all of it; so does a finaliser if the fleet is dropped or the interpreter exits without a stop.
Needs root (CAP_NET_ADMIN) and OpenSSH's sshd; ``netns_unavailable_reason()`` says why a machine cannot.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from sshd_hosts import (
    IP,
    PRIVSEP_DIR,
    SshdStartError,
    TestHost,
    generate_ed25519_key,
    known_hosts_text,
    process_ids_matching,
    ssh_config_block,
    sshd_config_text,
    sshd_unavailable_reason,
    stop_sshd_processes,
    wait_listening,
)
from started import Started

TC = Path("/usr/sbin/tc")
MGMT_INTERFACE = "mgmt0"
DATA_INTERFACE = "data0"
SSH_PORT = 22
BRIDGE_HOST_NUMBER = 254  # the bridge's address is .254 of each subnet; host i is .(i+1)
MAX_HOSTS = 200
# The management subnet is 10.<x>.0.0/24 and the data subnet 10.<x+1>.0.0/24 for the first even x here whose
# two subnets overlap no route of the machine. Even x only: a fleet's management route (the one the root
# namespace shows) then also marks the data subnet of the pair as taken for fleets that start later.
SECOND_OCTETS = range(100, 250, 2)
SUBNET_LOCK = Path("/run/lock/gpudiag-netns.lock")
# The rate of a link that has no cap but carries a cap_pair class: far above what a veth moves.
UNCAPPED_MBIT = 100_000
# Bytes a shaped class may send at once: one GSO packet (TCP over veth hands the qdisc up to 64 KiB at a time),
# or this long at the class's rate if more. Measured at 50 and 200 Mbit/s with 1.5 s runs, buckets from 1.6 KB
# to 128 KiB all give 0.96 of the rate (TCP payload over wire bytes); 512 KiB lets a 50 Mbit/s run read 0.998.
MIN_BURST_BYTES = 64 * 1024
BURST_S = 0.002
_TAG = re.compile(r"[a-z0-9]{1,8}")


class NetnsSetupError(RuntimeError):
    """A namespace, link, address or qdisc could not be made; the message carries the tool's stderr."""


@functools.cache
def netns_unavailable_reason() -> str | None:
    """Why this machine cannot run a ``NetnsFleet`` (a sentence for ``pytest.skip``), or None if it can.
    Tries ``ip netns add`` once: containers without CAP_NET_ADMIN refuse it."""
    reason = sshd_unavailable_reason()
    if reason is not None:
        return reason
    if not (IP.exists() and TC.exists()):
        return f"needs iproute2's {IP} and {TC}"
    probe = f"gdprobe{os.getpid() % 100000}"
    added = subprocess.run([str(IP), "netns", "add", probe], capture_output=True, text=True)
    if added.returncode != 0:
        return f"cannot make network namespaces (ip netns add: {added.stderr.strip()}); needs CAP_NET_ADMIN"
    subprocess.run([str(IP), "netns", "delete", probe], capture_output=True)
    return None


# The explicit condition of every test that needs hosts in network namespaces (root, CAP_NET_ADMIN,
# iproute2, sshd): many containers and CI runners do not grant CAP_NET_ADMIN.
requires_netns = pytest.mark.skipif(netns_unavailable_reason() is not None,
                                    reason=f"network namespaces: {netns_unavailable_reason()}")


def _run_ip_batch(commands: Iterable[str], *, namespace: str | None = None, tool: Path = IP,
                  force: bool = False) -> None:
    """Run ``ip`` (or ``tc``) commands, one per line, in one process; inside ``namespace`` if given.
    Raises NetnsSetupError naming the failed command, unless ``force`` (go on past errors: for cleanup)."""
    argv = [str(tool), *(["-n", namespace] if namespace else []), *(["-force"] if force else []), "-batch", "-"]
    text = "".join(f"{command}\n" for command in commands)
    done = subprocess.run(argv, input=text, capture_output=True, text=True)
    if done.returncode != 0 and not force:
        where = f" in {namespace}" if namespace else ""
        raise NetnsSetupError(f"{tool.name}{where} failed: {done.stderr.strip()}\ncommands:\n{text}")


def _routes() -> list[ipaddress.IPv4Network]:
    """Destinations of every IPv4 route of the root namespace, all tables, the default routes left out."""
    listed = subprocess.run([str(IP), "-j", "-4", "route", "show", "table", "all"],
                            capture_output=True, text=True, check=True)
    return [ipaddress.IPv4Network(route["dst"], strict=False)
            for route in json.loads(listed.stdout or "[]") if route.get("dst", "default") != "default"]


def choose_second_octet(routes: Iterable[ipaddress.IPv4Network]) -> int:
    """The first x of SECOND_OCTETS whose 10.x.0.0/24 and 10.(x+1).0.0/24 overlap none of ``routes``.
    Raises NetnsSetupError when every one is taken."""
    taken = list(routes)
    for octet in SECOND_OCTETS:
        subnets = [ipaddress.IPv4Network(f"10.{octet + step}.0.0/24") for step in (0, 1)]
        if not any(subnet.overlaps(route) for subnet in subnets for route in taken):
            return octet
    raise NetnsSetupError(f"no free pair of 10.x.0.0/24 subnets for x in {SECOND_OCTETS}")


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    """Held from choosing the subnets until the management route exists, so two fleets never pick the same."""
    SUBNET_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with SUBNET_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def namespace_pids(namespace: str) -> set[int]:
    """Live processes (this one excluded) whose network namespace is the named one (``ip netns pids``)."""
    try:
        wanted = os.stat(f"/run/netns/{namespace}")
    except FileNotFoundError:
        return set()
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            own = os.stat(f"/proc/{entry.name}/ns/net")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if (own.st_dev, own.st_ino) == (wanted.st_dev, wanted.st_ino):
            found.add(int(entry.name))
    return found


def _kill_namespace_processes(namespaces: Iterable[str], timeout_s: float = 5.0) -> None:
    """SIGKILL every process in ``namespaces`` until none is left (what one forks in the meantime included)."""
    deadline = time.monotonic() + timeout_s
    names = list(namespaces)
    while time.monotonic() < deadline:
        pids = set().union(*(namespace_pids(name) for name in names))
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def link_names() -> set[str]:
    """Names of the root namespace's network links."""
    return set(os.listdir("/sys/class/net"))


def namespace_names() -> set[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    try:
        return set(os.listdir("/run/netns"))
    except FileNotFoundError:
        return set()


@dataclass
class _Resources:
    """What a fleet has made, to be removed by ``release`` (a finaliser: it must not refer to the fleet)."""

    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # root namespace: host-side veths first, then the bridges
    sshd_hosts: list[TestHost] = field(default_factory=list)  # their process changes if one restarts
    other_processes: list[subprocess.Popen[Any]] = field(default_factory=list)
    directory: Path | None = None

    def release(self) -> None:
        """Kill the fleet's processes, delete its links, namespaces and directory; wait until they are gone."""
        stop_sshd_processes([host.process for host in self.sshd_hosts if host.process is not None])
        for process in self.other_processes:
            if process.poll() is None:
                process.kill()
        _kill_namespace_processes(self.namespaces)
        for process in self.other_processes:
            process.wait()
        # Links before namespaces: a namespace is torn down asynchronously after its deletion, and with it the
        # root-side peers of its veths; deleting a root-side veth takes its peer with it at once.
        commands = [f"link delete {name}" for name in self.links if name in link_names()]
        commands += [f"netns delete {name}" for name in self.namespaces if name in namespace_names()]
        if commands:
            _run_ip_batch(commands, force=True)
        _wait_gone(self.links, self.namespaces)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def _wait_gone(links: list[str], namespaces: list[str], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not (set(links) & link_names() or set(namespaces) & namespace_names()):
            return
        time.sleep(0.01)


@dataclass(eq=False)
class NetnsHost:
    """One host of a fleet: its namespace, addresses, the root-namespace ends of its veths, and its sshd."""

    name: str
    namespace: str
    mgmt_address: str
    data_address: str
    mgmt_veth: str  # the root-namespace peer of the host's mgmt0, a port of the management bridge
    data_veth: str  # the root-namespace peer of the host's data0, a port of the data bridge
    sshd: TestHost

    @property
    def address(self) -> str:
        """Where to reach the host's sshd (port 22): its management address."""
        return self.mgmt_address


@dataclass
class _Shaping:
    """The caps on one host's data link, in Mbit/s: its own (``cap_host``) and per peer (``cap_pair``)."""

    host_mbit: int | None = None
    pair_mbit: dict[str, int] = field(default_factory=dict)


def _burst_bytes(mbit: int) -> int:
    return max(MIN_BURST_BYTES, int(mbit * 1e6 / 8 * BURST_S))


def _htb_class(device: str, parent: str, classid: str, rate_mbit: int, ceil_mbit: int) -> str:
    burst = _burst_bytes(ceil_mbit)
    return (f"class add dev {device} parent {parent} classid {classid} htb rate {rate_mbit}mbit "
            f"ceil {ceil_mbit}mbit burst {burst} cburst {burst} quantum {MIN_BURST_BYTES}")


def shaping_commands(device: str, link_mbit: int | None, pair_mbit: dict[str, int]) -> list[str]:
    """``tc`` commands that give ``device``'s egress the rate ``link_mbit`` (None: uncapped) and send the
    packets for each address of ``pair_mbit`` at that many Mbit/s at most (within ``link_mbit``).

    Always one shape: htb root 1:, class 1:1 at the link's rate, below it the default class 1:10 and one class
    per pair address chosen by a u32 filter on the destination; they borrow from 1:1 up to their ceilings, so
    the link's rate bounds their sum. Without any cap the device keeps no qdisc. Whatever tree was there is
    thrown away first (replaced by a pfifo), so the commands describe the whole state, not a change.
    """
    lines = [f"qdisc replace dev {device} root pfifo"]
    if link_mbit is None and not pair_mbit:
        return [*lines, f"qdisc delete dev {device} root"]
    total = link_mbit if link_mbit is not None else UNCAPPED_MBIT
    share = max(1, total // (len(pair_mbit) + 1))  # guaranteed rates sum to at most the link's rate
    lines += [f"qdisc replace dev {device} root handle 1: htb default 10",
              _htb_class(device, "1:", "1:1", total, total),
              _htb_class(device, "1:1", "1:10", share, total)]
    for index, (address, mbit) in enumerate(sorted(pair_mbit.items()), start=11):
        ceiling = min(mbit, total)
        lines += [_htb_class(device, "1:1", f"1:{index}", min(share, ceiling), ceiling),
                  f"filter add dev {device} parent 1: protocol ip prio 1 u32 match ip dst {address}/32 "
                  f"flowid 1:{index}"]
    return lines


class NetnsFleet(Started):
    """``count`` hosts ``node01``.. in network namespaces joined by a management and a data bridge.

    A context manager: ``with NetnsFleet(6) as fleet:`` starts all and stops all. ``tag`` (1-8 of a-z0-9,
    random by default) goes into every name the fleet makes. ``log_level`` is sshd's LogLevel.
    """

    def __init__(self, count: int = 6, *, tag: str | None = None, log_level: str = "ERROR",
                 start_timeout_s: float = 15.0) -> None:
        if not 1 <= count <= MAX_HOSTS:
            raise ValueError(f"a fleet has 1..{MAX_HOSTS} hosts, not {count}")
        tag = secrets.token_hex(3) if tag is None else tag
        if not _TAG.fullmatch(tag):
            raise ValueError(f"tag must be 1-8 of a-z and 0-9, not {tag!r}")
        self.count = count
        self.prefix = f"gd{tag}"
        self.log_level = log_level
        self.start_timeout_s = start_timeout_s
        self.user = "root"
        self.hosts: list[NetnsHost] = []
        self.mgmt_network: ipaddress.IPv4Network | None = None
        self.data_network: ipaddress.IPv4Network | None = None
        self._all_mbit: int | None = None
        self._shaping: dict[str, _Shaping] = {}
        self._resources = _Resources()
        self._release = weakref.finalize(self, self._resources.release)  # also runs at interpreter exit

    # --- names and files ---------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The fleet's private temporary directory (keys, sshd configs and logs)."""
        if self._resources.directory is None:
            raise RuntimeError("the fleet is not started")
        return self._resources.directory

    @property
    def client_key_path(self) -> Path:
        """Private key every host accepts for root (its public half is ``client_key_path`` + ".pub")."""
        return self.directory / "client_ed25519"

    @property
    def mgmt_bridge(self) -> str:
        return f"{self.prefix}bm"

    @property
    def data_bridge(self) -> str:
        return f"{self.prefix}bd"

    def host_names(self) -> list[str]:
        width = max(2, len(str(self.count)))
        return [f"node{index:0{width}d}" for index in range(1, self.count + 1)]

    def host(self, name: str) -> NetnsHost:
        """The host called ``name``. Raises KeyError if there is none."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def namespaces(self) -> list[str]:
        """The names of the fleet's network namespaces (made or to be made)."""
        return [f"{self.prefix}h{name[4:]}" for name in self.host_names()]

    def root_links(self) -> list[str]:
        """The names of the fleet's links in the root namespace: host-side veths, then the two bridges."""
        numbers = [name[4:] for name in self.host_names()]
        return ([f"{self.prefix}{kind}{number}" for number in numbers for kind in ("m", "d")]
                + [self.mgmt_bridge, self.data_bridge])

    def write_known_hosts(self, path: Path) -> Path:
        """Write every host's known_hosts entry (its management address) to ``path``; returns ``path``."""
        path.write_text(known_hosts_text(host.sshd for host in self.hosts))
        return path

    def write_ssh_config(self, path: Path, known_hosts_path: Path | None = None) -> Path:
        """Write an ssh_config with a ``Host nodeNN`` block per host: HostName its management address, User
        root, the client key, host keys checked strictly against ``known_hosts_path`` (default: a file the
        fleet wrote in its directory). Returns ``path``."""
        known = known_hosts_path or self.write_known_hosts(self.directory / "known_hosts")
        path.write_text("\n".join(ssh_config_block(host.sshd, self.user, self.client_key_path, known)
                                  for host in self.hosts))
        return path

    def write_hosts_file(self, path: Path, names: Iterable[str] | None = None, data_field: bool = False) -> Path:
        """Write host names (default: all), one per line, to ``path``; with ``data_field`` each line is
        ``nodeNN net=<data address>``. Returns ``path``. Raises KeyError for a name not in the fleet."""
        selected = self.host_names() if names is None else list(names)
        lines = [f"{name} net={self.host(name).data_address}" if data_field else name for name in selected]
        path.write_text("".join(f"{line}\n" for line in lines))
        return path

    # --- start and stop ----------------------------------------------------------------------

    def start(self) -> NetnsFleet:
        """Make the namespaces, bridges and links, launch every sshd, wait until each accepts connections
        from this process. Raises NetnsSetupError or SshdStartError, having removed what was made."""
        if self._resources.directory is not None or not self._release.alive:
            raise RuntimeError("a fleet starts once; make a new NetnsFleet")
        started = False
        try:
            self._start()
            started = True
        finally:
            if not started:
                self.stop()
        return self

    def _start(self) -> None:
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        self._resources.directory = Path(tempfile.mkdtemp(prefix="gpudiag-netns-"))
        key_lines = self._generate_keys()
        with _subnet_lock():
            octet = choose_second_octet(_routes())
            self.mgmt_network = ipaddress.IPv4Network(f"10.{octet}.0.0/24")
            self.data_network = ipaddress.IPv4Network(f"10.{octet + 1}.0.0/24")
            self._make_hosts(key_lines[1:])
            self._make_network()
        self._configure_namespaces()
        for host in self.hosts:
            self._launch_sshd(host, key_lines[0])
        wait_listening([host.sshd for host in self.hosts], self.start_timeout_s)
        self._wait_accepting(self.start_timeout_s)

    def _generate_keys(self) -> list[str]:
        """The client key's public line, then each host's host key line (ssh-keygen runs in parallel)."""
        names = self.host_names()
        paths = [self.client_key_path] + [self.directory / name / "ssh_host_ed25519_key" for name in names]
        for name in names:
            (self.directory / name).mkdir()
        with ThreadPoolExecutor(max_workers=16) as pool:
            return list(pool.map(generate_ed25519_key, paths, ["gpudiag-test-client", *names]))

    def _make_hosts(self, host_key_lines: list[str]) -> None:
        assert self.mgmt_network is not None and self.data_network is not None
        for index, (name, namespace, key_line) in enumerate(
                zip(self.host_names(), self.namespaces(), host_key_lines, strict=True)):
            directory = self.directory / name
            mgmt_address = str(self.mgmt_network[index + 1])
            sshd = TestHost(name, mgmt_address, SSH_PORT, directory / "ssh_host_ed25519_key", key_line,
                            directory / "authorized_keys", directory / "sshd.log", namespace=namespace)
            number = name[4:]
            self.hosts.append(NetnsHost(name, namespace, mgmt_address, str(self.data_network[index + 1]),
                                        f"{self.prefix}m{number}", f"{self.prefix}d{number}", sshd))
            self._shaping[name] = _Shaping()

    def _make_network(self) -> None:
        """The namespaces, the bridges (the management one with its address) and every veth pair, in one
        ``ip -batch``; what it makes is recorded first, so a failure half-way is cleaned up too."""
        assert self.mgmt_network is not None
        taken = sorted((set(self.namespaces()) & namespace_names()) | (set(self.root_links()) & link_names()))
        if taken:  # another fleet's (or a leftover): never record, and so never delete, what is not ours
            raise NetnsSetupError(f"names of fleet {self.prefix} already exist: {', '.join(taken)}")
        self._resources.namespaces.extend(self.namespaces())
        self._resources.links.extend(self.root_links())
        bridge_address = f"{self.mgmt_network[BRIDGE_HOST_NUMBER]}/{self.mgmt_network.prefixlen}"
        commands = [f"netns add {host.namespace}" for host in self.hosts]
        for bridge in (self.mgmt_bridge, self.data_bridge):
            commands += [f"link add {bridge} type bridge", f"link set {bridge} up"]
        commands.append(f"address add {bridge_address} dev {self.mgmt_bridge}")
        for host in self.hosts:
            for veth, inside, bridge in ((host.mgmt_veth, MGMT_INTERFACE, self.mgmt_bridge),
                                         (host.data_veth, DATA_INTERFACE, self.data_bridge)):
                commands += [f"link add {veth} type veth peer name {inside} netns {host.namespace}",
                             f"link set {veth} master {bridge} up"]
        _run_ip_batch(commands)

    def _configure_namespaces(self) -> None:
        """Inside every namespace: lo up, each veth end up with its address (one ``ip -n NS -batch`` each)."""
        assert self.mgmt_network is not None and self.data_network is not None
        prefix = self.mgmt_network.prefixlen
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda host: _run_ip_batch([
                "link set lo up",
                f"address add {host.mgmt_address}/{prefix} dev {MGMT_INTERFACE}",
                f"address add {host.data_address}/{prefix} dev {DATA_INTERFACE}",
                f"link set {MGMT_INTERFACE} up", f"link set {DATA_INTERFACE} up"], namespace=host.namespace),
                self.hosts))

    def _launch_sshd(self, host: NetnsHost, client_key_line: str) -> None:
        host.sshd.authorized_keys_path.write_text(client_key_line + "\n")
        home = self.directory / "home"  # the sessions' HOME (sshd_hosts.sshd_config_text says why)
        home.mkdir(mode=0o700, exist_ok=True)
        host.sshd.config_path.write_text(sshd_config_text(host.sshd, self.log_level, self.prefix,
                                                          {"HOME": str(home)}))
        self._resources.sshd_hosts.append(host.sshd)
        host.sshd.start()

    def _wait_accepting(self, timeout_s: float) -> None:
        """Wait until each sshd sends its banner to a connection from this process over the management
        bridge. Raises SshdStartError naming the first host that does not."""
        deadline = time.monotonic() + timeout_s
        for host in self.hosts:
            while not _sends_ssh_banner(host.mgmt_address, SSH_PORT):
                if time.monotonic() > deadline:
                    raise SshdStartError(f"sshd of {host.name} in {host.namespace} does not answer on "
                                         f"{host.mgmt_address}:{SSH_PORT} after {timeout_s} s")
                time.sleep(0.01)

    def stop(self) -> None:
        """Kill every sshd of the fleet (with its sessions) and every other process in its namespaces, delete
        its veths, bridges, namespaces and directory. Idempotent; a stopped fleet does not start again."""
        self._release()

    # --- running commands inside a host ------------------------------------------------------

    def run_in(self, name: str, argv: list[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside host ``name``'s network namespace (``ip netns exec``); ``popen_kwargs`` go to
        ``subprocess.Popen``. The process is killed and reaped at ``stop()`` if still running."""
        process: subprocess.Popen[Any] = subprocess.Popen(
            [str(IP), "netns", "exec", self.host(name).namespace, *argv], **popen_kwargs)
        self._resources.other_processes.append(process)
        return process

    # --- faults on the data network -----------------------------------------------------------

    def cap_all(self, mbit: int | None) -> None:
        """Give every data link the rate ``mbit`` Mbit/s each way (None: uncapped). Models the fleet's line
        rate; an uncapped veth moves what the CPU can copy, which is neither known nor steady. A host's own
        ``cap_host`` still applies where it is lower."""
        self._all_mbit = mbit
        self._apply_shaping(self.hosts)

    def cap_host(self, name: str, mbit: int | None) -> None:
        """Cap host ``name``'s data link at ``mbit`` Mbit/s in both directions, towards every peer (None:
        lift it). Models a NIC or switch port that trained at a lower rate."""
        self._shaping[self.host(name).name].host_mbit = mbit
        self._apply_shaping([self.host(name)])

    def cap_pair(self, a: str, b: str, mbit: int | None) -> None:
        """Cap only the traffic between hosts ``a`` and ``b`` at ``mbit`` Mbit/s, each way (None: lift it);
        both keep their rate towards everyone else. Models one bad path (a degraded switch hop or cable
        between two ports), which only a pair test finds."""
        host_a, host_b = self.host(a), self.host(b)
        for here, there in ((host_a, host_b), (host_b, host_a)):
            rules = self._shaping[here.name].pair_mbit
            if mbit is None:
                rules.pop(there.data_address, None)
            else:
                rules[there.data_address] = mbit
        self._apply_shaping([host_a, host_b])

    def clear_caps(self) -> None:
        """Lift every cap: cap_all, cap_host and cap_pair."""
        self._all_mbit = None
        self._shaping = {name: _Shaping() for name in self._shaping}
        self._apply_shaping(self.hosts)

    def _link_mbit(self, host: NetnsHost) -> int | None:
        caps = [mbit for mbit in (self._all_mbit, self._shaping[host.name].host_mbit) if mbit is not None]
        return min(caps) if caps else None

    def _apply_shaping(self, hosts: list[NetnsHost]) -> None:
        """Rewrite the qdiscs of both ends of each host's data veth from the recorded caps: data0's egress
        (towards the peers: the link rate and the pair classes) and the root-side peer's egress (towards the
        host: the link rate; a pair's other direction is shaped on the other host's data0)."""
        root_side: list[str] = []
        for host in hosts:
            link_mbit = self._link_mbit(host)
            _run_ip_batch(shaping_commands(DATA_INTERFACE, link_mbit, self._shaping[host.name].pair_mbit),
                          namespace=host.namespace, tool=TC)
            root_side += shaping_commands(host.data_veth, link_mbit, {})
        _run_ip_batch(root_side, tool=TC)

    def cut_data(self, name: str) -> None:
        """Take host ``name``'s data link down: the root-side end of its veth goes down, so its data0 loses
        carrier and nothing crosses it either way; management (SSH) still works. Models a dead data port or
        a pulled cable."""
        _run_ip_batch([f"link set {self.host(name).data_veth} down"])

    def restore_data(self, name: str) -> None:
        """Undo ``cut_data``: the host's data link comes back up."""
        _run_ip_batch([f"link set {self.host(name).data_veth} up"])

    def process_ids(self) -> set[int]:
        """Every live process in the fleet's namespaces (sshd listeners, sessions, commands)."""
        return set().union(*(namespace_pids(namespace) for namespace in self.namespaces()))

    def processes_matching(self, pattern: str) -> set[int]:
        """The live processes in the fleet's namespaces whose command line matches ``pattern``."""
        return process_ids_matching(pattern, self.process_ids())


def _sends_ssh_banner(address: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as conn:
            return conn.recv(4) == b"SSH-"
    except OSError:
        return False


class MakeNetnsFleet(Protocol):
    """The ``netns_fleet_factory`` fixture: starts a fleet that is stopped when the test ends."""

    def __call__(self, count: int = 6, *, tag: str | None = None, log_level: str = "ERROR") -> NetnsFleet: ...
