"""Real OpenSSH servers on loopback addresses, for integration tests and benchmarks.

``SshdFleet(count)`` starts ``count`` ``/usr/sbin/sshd`` processes named ``node01``..``nodeNN``, each on its
own 127.x.y.z address and free port with its own ed25519 host key; one generated client key logs in to all
of them as the current user (root: sshd's privilege separation needs it). Everything lives in one private
temporary directory that ``stop()`` deletes. Benchmarks import this module after putting its directory on
``sys.path``; tests get it through the fixtures of ``tests/integration/conftest.py``.

The pieces below the fleet (``TestHost``, ``generate_ed25519_key``, ``stop_sshd_processes``, ``wait_listening``,
``sshd_config_text``, ``known_hosts_text``, ``ssh_config_block``) also serve ``netns_hosts.py``, whose hosts run
sshd inside network namespaces (a ``TestHost`` with ``namespace`` set).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from started import Started

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = Path("/usr/bin/ssh-keygen")
PRIVSEP_DIR = Path("/run/sshd")
IP = Path("/usr/sbin/ip")
SSHD_PROCESS_PATTERN = r"^(/usr/sbin/)?sshd\b"
_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
_TCP_STATE_LISTEN = "0A"  # as /proc/net/tcp spells it


class SshdStartError(RuntimeError):
    """An sshd did not come up; the message carries the end of its log."""


def sshd_unavailable_reason() -> str | None:
    """Why this machine cannot run a fleet (a sentence for ``pytest.skip``), or None if it can."""
    if not (SSHD.exists() and SSH_KEYGEN.exists()):
        return f"needs OpenSSH's {SSHD} and {SSH_KEYGEN}"
    if os.geteuid() != 0:
        return "needs root: sshd's privilege separation and logins as root"
    return None


def generate_ed25519_key(path: Path, comment: str) -> str:
    """Write a new passphrase-less ed25519 key pair at ``path`` and ``path.pub``; returns the public key as
    ``ssh-ed25519 AAAA...`` (no comment). Raises subprocess.CalledProcessError if ssh-keygen fails."""
    public_path = path.with_name(path.name + ".pub")
    for old in (path, public_path):
        old.unlink(missing_ok=True)  # ssh-keygen would ask before overwriting
    subprocess.run([str(SSH_KEYGEN), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL, capture_output=True)
    key_type, key_base64 = public_path.read_text().split()[:2]
    return f"{key_type} {key_base64}"


def _process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of ``pid``, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, parent = stat[stat.rindex(")") + 2:].split()[:2]
    return state, int(parent)


def pid_is_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (exited, waiting to be reaped)."""
    state = _process_state(pid)
    return state is not None and state[0] != "Z"


