"""Switches and hosts as network namespaces cabled with veths, each running the real lldpd, for tests of
gpudiag's lldpctl readers on captures the real ``lldpctl -f json`` makes.

``LldpFabric(switches, hosts, cables).start()`` makes a namespace per system, one veth per cable (its ends named
as the cable says, ``swp1`` on a leaf, ``eth0`` on a host: every name lives inside its namespace, none in the
root one), and starts ``lldpd -d`` in each: its own control socket (``-u``) in a private temporary directory,
its own configuration (``-O``: the system's name, a transmit interval of one second; a switch also says it is
an enabled bridge and sends its interface name as port ID, as switch systems running lldpd do, and has two
management addresses of the documentation ranges on its ``lo``, 192.0.2.N and 2001:db8::N, given to ``-m``, so
that lldpctl prints its "mgmt-ip" as a list). Hosts keep lldpd's defaults: a station, port ID its MAC, port
description its interface, a link-local IPv6 management address. ``start`` returns once every system has heard
each neighbour by its name on the right interface; ``capture(name)`` is then that system's ``lldpctl -f json``.

lldpd's control socket is handed to its ``_lldpd`` group, and its clients reach it as that group: the folder
that holds it must be open to others (0755), or every ``lldpctl`` is refused.

lldpd separates privileges: its unprivileged half runs as the package's ``_lldpd`` user, chrooted in
``/run/lldpd``, which lldpd makes itself where it is missing (and every instance shares). Every name the fabric
makes starts with ``gd<tag>`` (namespaces ``gd<tag>leaf01``), so parallel runs never meet; ``stop()`` ends every
process in its namespaces (TERM to each lldpd first, so that it reaps its own child), deletes the namespaces
(their veths with them) and the directory; so does a finaliser if the fabric is dropped unstopped. Needs root
(CAP_NET_ADMIN): ``netns_hosts.requires_netns``; and lldpd: ``lldpd_unavailable_reason()``.
"""

from __future__ import annotations

import functools
import json
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netns_hosts import IP, _kill_namespace_processes, _run_ip_batch, namespace_names, namespace_pids
from started import Started

LLDPD, LLDPCTL, LLDPCLI = Path("/usr/sbin/lldpd"), Path("/usr/sbin/lldpctl"), Path("/usr/sbin/lldpcli")
PRIVSEP_USER = "_lldpd"
TX_INTERVAL_S = 1


class LldpFabricError(RuntimeError):
    """lldpd did not start, or its neighbours were not heard in time; the message says what was heard."""


@functools.cache
def lldpd_unavailable_reason() -> str | None:
    """Why lldpd cannot run here (a sentence for ``pytest.skip``), or None if it can. Namespaces are
    ``netns_hosts.netns_unavailable_reason``'s to judge."""
    missing = [str(path) for path in (LLDPD, LLDPCTL, LLDPCLI) if not path.exists()]
    if missing:
        return f"needs Debian's lldpd (missing {', '.join(missing)}); run scripts/install-test-deps as root"
    try:
        pwd.getpwnam(PRIVSEP_USER)
    except KeyError:
        return f"lldpd's privilege-separation user {PRIVSEP_USER} is missing (the lldpd package makes it)"
    return None


@dataclass(frozen=True)
class LldpCable:
    """A veth from interface ``a_port`` of system ``a`` to ``b_port`` of ``b``."""

    a: str
    a_port: str
    b: str
    b_port: str


