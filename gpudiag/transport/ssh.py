"""The SSH transport (paramiko): trusted host keys, key authentication, ProxyJump and ProxyCommand
(``jump.py``, ``proxy.py``), and commands that run under a deadline on the node itself.

Nothing is installed on nodes: the probe bundle goes over SFTP into a content-hashed folder
of the remote user's cache, once per bundle version (``bundleship.py``).
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import paramiko

from ..bundle import Bundle
from . import AuthFailed, CommandResult, ConnectTimedOut, TransportError, Unreachable
from .bounded import BoundedOutput, OutputLimits
from .bundleship import ship_bundle
from .hosttransport import HostTransport
from .jump import BastionPool, HopResolver, JumpResolver, Sock, close_transport, route_to
from .knownhosts import KnownHosts
from .proxy import ProxyCommands, ProxyCommandSocket
from .remotefolder import UnsafeFolder
from .remotepid import ErrorOutput, new_pid_marker
from .sshconfig import ProxySettingError, ResolvedHost, proxy_command_line

_CHUNK_BYTES = 65536
# How long ``cancel`` waits for the PID of a command just started (its first stderr line).
PID_WAIT_S = 3.0
# The shortest wait of a connecting whose host's time is spent (seconds): it fails at once.
MIN_WAIT_S = 0.01
# How near its deadline a connecting that failed counts as ended by it (seconds).
TIME_UP_MARGIN_S = 0.2
# How much longer than the connecting paramiko's reader thread waits for the banner (seconds).
READER_MARGIN_S = 0.5


class ConnectionLost(TransportError):
    """The connection to a node broke while a command ran (the node rebooted, the network went)."""

    status = "unreachable"


class BundleShipError(TransportError):
    """The probe bundle could not be copied to the node (permissions, disk full, ...)."""

    status = "probe_error"


class BundleCopyTimeout(TransportError):
    """The node's SFTP server stopped answering while the bundle was copied (a hung home file
    system): the host is ``timeout``."""

    status = "timeout"


@dataclass(frozen=True)
class SshSettings:
    """Timeouts (seconds), host-key policy and output caps shared by every connection of a sweep.

    ``sftp_timeout_s``: how long one SFTP request of the bundle copy may go unanswered before
    the host is ``timeout`` (the sweep's per-host limit ends a slower copy sooner). ``output``:
    what one command may print (gpudiag.transport.bounded); every connector of the sweep (SSH,
    this machine, srun) reads through these caps."""

    accept_new_host_keys: bool = False
    banner_timeout_s: float = 15.0
    auth_timeout_s: float = 15.0
    channel_timeout_s: float = 15.0
    sftp_timeout_s: float = 60.0
    keepalive_s: int = 15
    kill_grace_s: int = 5
    bastion_connections: int = 4
    output: OutputLimits = OutputLimits()


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

    def connect(self, host: ResolvedHost, within_s: float | None = None) -> SshSession:
        """A logged-in session on ``host``, within ``within_s`` seconds where given (the host's
        time left: the TCP connect, the banner, the key exchange and each login attempt are
        capped by what is left of it; the shared jump-host connections are not). Raises a
        TransportError naming the cause: ConnectTimedOut when ``within_s`` ran out first."""
        deadline = None if within_s is None else time.monotonic() + within_s
        path = route_to(host, self._resolve_jump)
        sock = self._bastions.channel_to(path) if len(path) > 1 else self._open_first(host, deadline)
        transport = self._open_transport(host, sock, deadline)
        return SshSession(transport, host.label, self._settings)

    def close(self) -> None:
        self._bastions.close()
        self._proxies.close_all()

    def _open_first(self, host: ResolvedHost, deadline: float | None = None) -> socket.socket | ProxyCommandSocket:
        """A connection to ``host`` without a jump host: its ProxyCommand, or TCP (within
        ``deadline``, on time.monotonic, where given)."""
        if host.proxy_command is None:
            return _tcp_connect(host, deadline)
        try:
            command = proxy_command_line(host)
        except ProxySettingError as error:
            raise Unreachable(f"{host.label}: {error}") from error
        return self._proxies.start(command, host.label)

    def _open_transport(self, host: ResolvedHost, sock: Sock, deadline: float | None = None) -> paramiko.Transport:
        """Log in to ``host`` over ``sock`` (closed if that fails), by ``deadline`` (on
        time.monotonic) where given. Raises a TransportError: ConnectTimedOut past ``deadline``."""
        settings = self._settings
        # from the moment the connecting counts as out of time (_time_up), paramiko's words on it
        # are DEBUG: the host's outcome says it
        transport = HostTransport(sock, host.label, None if deadline is None else deadline - TIME_UP_MARGIN_S)
        handshake_s = _capped(settings.banner_timeout_s, deadline)
        # Where the host's time ends the connecting, paramiko's reader waits a little longer than
        # this thread: a host out of time is closed here first, and its end is no error of
        # paramiko's to log (HostTransport).
        reader_s = handshake_s + (READER_MARGIN_S if handshake_s < settings.banner_timeout_s else 0.0)
        transport.banner_timeout = reader_s
        transport.handshake_timeout = reader_s
        transport.auth_timeout = settings.auth_timeout_s
        transport.channel_timeout = settings.channel_timeout_s
        try:
            security = transport.get_security_options()
            security.key_types = self._known_hosts.preferred_key_types(host, security.key_types)
            transport.start_client(timeout=handshake_s)
            accept_new = settings.accept_new_host_keys or host.strict_host_key_checking in ("accept-new", "no")
            self._known_hosts.check(host, transport.get_remote_server_key(), accept_new)
            self._authenticate(transport, host, deadline)
        except TransportError:
            close_transport(transport)
            raise
        except (paramiko.SSHException, OSError, EOFError) as error:
            if _time_up(deadline):
                close_transport(transport)
                raise ConnectTimedOut(f"{_address(host)}: no SSH banner and key exchange within the host's "
                                      f"time limit") from error
            why = f"SSH handshake failed: {error or 'the connection was closed'}"
            if isinstance(sock, ProxyCommandSocket):  # the command's own words say more than paramiko's
                why = sock.failure() + ("" if sock.closed else f" ({why})")
            close_transport(transport)
            raise Unreachable(f"{_address(host)}: {why}") from error
        transport.set_keepalive(settings.keepalive_s)
        return transport

    def _authenticate(self, transport: paramiko.Transport, host: ResolvedHost, deadline: float | None) -> None:
        """Offer each key in turn, each attempt within what is left before ``deadline``. Raises
        AuthFailed when every key is refused, ConnectTimedOut when ``deadline`` passes first."""
        tried = []
        for name, key in self._keys.keys_for(host.identity_files):
            if _time_up(deadline):
                break
            transport.auth_timeout = _capped(self._settings.auth_timeout_s, deadline)
            try:
                transport.auth_publickey(host.user, key)
            except paramiko.AuthenticationException:
                tried.append(name)
                continue
            if transport.is_authenticated():
                return
        if _time_up(deadline):  # a key unanswered (paramiko says "Authentication timeout") is no refusal
            raise ConnectTimedOut(f"{host.user}@{host.hostname}:{host.port}: no login within the host's time limit "
                                  f"(keys offered: {', '.join(tried) or 'none yet'})")
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
        self._pids_known = threading.Condition(self._lock)
        self._remote_pids: set[int] = set()
        self._unknown_pids = 0  # commands started whose PID line has not arrived yet
        self._copying: paramiko.Channel | None = None  # the SFTP channel of a bundle copy under way
        self._cancelled = False

    def prepare(self, bundle: Bundle) -> None:
        """Copy the bundle to ``~/.cache/gpudiag/bundle-<hash>`` unless it is there already.
        Raises BundleCopyTimeout when an SFTP request goes unanswered for ``sftp_timeout_s``,
        BundleShipError for any other failure (``cancel`` from another thread ends the copy)."""
        if self._bundle_dir is not None and self._bundle_dir.endswith(bundle.content_hash[:16]):
            return  # shipped earlier on this connection
        timeout_s = self._settings.sftp_timeout_s
        try:
            with self._sftp() as sftp:
                self._bundle_dir = ship_bundle(sftp, bundle)
        except UnsafeFolder as unsafe:
            raise BundleShipError(f"{self._label}: the probe bundle will not run from there: {unsafe}; remove it "
                                  f"(or make it the remote user's, mode 0700) and run again") from unsafe
        except TimeoutError as error:
            raise BundleCopyTimeout(f"{self._label}: the node's SFTP server did not answer for {timeout_s:g} s "
                                    f"while the probe bundle was copied (a hung home file system?); check "
                                    f"the node's file systems") from error
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise BundleShipError(f"{self._label}: could not copy the probe bundle over SFTP: "
                                  f"{error or type(error).__name__}") from error

    @contextlib.contextmanager
    def _sftp(self) -> Iterator[paramiko.SFTPClient]:
        """An SFTP client whose every request times out after ``sftp_timeout_s`` (TimeoutError),
        and whose channel ``cancel`` closes."""
        channel = self._transport.open_session(timeout=self._settings.channel_timeout_s)
        with self._lock:
            self._copying = channel
            cancelled = self._cancelled
        try:
            if cancelled:
                raise EOFError("the session was cancelled")
            channel.settimeout(self._settings.sftp_timeout_s)
            channel.invoke_subsystem("sftp")
            with paramiko.SFTPClient(channel) as sftp:
                yield sftp
        finally:
            with self._lock:
                self._copying = None
            channel.close()

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
        marker = new_pid_marker()
        command = (f"{where}echo {marker}$$ >&2 && "
                   f"exec timeout -k {grace} {timeout_s:.1f} {shlex.join(argv)}")
        return SshCommand(self, self._open(command), timeout_s + grace + 5.0, self._settings.output, marker)

    def is_open(self) -> bool:
        return self._transport.is_active()

    def cancel(self) -> None:
        """End the commands this session started on the node (TERM, then KILL from ``timeout -k``),
        and a bundle copy under way (its SFTP channel is closed: the copy fails at once). A copy
        that starts after this fails too. A command just started, whose PID has not arrived yet,
        is waited for (at most PID_WAIT_S) and ended too; one whose PID arrives later still is
        ended when it does."""
        with self._lock:
            copying, self._copying = self._copying, None
            self._cancelled = True
        if copying is not None:
            copying.close()
        with self._lock:
            self._pids_known.wait_for(lambda: self._unknown_pids == 0, PID_WAIT_S)
            pids = sorted(self._remote_pids)
        self.kill(pids)

    def kill(self, pids: Sequence[int]) -> None:
        if not pids or not self._transport.is_active():
            return
        targets = " ".join(str(pid) for pid in pids)
        try:
            SshCommand(self, self._open(f"kill -TERM {targets} 2>/dev/null; true"), 10.0, self._settings.output,
                       None).finish(10.0)
        except ConnectionLost:
            pass  # the connection is going away; the node's own deadline still ends the command

    def close(self) -> None:
        close_transport(self._transport)

    def starting(self, known: bool) -> None:
        """A command started (``known`` False) whose PID is not known yet, or its PID line arrived
        or it ended without one (``known`` True)."""
        with self._lock:
            self._unknown_pids += -1 if known else 1
            self._pids_known.notify_all()

    def track(self, pid: int, running: bool) -> None:
        """Note a command's remote PID while it runs; one that starts after ``cancel`` is ended."""
        with self._lock:
            late = running and self._cancelled
            if running and not late:
                self._remote_pids.add(pid)
            else:
                self._remote_pids.discard(pid)
        if late:
            self.kill([pid])

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
    read its first line while it runs. stdout goes through a ``BoundedOutput`` and stderr
    through a ``TailBuffer`` (the session's OutputLimits): past a cap the command is ended on
    the node and nothing more is read. Its stdin is the channel's, open until the command ends
    or the connection goes (the controller's death closes it)."""

    def __init__(self, session: SshSession, channel: paramiko.Channel, wait_s: float, limits: OutputLimits,
                 pid_marker: str | None) -> None:
        """``pid_marker``: the start of the PID line the command's shell prints first on stderr,
        where it is tracked (and ended by ``cancel``); None for a command that is not."""
        self._session = session
        self._channel = channel
        self._started = time.monotonic()
        self._deadline = self._started + wait_s
        self._track = pid_marker is not None
        self._pid: int | None = None
        self._stdout = BoundedOutput(limits)
        self._stderr = ErrorOutput(limits.stderr_tail_bytes, pid_marker)
        self._done = threading.Event()
        self._result: CommandResult | None = None
        self._error: ConnectionLost | None = None
        if self._track:
            session.starting(known=False)
        threading.Thread(target=self._gather, name="ssh-command", daemon=True).start()

    def first_line(self, timeout_s: float) -> str | None:
        return self._stdout.first_line(timeout_s)

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

    def send_line(self, text: str) -> None:
        """Write ``text`` and a newline to its stdin (the channel's). Raises ValueError for a line
        break in ``text``, ConnectionLost when the channel is closed."""
        data = _one_line(text)
        try:
            if self._channel.closed:
                raise EOFError("the command's channel is closed")
            self._channel.sendall(data)
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise self._session.lost(error) from error

    def _gather(self) -> None:
        channel = self._channel
        try:
            try:
                status, timed_out = self._collect(channel)
            finally:
                channel.close()
                if self._pid is not None:
                    self._session.track(self._pid, running=False)
                elif self._track:
                    self._session.starting(known=True)  # it ended before its PID line came
            self._result = CommandResult(exit_status=status, stdout=self._stdout.text(), stderr=self._stderr.text(),
                                         timed_out=timed_out, duration_s=time.monotonic() - self._started,
                                         overflow=self._stdout.overflow)
        except (paramiko.SSHException, EOFError, OSError) as error:
            self._error = self._session.lost(error)
        finally:
            self._stdout.end()
            self._done.set()

    def _collect(self, channel: paramiko.Channel) -> tuple[int | None, bool]:
        """Read stdout and stderr until EOF, then wait for the exit status, all by the deadline:
        (exit status, timed out). OpenSSH may send the exit status before the last bytes of the
        pipe (and a child of the command may hold the pipe after it exited): what was printed is
        read to its end first. Past a cap of the output the command is ended and (None, False)
        returned. Raises EOFError when the connection closed before EOF (the gatherer's
        ConnectionLost)."""
        while True:
            if not self._read_ready(channel):
                self.cancel()  # past a cap: end it on the node (the channel's close ends the rest)
                return None, False
            if (channel.eof_received or channel.closed) and not _ready(channel):
                break
            left = self._deadline - time.monotonic()
            if left <= 0:
                return None, True
            select.select([channel], [], [], min(left, 0.5))
        if not channel.eof_received:  # closed under us: sshd ends a command's output with EOF before it closes
            raise EOFError("the connection closed before the end of the output")
        while not channel.exit_status_ready():
            left = self._deadline - time.monotonic()
            if left <= 0:
                return None, True
            channel.status_event.wait(min(left, 0.5))
        self._read_ready(channel)  # error output that came with the status
        return channel.recv_exit_status(), False

    def _read_ready(self, channel: paramiko.Channel) -> bool:
        """Take what has arrived on stdout and stderr; False once stdout passed a cap."""
        while channel.recv_stderr_ready():
            self._stderr.feed(channel.recv_stderr(_CHUNK_BYTES))
        if self._pid is None and self._stderr.pid is not None:
            self._pid = self._stderr.pid
            self._session.track(self._pid, running=True)
            self._session.starting(known=True)
        while channel.recv_ready():
            if not self._stdout.feed(channel.recv(_CHUNK_BYTES)):
                return False
        return True


def _one_line(text: str) -> bytes:
    """``text`` and a newline, as bytes; ValueError when it holds a line break itself."""
    if "\n" in text or "\r" in text:
        raise ValueError("one line only: the text holds a line break")
    return (text + "\n").encode()


def _ready(channel: paramiko.Channel) -> bool:
    return channel.recv_ready() or channel.recv_stderr_ready()


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


def _address(host: ResolvedHost) -> str:
    """Where a connection went, for an error the host's own label heads: ``port 22``, or
    ``10.0.0.7:22`` where its address is not its label (the host's name is not said twice)."""
    return f"port {host.port}" if host.hostname == host.label else f"{host.hostname}:{host.port}"


def _tcp_connect(host: ResolvedHost, deadline: float | None) -> socket.socket:
    """A TCP connection to ``host`` within its ConnectTimeout, and by ``deadline`` (time.monotonic)
    where given. Raises Unreachable, ConnectTimedOut when ``deadline`` came first."""
    timeout_s = _capped(host.connect_timeout_s, deadline)
    try:
        return socket.create_connection((host.hostname, host.port), timeout=timeout_s)
    except socket.gaierror as error:
        name = "" if host.hostname == host.label else f"{host.hostname}: "
        raise Unreachable(f"{name}name does not resolve ({error.strerror})") from error
    except TimeoutError as error:
        if timeout_s < host.connect_timeout_s:
            raise ConnectTimedOut(f"{_address(host)}: no answer within the host's time limit") from error
        raise Unreachable(f"{_address(host)}: no answer within {host.connect_timeout_s:g} s") from error
    except OSError as error:
        raise Unreachable(f"{_address(host)}: {error.strerror or error}") from error


def _capped(timeout_s: float, deadline: float | None) -> float:
    """``timeout_s``, or what is left before ``deadline`` (time.monotonic) where that is less: at
    least MIN_WAIT_S, so a wait past its time fails at once rather than waiting for ever."""
    if deadline is None:
        return timeout_s
    return max(MIN_WAIT_S, min(timeout_s, deadline - time.monotonic()))


def _time_up(deadline: float | None) -> bool:
    """Whether ``deadline`` (time.monotonic) has come (or is within TIME_UP_MARGIN_S: paramiko's
    waits end on time.time and in 0.1 s steps)."""
    return deadline is not None and time.monotonic() >= deadline - TIME_UP_MARGIN_S
