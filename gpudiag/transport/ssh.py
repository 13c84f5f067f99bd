"""The SSH transport (paramiko): trusted host keys, key authentication, ProxyJump, and commands
that run under a deadline on the node itself.

Nothing is installed on nodes: the probe bundle goes over SFTP into a content-hashed folder
of the remote user's cache, once per bundle version.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import select
import shlex
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import paramiko

from ..bundle import Bundle
from ..hosts import HostSpec
from ..sshconfig import ResolvedHost
from . import AuthFailed, CommandResult, OutputWatch, TransportError, Unreachable
from .knownhosts import KnownHostsRegistry

# The remote shell reports the PID that ``exec timeout`` keeps, so that Ctrl-C can end it.
_PID_PREFIX = "gpudiag-pid="
_BUNDLE_CACHE = ".cache/gpudiag"
_MAX_JUMP_HOPS = 8


class ConnectionLost(TransportError):
    """The connection to a node broke while a command ran (the node rebooted, the network went)."""

    status = "unreachable"


class BundleShipError(TransportError):
    """The probe bundle could not be copied to the node (permissions, disk full, ...)."""

    status = "probe_error"


@dataclass(frozen=True)
class SshSettings:
    """Timeouts (seconds) and host-key policy shared by every connection of a sweep."""

    accept_new_host_keys: bool = False
    banner_timeout_s: float = 15.0
    auth_timeout_s: float = 15.0
    channel_timeout_s: float = 15.0
    keepalive_s: int = 15
    kill_grace_s: int = 5
    bastion_connections: int = 4


class SshConnector:
    """Opens one SSH connection per node; bastions are shared through a small pool."""

    def __init__(self, settings: SshSettings, resolve_jump: Callable[[HostSpec], ResolvedHost]) -> None:
        self._settings = settings
        self._resolve_jump = resolve_jump
        self._known_hosts = KnownHostsRegistry()
        self._keys = _KeyCache()
        self._bastions = _BastionPool(settings.bastion_connections, self._open_transport, resolve_jump)

    def connect(self, host: ResolvedHost) -> SshSession:
        """A logged-in session on ``host``. Raises a TransportError naming the cause."""
        sock = self._bastions.channel_to(host) if host.proxy_jump else _tcp_connect(host)
        transport = self._open_transport(host, sock)
        return SshSession(transport, host.label, self._settings)

    def close(self) -> None:
        self._bastions.close()

    def _open_transport(self, host: ResolvedHost, sock: socket.socket | paramiko.Channel) -> paramiko.Transport:
        settings = self._settings
        transport = paramiko.Transport(sock)
        transport.banner_timeout = settings.banner_timeout_s
        transport.handshake_timeout = settings.banner_timeout_s
        transport.auth_timeout = settings.auth_timeout_s
        transport.channel_timeout = settings.channel_timeout_s
        try:
            transport.start_client(timeout=settings.banner_timeout_s)
            accept_new = settings.accept_new_host_keys or host.strict_host_key_checking in ("accept-new", "no")
            self._known_hosts.get(host.known_hosts_files).check(
                host.hostname, host.port, transport.get_remote_server_key(), accept_new)
            self._authenticate(transport, host)
        except TransportError:
            transport.close()
            raise
        except (paramiko.SSHException, OSError, EOFError) as error:
            transport.close()
            raise Unreachable(f"{host.hostname}:{host.port}: SSH handshake failed: {error}") from error
        transport.set_keepalive(settings.keepalive_s)
        return transport

    def _authenticate(self, transport: paramiko.Transport, host: ResolvedHost) -> None:
        tried = []
        for name, key in self._keys.keys_for(host.identity_files):
            try:
                transport.auth_publickey(host.user, key)
            except paramiko.AuthenticationException:
                tried.append(name)
                continue
            if transport.is_authenticated():
                return
        offered = ", ".join(tried) or "none (no readable identity file and no ssh-agent key)"
        raise AuthFailed(f"{host.user}@{host.hostname}:{host.port} rejected every key offered: {offered}; "
                         "add the public key to the node's authorized_keys or pass -i/--identity")


class SshSession:
    """Commands on one node over one SSH connection, kept for the whole sweep."""

    def __init__(self, transport: paramiko.Transport, label: str, settings: SshSettings) -> None:
        self._transport = transport
        self._label = label
        self._settings = settings
        self._bundle_dir: str | None = None
        self._lock = threading.Lock()
        self._remote_pids: set[int] = set()

    def prepare(self, bundle: Bundle) -> None:
        """Copy the bundle to ``~/.cache/gpudiag/bundle-<hash>`` unless it is there already."""
        if self._bundle_dir is not None and self._bundle_dir.endswith(bundle.content_hash[:16]):
            return  # shipped earlier on this connection
        try:
            self._bundle_dir = _ship_bundle(self._transport, bundle)
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise BundleShipError(f"{self._label}: could not copy the probe bundle over SFTP: {error}") from error

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` in the bundle folder under ``timeout -k`` on the node.

        The node ends the command after ``timeout_s`` even if this controller is gone; the
        controller itself gives up a few seconds after that.
        """
        return self.start(argv, timeout_s).finish(timeout_s + self._settings.kill_grace_s + 5.0)

    def start(self, argv: Sequence[str], timeout_s: float) -> SshCommand:
        """Start ``argv`` as ``run`` does and return at once. Raises ConnectionLost."""
        grace = self._settings.kill_grace_s
        where = f"cd {shlex.quote(self._bundle_dir)} && " if self._bundle_dir else ""
        command = (f"{where}echo {_PID_PREFIX}$$ >&2 && "
                   f"exec timeout -k {grace} {timeout_s:.1f} {shlex.join(argv)}")
        return SshCommand(self, self._open(command), timeout_s + grace + 5.0)

    def is_open(self) -> bool:
        return self._transport.is_active()

    def cancel(self) -> None:
        """End the commands this session started on the node (TERM, then KILL from ``timeout -k``)."""
        with self._lock:
            pids = sorted(self._remote_pids)
        self.kill(pids)

    def kill(self, pids: Sequence[int]) -> None:
        if not pids or not self._transport.is_active():
            return
        targets = " ".join(str(pid) for pid in pids)
        try:
            SshCommand(self, self._open(f"kill -TERM {targets} 2>/dev/null; true"), 10.0, track=False).finish(10.0)
        except ConnectionLost:
            pass  # the connection is going away; the node's own deadline still ends the command

    def close(self) -> None:
        self._transport.close()

    def track(self, pid: int, running: bool) -> None:
        with self._lock:
            if running:
                self._remote_pids.add(pid)
            else:
                self._remote_pids.discard(pid)

    def lost(self, error: BaseException) -> ConnectionLost:
        return ConnectionLost(f"{self._label}: the SSH connection broke during a command: "
                              f"{error or type(error).__name__}")

    def _open(self, command: str) -> paramiko.Channel:
        try:
            channel = self._transport.open_session(timeout=self._settings.channel_timeout_s)
            channel.exec_command(command)
        # paramiko raises EOFError for a socket closed under it
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise self.lost(error) from error
        return channel