@dataclass
class _Made:
    """What a fabric has made, for ``release`` (a finaliser: it must not refer to the fabric)."""

    namespaces: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    directory: Path | None = None

    def release(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _kill_namespace_processes(self.namespaces)
        present = [name for name in self.namespaces if name in namespace_names()]
        if present:
            _run_ip_batch([f"netns delete {name}" for name in present], force=True)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class LldpFabric(Started):
    """``switches`` and ``hosts`` (system names) joined by ``cables``, each running lldpd. A context manager."""

    def __init__(self, switches: Sequence[str], hosts: Sequence[str], cables: Sequence[LldpCable], *,
                 start_timeout_s: float = 20.0) -> None:
        self.switches = list(switches)
        self.hosts = list(hosts)
        self.cables = list(cables)
        self.prefix = f"gd{secrets.token_hex(3)}"
        self.start_timeout_s = start_timeout_s
        self._made = _Made()
        self._release = weakref.finalize(self, self._made.release)

    @property
    def systems(self) -> list[str]:
        return [*self.switches, *self.hosts]

    def namespace(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def namespaces(self) -> list[str]:
        return [self.namespace(name) for name in self.systems]

    def socket(self, name: str) -> Path:
        """The control socket of ``name``'s lldpd (``lldpctl -u``)."""
        assert self._made.directory is not None, "the fabric is not started"
        return self._made.directory / f"{name}.sock"

    def management_addresses(self, switch: str) -> tuple[str, str]:
        """The addresses ``switch`` answers from (on its ``lo``): IPv4 192.0.2.N and IPv6 2001:db8::N, N its
        place among the switches from 1 (documentation ranges, RFC 5737 and RFC 3849)."""
        number = self.switches.index(switch) + 1
        return f"192.0.2.{number}", f"2001:db8::{number}"

    def expected_neighbours(self) -> dict[str, dict[str, str]]:
        """Each system's interfaces, each with the name of the system at its cable's other end."""
        heard: dict[str, dict[str, str]] = {name: {} for name in self.systems}
        for cable in self.cables:
            heard[cable.a][cable.a_port] = cable.b
            heard[cable.b][cable.b_port] = cable.a
        return heard

    # --- start and stop ----------------------------------------------------------------------

    def start(self) -> LldpFabric:
        """Make the namespaces and veths, start every lldpd, wait until each has heard its neighbours.
        Raises NetnsSetupError or LldpFabricError, having removed what was made."""
        if self._made.directory is not None or not self._release.alive:
            raise RuntimeError("a fabric starts once; make a new LldpFabric")
        started = False
        try:
            self._made.directory = Path(tempfile.mkdtemp(prefix="gpudiag-lldp-"))
            # lldpd's clients reach its socket as group _lldpd: in a folder of mode 0700 each is refused
            self._made.directory.chmod(0o755)
            self._make_network()
            for name in self.systems:
                self._start_lldpd(name)
            self._wait_neighbours()
            started = True
        finally:
            if not started:
                self.stop()
        return self

    def _make_network(self) -> None:
        taken = sorted(set(self.namespaces()) & namespace_names())
        if taken:  # never record, and so never delete, what is not ours
            raise LldpFabricError(f"namespaces of fabric {self.prefix} already exist: {', '.join(taken)}")
        self._made.namespaces.extend(self.namespaces())
        _run_ip_batch([f"netns add {namespace}" for namespace in self.namespaces()])
        for name in self.systems:  # each veth is made inside its a end's namespace, its peer sent to b's
            commands = [f"link add {c.a_port} type veth peer name {c.b_port} netns {self.namespace(c.b)}"
                        for c in self.cables if c.a == name]
            if commands:
                _run_ip_batch(commands, namespace=self.namespace(name))
        for name, ports in self.expected_neighbours().items():
            addresses = self.management_addresses(name) if name in self.switches else ()
            _run_ip_batch(["link set lo up", *(f"link set {port} up" for port in ports),
                           *(f"address add {address} dev lo" for address in addresses)], namespace=self.namespace(name))

    def _config_text(self, name: str) -> str:
        lines = [f"configure system hostname {name}", f"configure lldp tx-interval {TX_INTERVAL_S}"]
        if name in self.switches:
            lines += ["configure system capabilities enabled bridge", "configure lldp portidsubtype ifname"]
        return "".join(f"{line}\n" for line in lines)

    def _start_lldpd(self, name: str) -> None:
        directory = self._made.directory
        assert directory is not None
        config = directory / f"{name}.conf"
        config.write_text(self._config_text(name))
        argv = [str(IP), "netns", "exec", self.namespace(name), str(LLDPD), "-d", "-u", str(self.socket(name)),
                "-O", str(config), "-L", str(LLDPCLI)]
        if name in self.switches:
            argv += ["-m", ",".join(self.management_addresses(name))]
        with (directory / f"{name}.log").open("wb") as log:
            self._made.processes.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                                         stderr=subprocess.STDOUT))

    def _wait_neighbours(self) -> None:
        """Wait until every system has heard, on each of its interfaces, the system cabled there by name."""
        wanted = self.expected_neighbours()
        heard: dict[str, dict[str, str]] = {}
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            heard = {name: self._heard(name) for name in self.systems}
            if heard == wanted:
                return
            time.sleep(0.1)
        raise LldpFabricError(f"lldpd neighbours not heard after {self.start_timeout_s} s: heard {heard}, "
                              f"wanted {wanted}")

    def _heard(self, name: str) -> dict[str, str]:
        """What ``name``'s lldpd has heard: interface -> neighbour's system name ({} while it cannot answer)."""
        done = subprocess.run([str(LLDPCTL), "-u", str(self.socket(name)), "-f", "json"], capture_output=True,
                              text=True, timeout=10.0, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            return {}
        return {interface: next(iter(entry.get("chassis") or {"": None}))
                for interface, entry in _entries(json.loads(done.stdout).get("lldp"))}

    def _check_alive(self) -> None:
        for name, process in zip(self.systems, self._made.processes, strict=False):
            if process.poll() is not None:
                assert self._made.directory is not None
                log = (self._made.directory / f"{name}.log").read_text(errors="replace")
                raise LldpFabricError(f"lldpd of {name} exited with status {process.returncode}:\n{log[-2000:]}")

    def stop(self) -> None:
        """End every lldpd and whatever else runs in the fabric's namespaces, delete the namespaces (and
        their veths) and the directory. Idempotent; a stopped fabric does not start again."""
        self._release()

    # --- captures ------------------------------------------------------------------------------

    def capture(self, name: str) -> str:
        """``lldpctl -f json`` on ``name``: its neighbour table as lldpd prints it."""
        return self._lldpcli(LLDPCTL, name, ["-f", "json"])

    def local_chassis(self, name: str) -> str:
        """``lldpcli -f json show chassis`` on ``name``: what it says of itself."""
        return self._lldpcli(LLDPCLI, name, ["-f", "json", "show", "chassis"])

    def _lldpcli(self, tool: Path, name: str, arguments: list[str]) -> str:
        return subprocess.run([str(tool), "-u", str(self.socket(name)), *arguments], capture_output=True, text=True,
                              timeout=10.0, check=True, stdin=subprocess.DEVNULL).stdout

    def process_ids(self) -> set[int]:
        """Every live process in the fabric's namespaces (each lldpd is two: its monitor and its worker)."""
        return set().union(*(namespace_pids(namespace) for namespace in self.namespaces()))


def _entries(lldp: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """(interface, entry) of each neighbour of lldpctl's JSON "lldp" value: "interface" is an object keyed by
    interface with one neighbour, a list of such one-key objects with several, absent with none."""
    interfaces = lldp.get("interface", {}) if isinstance(lldp, Mapping) else {}
    keyed = interfaces if isinstance(interfaces, list) else [interfaces]
    return [(name, entry) for item in keyed for name, entry in item.items()]