def running_after(pids: Iterable[int], timeout_s: float = 5.0) -> list[int]:
    """Those of ``pids`` still running once they are all gone or ``timeout_s`` has passed: a
    SIGKILL lands when the kernel next schedules its process, a moment after kill() returns."""
    pids = list(pids)
    deadline = time.monotonic() + timeout_s
    while any(pid_is_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return sorted(pid for pid in pids if pid_is_running(pid))


def _all_pids() -> list[int]:
    return [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()]


# sshd puts this variable into the environment of every session of a fleet (sshd_config SetEnv), and
# what a session starts keeps it, orphans too: a test finds the processes of its own fleet by it,
# never by a name that another test run on this machine may share.
SESSION_MARKER = "GPUDIAG_TEST_SESSIONS"


def marked_pids(value: str) -> set[int]:
    """Live processes whose environment holds ``SESSION_MARKER=value``: started by a session of
    the fleet marked ``value``, or by a process a test ran with ``marked_environment(value)``."""
    wanted = f"{SESSION_MARKER}={value}".encode()
    found = set()
    for pid in _all_pids():
        try:
            if wanted in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.add(pid)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def marked_environment(value: str) -> dict[str, str]:
    """This process's environment with the marker ``value``: what a test's subprocess (and every
    process it starts, such as a ProxyCommand) runs with so that ``marked_pids`` finds them."""
    return {**os.environ, SESSION_MARKER: value}


def process_ids_matching(pattern: str, pids: Iterable[int]) -> set[int]:
    """Of ``pids``, the live processes other than this one whose command line (arguments joined by
    spaces) matches the regular expression ``pattern`` (``re.search``)."""
    regex, found = re.compile(pattern), set()
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # kernel threads and zombies have an empty command line
        if pid != os.getpid() and cmdline and regex.search(cmdline.decode(errors="replace")):
            found.add(pid)
    return found


class FleetProcesses(Protocol):
    """A fleet of test hosts that finds the processes its hosts run (SshdFleet, NetnsFleet)."""

    def processes_matching(self, pattern: str) -> set[int]: ...


def interrupt_in_second_link_round(process: subprocess.Popen[str], fleet: FleetProcesses, first_round_pairs: int,
                                   timeout_s: float = 90.0) -> tuple[int, str, float]:
    """Wait until ``process`` (a ``gpudiag sweep --links full`` of ``fleet``) has started more pair servers on
    the fleet's hosts than round 1 has pairs — round 2 is under way — then send it SIGINT. Returns (its exit
    status, its stderr, the seconds it took to end after the signal). Fails if round 2 never starts."""
    servers: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(servers) <= first_round_pairs and time.monotonic() < deadline and process.poll() is None:
        servers |= fleet.processes_matching(r"^\S*python\S* -m probes net-server")
        time.sleep(0.05)
    assert len(servers) > first_round_pairs, "round 2 never started"
    time.sleep(0.3)
    signalled = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr, time.monotonic() - signalled


def descendant_pids(roots: Iterable[int]) -> set[int]:
    """Every live process below ``roots`` in the process tree (the roots themselves excluded)."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        state = _process_state(pid)
        if state is not None and state[0] != "Z":
            children.setdefault(state[1], []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        new = set(children.get(todo.pop(), ())) - found
        found |= new
        todo.extend(new)
    return found


def _send(pids: Iterable[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _wait_until_gone_or(states: str, pids: set[int], timeout_s: float) -> None:
    """Poll until every pid is gone or in one of ``states`` (letters as in /proc: "Z" zombie, "T" stopped)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(state is None or state[0] in states for state in map(_process_state, pids)):
            return
        time.sleep(0.002)


def _freeze_tree(roots: list[int]) -> set[int]:
    """SIGSTOP ``roots`` and their descendants until a look finds no new one; returns the descendants.
    Sessions call setsid() and outlive their listener, re-parented to init: so they are found while the
    listener is still their ancestor, and frozen so that none forks behind our back."""
    frozen: set[int] = set()
    new = set(roots)
    while new:
        _send(new, signal.SIGSTOP)
        _wait_until_gone_or("TZ", new, timeout_s=2.0)
        frozen |= new
        new = descendant_pids(roots) - frozen
    return frozen - set(roots)


def stop_sshd_processes(processes: Iterable[subprocess.Popen[bytes]], timeout_s: float = 5.0) -> None:
    """Stop sshd listeners and everything under them, and wait until all have exited: connections and
    sessions get SIGKILL; listeners SIGTERM, then SIGKILL if still there after ``timeout_s``."""
    live = [process for process in processes if process.poll() is None]
    roots = [process.pid for process in live]
    descendants = _freeze_tree(roots)
    _send(descendants, signal.SIGKILL)
    _send(roots, signal.SIGTERM)
    _send(roots, signal.SIGCONT)
    deadline = time.monotonic() + timeout_s
    for process in live:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _wait_until_gone_or("Z", descendants, timeout_s)


def _free_port(address: str) -> int:
    """A TCP port nothing is bound to on ``address`` right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _proc_net_endpoint(address: str, port: int) -> str:
    # /proc/net/tcp prints the network-order address as a native-endian integer, the port in host order
    return f"{int.from_bytes(socket.inet_aton(address), sys.byteorder):08X}:{port:04X}"


def _listening_endpoints(pid: int | str = "self") -> set[str]:
    """Local endpoints of the IPv4 TCP sockets in LISTEN state in the network namespace of process ``pid``,
    as ``/proc/<pid>/net/tcp`` spells them; empty once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/net/tcp").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return set()
    rows = [line.split() for line in text.splitlines()[1:]]
    return {row[1] for row in rows if row[3] == _TCP_STATE_LISTEN}


def _log_tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log written)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass(eq=False)
class TestHost:
    """One sshd of a fleet. ``process`` and ``host_public_key_line`` change when the host restarts.
    ``namespace`` names the network namespace sshd runs in (``ip netns exec``); None: this process's own."""

    __test__ = False  # a helper, not a pytest test class

    name: str
    address: str
    port: int
    host_key_path: Path
    host_public_key_line: str  # "ssh-ed25519 AAAA...", no comment
    authorized_keys_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    namespace: str | None = None

    @property
    def config_path(self) -> Path:
        return self.host_key_path.parent / "sshd_config"

    def start(self) -> None:
        """Launch sshd on ``config_path`` without waiting for it to listen (see ``wait_listening``)."""
        # ip netns exec enters the namespace and execs sshd: the process is sshd itself, as without it
        enter = [] if self.namespace is None else [str(IP), "netns", "exec", self.namespace]
        with self.log_path.open("ab") as log:  # early errors go to stderr before -E takes over
            self.process = subprocess.Popen(
                [*enter, str(SSHD), "-D", "-e", "-f", str(self.config_path), "-E", str(self.log_path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop this sshd and its connections; see ``stop_sshd_processes``."""
        if self.process is not None:
            stop_sshd_processes([self.process], timeout_s)

    def reject_client_key(self) -> None:
        """Empty authorized_keys: from the next login on, the client key is refused (no restart needed)."""
        self.authorized_keys_path.write_text("")

    def known_hosts_line(self) -> str:
        """This host's known_hosts entry, as OpenSSH writes it (``[address]:port`` unless the port is 22)."""
        host = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        return f"{host} {self.host_public_key_line}"

    def restart_with_sftp_subsystem(self, command: str, timeout_s: float = 10.0) -> None:
        """Restart on the same address, port and host key with ``command`` as the sftp subsystem
        (``Subsystem sftp COMMAND``; by default ``internal-sftp``): e.g. a script that reads its stdin
        and never answers, as the SFTP server of a node with a hung home file system does."""
        text = self.config_path.read_text()
        self.config_path.write_text(re.sub(r"(?m)^Subsystem sftp .*$", lambda _: f"Subsystem sftp {command}", text))
        self.stop()
        self.start()
        wait_listening([self], timeout_s)

    def regenerate_host_key_and_restart(self, timeout_s: float = 10.0) -> None:
        """Restart on the same address and port with a new host key; known_hosts entries become 'changed'."""
        self.stop()
        self.host_public_key_line = generate_ed25519_key(self.host_key_path, self.name)
        self.start()
        wait_listening([self], timeout_s)


def _is_listening(host: TestHost, own_table: set[str]) -> bool:
    """Whether ``host``'s sshd listens; ``own_table`` is this process's LISTEN table, which serves every host
    that shares this process's network namespace (one read instead of one per host)."""
    endpoint = _proc_net_endpoint(host.address, host.port)
    if host.namespace is None:
        return endpoint in own_table
    assert host.process is not None
    return endpoint in _listening_endpoints(host.process.pid)  # the table of sshd's own namespace


def wait_listening(hosts: list[TestHost], timeout_s: float) -> None:
    """Wait until every host's sshd listens on its endpoint. Raises SshdStartError, with the sshd log, if one
    exits or ``timeout_s`` passes. Reads /proc/<pid>/net/tcp rather than connecting, which would write a
    "Connection from" line in every log."""
    deadline = time.monotonic() + timeout_s
    waiting = list(hosts)
    while waiting:
        for host in waiting:
            if host.process is None or host.process.poll() is not None:
                raise SshdStartError(f"sshd of {host.name} exited at start:\n{_log_tail(host.log_path)}")
        own_table = _listening_endpoints()
        waiting = [host for host in waiting if not _is_listening(host, own_table)]
        if waiting and time.monotonic() > deadline:
            host = waiting[0]
            raise SshdStartError(f"sshd of {host.name} not listening on {host.address}:{host.port} after "
                                 f"{timeout_s} s ({len(waiting)} hosts waiting):\n{_log_tail(host.log_path)}")
        if waiting:
            time.sleep(0.005)


def sshd_config_text(host: TestHost, log_level: str, marker: str, session_env: dict[str, str] | None = None) -> str:
    """The sshd_config of ``host``: its endpoint, host key and authorized_keys; public-key logins only
    (root included); sshd's ``LogLevel`` ``log_level``; ``SESSION_MARKER=marker`` and ``session_env``
    in every session's environment. Sessions run the login user's shell, which reads ~/.bashrc: the fleets give
    ``HOME`` a folder of their own (no .bashrc there); where a session still reads one that runs
    ``pyenv init`` (as this machine's root's does), each ``pyenv rehash`` takes a lock, and a session
    a test killed in the middle leaves it behind, making every later session wait 60 s for it;
    ``PYENV_REHASH_TIMEOUT=0`` makes it give up at once instead."""
    return f"""\
ListenAddress {host.address}:{host.port}
SetEnv {SESSION_MARKER}={marker} PYENV_REHASH_TIMEOUT=0{"".join(f" {k}={v}" for k, v in (session_env or {}).items())}
HostKey {host.host_key_path}
PidFile {host.host_key_path.parent / "sshd.pid"}
AuthorizedKeysFile {host.authorized_keys_path}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PermitUserRC no
AllowTcpForwarding yes
AllowAgentForwarding no
X11Forwarding no
PrintMotd no
MaxStartups 200:30:400
MaxSessions 50
LogLevel {log_level}
Subsystem sftp internal-sftp
"""


class SshdFleet(Started):
    """``count`` sshd hosts ``node01``.. on consecutive loopback addresses from ``first_address``.

    A context manager: ``with SshdFleet(8) as fleet:`` starts all and stops all. ``log_level`` is sshd's
    LogLevel; forwarded channels (direct-tcpip) are logged from DEBUG1 on, not at VERBOSE.
    """

    def __init__(self, count: int = 8, *, first_address: str = "127.0.1.1", log_level: str = "VERBOSE",
                 start_timeout_s: float = 10.0, session_env: dict[str, str] | None = None) -> None:
        """``session_env``: more variables in every session's environment (sshd's SetEnv), e.g.
        ``BASH_ENV``, a file the login shell reads before each command."""
        first = ipaddress.IPv4Address(first_address)
        if count < 1 or first not in _LOOPBACK or first + count not in _LOOPBACK:
            raise ValueError(f"{count} hosts from {first_address} do not fit in {_LOOPBACK}")
        self.count = count
        self.first_address = first
        self.log_level = log_level
        self.start_timeout_s = start_timeout_s
        self.session_env = dict(session_env or {})
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        self.hosts: list[TestHost] = []
        self.directory: Path | None = None
        self.marker = uuid.uuid4().hex  # in every session's environment (SESSION_MARKER)

    @property
    def home(self) -> Path:
        """The sessions' ``HOME``, the fleet's own: their login shell finds no ~/.bashrc of this
        machine's user (whose ``pyenv init`` prints to stderr when sessions start at once and makes
        each session slower). SFTP still starts in the user's home of the password database, where
        the bundle cache stays."""
        if self.directory is None:
            raise RuntimeError("the fleet is not started")
        return self.directory / "home"

    @property
    def client_key_path(self) -> Path:
        """Private key the hosts accept (its public half is ``client_key_path`` + ".pub")."""
        if self.directory is None:
            raise RuntimeError("the fleet is not started")
        return self.directory / "client_ed25519"

    def host_names(self) -> list[str]:
        width = max(2, len(str(self.count)))
        return [f"node{index:0{width}d}" for index in range(1, self.count + 1)]

    def host(self, name: str) -> TestHost:
        """The host called ``name``. Raises KeyError if there is none."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def start(self) -> SshdFleet:
        """Generate keys, launch every sshd, wait until all listen. Raises SshdStartError; cleans up if so."""
        if self.hosts or self.directory is not None:
            raise RuntimeError("a fleet starts once; make a new SshdFleet")
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
        self.directory = Path(tempfile.mkdtemp(prefix="gpudiag-sshd-"))
        self.home.mkdir(mode=0o700)
        names = self.host_names()
        key_paths = [self.client_key_path] + [self.directory / name / "ssh_host_ed25519_key" for name in names]
        for name in names:
            (self.directory / name).mkdir()
        with ThreadPoolExecutor(max_workers=16) as pool:  # ssh-keygen is a process each: run them together
            key_lines = list(pool.map(generate_ed25519_key, key_paths, ["gpudiag-test-client", *names]))
        for index, (name, key_path, key_line) in enumerate(zip(names, key_paths[1:], key_lines[1:], strict=True)):
            self.hosts.append(self._launch(name, str(self.first_address + index), key_path, key_line, key_lines[0]))
        wait_listening(self.hosts, self.start_timeout_s)

    def _launch(self, name: str, address: str, host_key_path: Path, host_key_line: str, client_key_line: str
                ) -> TestHost:
        """Write the host's authorized_keys and sshd_config, start its sshd (without waiting)."""
        directory = host_key_path.parent
        host = TestHost(name, address, _free_port(address), host_key_path, host_key_line,
                        directory / "authorized_keys", directory / "sshd.log")
        host.authorized_keys_path.write_text(client_key_line + "\n")
        host.config_path.write_text(sshd_config_text(host, self.log_level, self.marker,
                                                     {"HOME": str(self.home), **self.session_env}))
        host.start()
        return host

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every sshd of the fleet (with its connections and sessions) and delete the temporary directory."""
        stop_sshd_processes([host.process for host in self.hosts if host.process is not None], timeout_s)
        if self.directory is not None:
            shutil.rmtree(self.directory)
            self.directory = None

    def process_ids(self) -> set[int]:
        """The running listeners and every connection, session and command process under them."""
        listeners = {host.process.pid for host in self.hosts if host.process and host.process.poll() is None}
        return listeners | descendant_pids(listeners)

    def processes_matching(self, pattern: str) -> set[int]:
        """The live processes a session of this fleet started (an orphan too: it keeps the fleet's
        marker) whose command line matches ``pattern``."""
        return process_ids_matching(pattern, marked_pids(self.marker))

    def unused_endpoint(self) -> tuple[str, int]:
        """(address, port) just past the fleet's addresses where nothing listens: connecting is refused."""
        address = str(self.first_address + self.count)
        return address, _free_port(address)

    def _selected(self, hosts: Iterable[TestHost] | None) -> list[TestHost]:
        return list(self.hosts if hosts is None else hosts)

    def write_known_hosts(self, path: Path, hosts: Iterable[TestHost] | None = None) -> Path:
        """Write the known_hosts entries of ``hosts`` (default: all) to ``path``; returns ``path``."""
        path.write_text(known_hosts_text(self._selected(hosts)))
        return path

    def write_ssh_config(self, path: Path, hosts: Iterable[TestHost] | None = None,
                         extra_by_host: dict[str, str] | None = None, *, known_hosts_path: Path) -> Path:
        """Write an ssh_config with a ``Host <name>`` block per host (default: all) that logs in with the client
        key and checks host keys strictly against ``known_hosts_path``. ``extra_by_host`` maps a host name to
        more lines for its block (``"ProxyJump node01"``). Returns ``path``. Raises KeyError for an
        ``extra_by_host`` name that is not among ``hosts``."""
        selected = self._selected(hosts)
        extra = dict(extra_by_host or {})
        blocks = [ssh_config_block(host, self.user, self.client_key_path, known_hosts_path, extra.pop(host.name, ""))
                  for host in selected]
        if extra:
            raise KeyError(f"extra_by_host names hosts not written: {sorted(extra)}")
        path.write_text("\n".join(blocks))
        return path

    def write_hosts_file(self, path: Path, names: Iterable[str] | None = None) -> Path:
        """Write host names (default: all), one per line, to ``path``; returns ``path``."""
        path.write_text("".join(f"{name}\n" for name in (self.host_names() if names is None else names)))
        return path


def known_hosts_text(hosts: Iterable[TestHost]) -> str:
    """The known_hosts entries of ``hosts``, one line each."""
    return "".join(host.known_hosts_line() + "\n" for host in hosts)


def ssh_config_block(host: TestHost, user: str, identity_path: Path, known_hosts_path: Path, extra: str = "") -> str:
    """A ``Host <name>`` block of an ssh_config that logs in to ``host`` as ``user`` with the key at
    ``identity_path`` and checks its host key strictly against ``known_hosts_path``; ``extra`` holds more lines."""
    lines = [f"HostName {host.address}", f"Port {host.port}", f"User {user}",
             f"IdentityFile {identity_path}", "IdentitiesOnly yes",
             f"UserKnownHostsFile {known_hosts_path}", "GlobalKnownHostsFile /dev/null",
             "StrictHostKeyChecking yes", "BatchMode yes", *extra.splitlines()]
    return f"Host {host.name}\n" + "".join(f"    {line.strip()}\n" for line in lines if line.strip())


class MakeSshdFleet(Protocol):
    """The ``make_sshd_fleet`` fixture: starts a fleet that is stopped when the test ends."""

    def __call__(self, count: int = 8, *, first_address: str = "127.0.1.1", log_level: str = "VERBOSE",
                 session_env: dict[str, str] | None = None) -> SshdFleet: ...