class SshCommand:
    """One command on a node: its output gathered on a thread of its own, so the caller can
    read its first line while it runs."""

    def __init__(self, session: SshSession, channel: paramiko.Channel, wait_s: float, track: bool = True) -> None:
        self._session = session
        self._channel = channel
        self._started = time.monotonic()
        self._deadline = self._started + wait_s
        self._track = track
        self._pid: int | None = None
        self._watch = OutputWatch()
        self._done = threading.Event()
        self._result: CommandResult | None = None
        self._error: ConnectionLost | None = None
        threading.Thread(target=self._gather, name="ssh-command", daemon=True).start()

    def first_line(self, timeout_s: float) -> str | None:
        return self._watch.first_line(timeout_s)

    def finish(self, timeout_s: float) -> CommandResult:
        """How it ended; raises ConnectionLost when the connection broke first."""
        if not self._done.wait(timeout_s):
            self.cancel()
            self._deadline = time.monotonic()  # the gatherer reports it timed out
            self._done.wait(15.0)
        if self._error is not None:
            raise self._error
        if self._result is None:
            return CommandResult(None, "", "the command did not end after it was killed", True,
                                 time.monotonic() - self._started)
        return self._result

    def cancel(self) -> None:
        if self._pid is not None:
            self._session.kill([self._pid])

    def _gather(self) -> None:
        channel = self._channel
        try:
            try:
                stdout, stderr, timed_out = self._collect(channel)
                status = None if timed_out else channel.recv_exit_status()
            finally:
                channel.close()
                if self._pid is not None:
                    self._session.track(self._pid, running=False)
            self._result = CommandResult(exit_status=status, stdout=stdout, stderr=stderr, timed_out=timed_out,
                                         duration_s=time.monotonic() - self._started)
        except (paramiko.SSHException, EOFError, OSError) as error:
            self._error = self._session.lost(error)
        finally:
            self._watch.end()
            self._done.set()

    def _collect(self, channel: paramiko.Channel) -> tuple[str, str, bool]:
        out, err = bytearray(), bytearray()
        pid_seen = not self._track
        while True:
            while channel.recv_ready():
                chunk = channel.recv(65536)
                out += chunk
                self._watch.feed(chunk)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            if not pid_seen:
                pid_seen = self._note_pid(err)
            if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                return _text(out), _strip_pid(_text(err)), False
            left = self._deadline - time.monotonic()
            if left <= 0:
                return _text(out), _strip_pid(_text(err)), True
            select.select([channel], [], [], min(left, 0.5))

    def _note_pid(self, err: bytearray) -> bool:
        line, newline, _ = bytes(err).partition(b"\n")
        if not newline:
            return False
        text = line.decode(errors="replace")
        if text.startswith(_PID_PREFIX) and text[len(_PID_PREFIX):].isdigit():
            self._pid = int(text[len(_PID_PREFIX):])
            self._session.track(self._pid, running=True)
        return True


