"""The SSH transport (paramiko): trusted host keys, key authentication, ProxyJump and ProxyCommand
(``jump.py``, ``proxy.py``), and commands that run under a deadline on the node itself.

Nothing is installed on nodes: the probe bundle goes over SFTP into a content-hashed folder
of the remote user's cache, once per bundle version.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import shlex
import socket
import stat
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import paramiko

from ..bundle import Bundle
from ..sshconfig import ProxySettingError, ResolvedHost, proxy_command_line
from . import AuthFailed, CommandResult, OutputWatch, TransportError, Unreachable
from .jump import BastionPool, HopResolver, JumpResolver, Sock, close_transport, route_to
from .knownhosts import KnownHosts
from .proxy import ProxyCommands, ProxyCommandSocket

# The remote shell reports the PID that ``exec timeout`` keeps, so that Ctrl-C can end it.
_PID_PREFIX = "gpudiag-pid="
_BUNDLE_CACHE = ".cache/gpudiag"


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
    """Opens one SSH connection per node, through its ProxyJump path or ProxyCommand; jump hosts
    are shared through a small pool. ``close`` ends every connection and ProxyCommand it started."""

    def __init__(self, settings: SshSettings, resolve_jump: JumpResolver) -> None:
        """``resolve_jump(hop, via)`` gives a jump host's settings (``sshconfig.resolve_jump_host``)."""
        self._settings = settings
        self._resolve_jump = HopResolver(resolve_jump)
        self._known_hosts = KnownHosts()
        self._keys = _KeyCache()
        self._proxies = ProxyCommands()
        self._bastions = BastionPool(settings.bastion_connections, self._open_first, self._open_transport)

    def connect(self, host: ResolvedHost) -> SshSession:
        """A logged-in session on ``host``. Raises a TransportError naming the cause."""
        path = route_to(host, self._resolve_jump)
        sock = self._bastions.channel_to(path) if len(path) > 1 else self._open_first(host)
        transport = self._open_transport(host, sock)
        return SshSession(transport, host.label, self._settings)

    def close(self) -> None:
        self._bastions.close()
        self._proxies.close_all()

    def _open_first(self, host: ResolvedHost) -> socket.socket | ProxyCommandSocket:
        """A connection to ``host`` without a jump host: its ProxyCommand, or TCP."""
        if host.proxy_command is None:
            return _tcp_connect(host)
        try:
            command = proxy_command_line(host)
        except ProxySettingError as error:
            raise Unreachable(f"{host.label}: {error}") from error
        return self._proxies.start(command, host.label)

    def _open_transport(self, host: ResolvedHost, sock: Sock) -> paramiko.Transport:
        """Log in to ``host`` over ``sock`` (closed if that fails). Raises a TransportError."""
        settings = self._settings
        transport = paramiko.Transport(sock)
        transport.banner_timeout = settings.banner_timeout_s
        transport.handshake_timeout = settings.banner_timeout_s
        transport.auth_timeout = settings.auth_timeout_s
        transport.channel_timeout = settings.channel_timeout_s
        try:
            security = transport.get_security_options()
            security.key_types = self._known_hosts.preferred_key_types(host, security.key_types)
            transport.start_client(timeout=settings.banner_timeout_s)
            accept_new = settings.accept_new_host_keys or host.strict_host_key_checking in ("accept-new", "no")
            self._known_hosts.check(host, transport.get_remote_server_key(), accept_new)
            self._authenticate(transport, host)
        except TransportError:
            close_transport(transport)
            raise
        except (paramiko.SSHException, OSError, EOFError) as error:
            why = f"SSH handshake failed: {error or 'the connection was closed'}"
            if isinstance(sock, ProxyCommandSocket):  # the command's own words say more than paramiko's
                why = sock.failure() + ("" if sock.closed else f" ({why})")
            close_transport(transport)
            raise Unreachable(f"{host.hostname}:{host.port}: {why}") from error
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
        close_transport(self._transport)

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
    """Upload into a staging folder of its own and rename it into place, so a half-copied bundle is
    never used. Hosts that share a home (NFS) race to rename: the loser removes its staging folder
    and uses the winner's. Returns the absolute remote folder. Raises OSError (staging removed)."""
    name = f"bundle-{bundle.content_hash[:16]}"
    with paramiko.SFTPClient.from_transport(transport) as sftp:
        home = sftp.normalize(".")
        final = f"{home}/{_BUNDLE_CACHE}/{name}"
        if _exists(sftp, f"{final}/.complete"):
            return final
        _makedirs(sftp, f"{home}/{_BUNDLE_CACHE}")
        staging = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            _upload(sftp, bundle, staging)
            sftp.posix_rename(staging, final)
        except OSError:
            won_by_another = _exists(sftp, f"{final}/.complete")
            _remove_tree(sftp, staging)
            if not won_by_another:
                raise  # not a lost race with another host or sweep: a real failure (disk full, ...)
    return final


def _upload(sftp: paramiko.SFTPClient, bundle: Bundle, staging: str) -> None:
    for folder in sorted({str(p.parent) for p in bundle.files} | {"."}):
        _makedirs(sftp, f"{staging}/{folder}")
    for relative, data in bundle.contents.items():
        sftp.putfo(io.BytesIO(data), f"{staging}/{relative.as_posix()}")
    sftp.putfo(io.BytesIO(bundle.content_hash.encode()), f"{staging}/.complete")


def _remove_tree(sftp: paramiko.SFTPClient, path: str) -> None:
    """Remove the folder ``path`` and everything in it, as far as it goes: a staging folder left
    behind is litter, not a failure of the host."""
    try:
        entries = sftp.listdir_attr(path)
    except OSError:
        return  # never made, or gone already
    for entry in entries:
        child = f"{path}/{entry.filename}"
        try:
            if stat.S_ISDIR(entry.st_mode or 0):
                _remove_tree(sftp, child)
            else:
                sftp.remove(child)
        except OSError:
            continue
    with contextlib.suppress(OSError):
        sftp.rmdir(path)


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