class _KeyCache:
    """Private keys read once per sweep, whatever the number of hosts that use them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, paramiko.PKey | None] = {}
        self._agent_keys: list[paramiko.PKey] | None = None

    def keys_for(self, identity_files: Sequence[str]) -> list[tuple[str, paramiko.PKey]]:
        keys = [(path, key) for path in identity_files if (key := self._load(path)) is not None]
        return keys + [(f"ssh-agent {key.get_name()}", key) for key in self._agent()]

    def _load(self, path: str) -> paramiko.PKey | None:
        with self._lock:
            if path not in self._keys:
                self._keys[path] = _read_key(path)
            return self._keys[path]

    def _agent(self) -> list[paramiko.PKey]:
        with self._lock:
            if self._agent_keys is None:
                # Keys of the user's agent may sign our logins; nothing is ever forwarded.
                self._agent_keys = list(paramiko.Agent().get_keys()) if os.environ.get("SSH_AUTH_SOCK") else []
            return self._agent_keys


def _read_key(path: str) -> paramiko.PKey | None:
    if not os.path.isfile(path):
        return None
    try:
        return paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        return None  # an encrypted key needs the agent; the agent's copy is tried instead
    except (paramiko.SSHException, OSError, ValueError):
        return None  # not a private key we can read: ssh would skip it too


class _BastionPool:
    """A few shared connections per jump host; each carries many direct-tcpip channels."""

    def __init__(self, size: int,
                 open_transport: Callable[[ResolvedHost, socket.socket | paramiko.Channel], paramiko.Transport],
                 resolve: Callable[[HostSpec], ResolvedHost]) -> None:
        self._size = max(1, size)
        self._open_transport = open_transport
        self._resolve = resolve
        self._lock = threading.Lock()
        self._slots: dict[str, list[paramiko.Transport | None]] = {}
        self._slot_locks: dict[tuple[str, int], threading.Lock] = {}
        self._turns = itertools.count()

    def channel_to(self, host: ResolvedHost) -> paramiko.Channel:
        hops = _parse_jump(host.proxy_jump or "")
        if not hops or len(hops) > _MAX_JUMP_HOPS:
            raise Unreachable(f"{host.label}: ProxyJump {host.proxy_jump!r} is not a usable jump host list")
        transport: paramiko.Transport | None = None
        for depth, hop in enumerate(hops):
            transport = self._transport(",".join(h.label for h in hops[: depth + 1]), hop, transport)
        assert transport is not None
        return _open_forward(transport, host.hostname, host.port, host.label)

    def _transport(self, key: str, hop: HostSpec, via: paramiko.Transport | None) -> paramiko.Transport:
        with self._lock:
            slots = self._slots.setdefault(key, [None] * self._size)
            index = next(self._turns) % self._size
            slot_lock = self._slot_locks.setdefault((key, index), threading.Lock())
        with slot_lock:
            current = slots[index]
            if current is None or not current.is_active():
                resolved = self._resolve_hop(hop)
                if via is None:
                    sock: socket.socket | paramiko.Channel = _tcp_connect(resolved)
                else:
                    sock = _open_forward(via, resolved.hostname, resolved.port, hop.label)
                slots[index] = current = self._open_transport(resolved, sock)
            return current

    def _resolve_hop(self, hop: HostSpec) -> ResolvedHost:
        resolved = self._resolve(hop)
        # The jump host's own ProxyJump is followed by listing it in the chain, not here.
        return resolved if resolved.proxy_jump is None else _without_jump(resolved)

    def close(self) -> None:
        with self._lock:
            transports = [t for slots in self._slots.values() for t in slots if t is not None]
            self._slots.clear()
        for transport in transports:
            transport.close()


def _without_jump(host: ResolvedHost) -> ResolvedHost:
    return dataclasses.replace(host, proxy_jump=None)


def _parse_jump(value: str) -> list[HostSpec]:
    hops = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        user, _, rest = part.rpartition("@")
        host, _, port = rest.partition(":")
        hops.append(HostSpec(host=host, user=user or None, port=int(port) if port.isdigit() else None))
    return hops


def _open_forward(via: paramiko.Transport, hostname: str, port: int, label: str) -> paramiko.Channel:
    try:
        return via.open_channel("direct-tcpip", (hostname, port), ("127.0.0.1", 0), timeout=15.0)
    except (paramiko.SSHException, OSError) as error:
        raise Unreachable(f"{label}: the jump host could not reach {hostname}:{port}: {error}") from error


def _tcp_connect(host: ResolvedHost) -> socket.socket:
    try:
        return socket.create_connection((host.hostname, host.port), timeout=host.connect_timeout_s)
    except socket.gaierror as error:
        raise Unreachable(f"{host.hostname}: name does not resolve ({error.strerror})") from error
    except TimeoutError as error:
        raise Unreachable(f"{host.hostname}:{host.port}: no answer within {host.connect_timeout_s:g} s") from error
    except OSError as error:
        raise Unreachable(f"{host.hostname}:{host.port}: {error.strerror or error}") from error


def _ship_bundle(transport: paramiko.Transport, bundle: Bundle) -> str:
    """Upload into a temporary folder and rename it into place, so a half-copied bundle is never
    used. Returns the absolute remote folder."""
    name = f"bundle-{bundle.content_hash[:16]}"
    with paramiko.SFTPClient.from_transport(transport) as sftp:
        home = sftp.normalize(".")
        final = f"{home}/{_BUNDLE_CACHE}/{name}"
        if _exists(sftp, f"{final}/.complete"):
            return final
        _makedirs(sftp, f"{home}/{_BUNDLE_CACHE}")
        staging = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
        for folder in sorted({str(p.parent) for p in bundle.files} | {"."}):
            _makedirs(sftp, f"{staging}/{folder}")
        for relative, data in bundle.contents.items():
            sftp.putfo(io.BytesIO(data), f"{staging}/{relative.as_posix()}")
        sftp.putfo(io.BytesIO(bundle.content_hash.encode()), f"{staging}/.complete")
        try:
            sftp.posix_rename(staging, final)
        except OSError:
            if not _exists(sftp, f"{final}/.complete"):
                raise  # not a lost race with a concurrent sweep: a real failure
    return final


def _exists(sftp: paramiko.SFTPClient, path: str) -> bool:
    try:
        sftp.stat(path)
    except FileNotFoundError:
        return False
    return True


def _makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    parts = path.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        partial = "/" + "/".join(parts[:depth])
        if not _exists(sftp, partial):
            try:
                sftp.mkdir(partial, mode=0o700)
            except OSError:
                if not _exists(sftp, partial):  # another sweep made it meanwhile
                    raise


def _strip_pid(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith(_PID_PREFIX))


def _text(data: bytearray) -> str:
    return bytes(data).decode(errors="replace")
