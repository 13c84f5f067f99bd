"""ProxyCommand: an SSH connection carried over a local command's stdin and stdout, as ssh runs it.

The command runs as ssh runs it: ``$SHELL -c "exec COMMAND"`` (``/bin/sh`` without ``$SHELL``). Unlike
ssh it gets a session of its own: Ctrl-C at the terminal then reaches only the controller, which still
needs the connection to end the probes it started on the node, and then ends the command itself. A
command cannot prompt either (no terminal): a sweep is a batch job. Its stderr is kept (the last
``STDERR_KEEP_BYTES``) to explain a connection that fails.

``ProxyCommandSocket`` is what ``paramiko.Transport`` takes in place of a socket. paramiko's own
``paramiko.ProxyCommand`` splits the command without a shell (so ``a | b`` or ``$VAR`` do not work as
in ssh), spins when the command exits instead of reporting the end of the stream, never reads stderr
and never reaps the process.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import threading
from typing import IO

from . import Unreachable

STDERR_KEEP_BYTES = 4096
# How long a command has after SIGTERM (and after its stdin closed) before SIGKILL, in seconds.
TERMINATE_GRACE_S = 2.0
# How long a failed connection waits for the command to exit and say why, in seconds.
FAILURE_WAIT_S = 2.0


class ProxyCommandSocket:
    """The socket-like end of one running ProxyCommand (``recv``, ``send``, ``settimeout``, ``close``).

    ``recv`` returns ``b""`` once the command's stdout ends, which paramiko takes as the end of the
    connection. ``close`` ends the command and everything it started (its process group) and reaps it.
    """

    def __init__(self, command_line: str) -> None:
        """Start ``command_line`` (tokens already expanded). Raises OSError if the shell cannot start."""
        self.command_line = command_line
        shell = os.environ.get("SHELL") or "/bin/sh"
        self._process = subprocess.Popen([shell, "-c", f"exec {command_line}"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                                         start_new_session=True)
        self._timeout_s: float | None = None
        self._lock = threading.Lock()
        self._closed = False  # paramiko reads this name too: a closed socket ends its wait for its thread
        self._stderr = bytearray()
        self._stderr_done = threading.Event()
        threading.Thread(target=self._keep_stderr, name="proxy-stderr", daemon=True).start()

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def closed(self) -> bool:
        """True once closed or once the command has exited."""
        return self._closed or self._process.poll() is not None

    def settimeout(self, timeout_s: float | None) -> None:
        """How long ``recv`` waits for data before it raises ``TimeoutError`` (socket.timeout) (None: for ever)."""
        self._timeout_s = timeout_s

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes of the command's stdout; ``b""`` when it ended. Raises TimeoutError
        when nothing came within the timeout, OSError once closed."""
        stdout = self._pipe(self._process.stdout)
        try:
            ready, _, _ = select.select([stdout], [], [], self._timeout_s)
            if not ready:
                raise TimeoutError()  # socket.timeout, which paramiko waits through
            return os.read(stdout.fileno(), size)
        except ValueError as error:  # closed by another thread meanwhile
            raise self._closed_error() from error

    def send(self, data: bytes) -> int:
        """Write ``data`` to the command's stdin; returns how many bytes were taken. Raises OSError
        (BrokenPipeError once the command has exited)."""
        try:
            return os.write(self._pipe(self._process.stdin).fileno(), data)
        except ValueError as error:  # closed by another thread meanwhile
            raise self._closed_error() from error

    def close(self) -> None:
        """End the command (SIGTERM to its process group, SIGKILL after ``TERMINATE_GRACE_S``), reap
        it and close its pipes. Safe to call twice and from any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._signal_group(signal.SIGTERM)
        try:
            self._process.wait(TERMINATE_GRACE_S)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self._process.wait()
        self._signal_group(signal.SIGKILL)  # anything the command left behind in its group
        _close_pipe(self._process.stdin)
        _close_pipe(self._process.stdout)

    def failure(self) -> str:
        """Why the connection through this command failed, for an error message: its exit status
        and the last line of its stderr when it has exited (waiting ``FAILURE_WAIT_S`` for that)."""
        try:
            status: int | None = self._process.wait(FAILURE_WAIT_S)
        except subprocess.TimeoutExpired:
            status = None
        self._stderr_done.wait(FAILURE_WAIT_S if status is not None else 0.0)
        with self._lock:
            lines = [line.strip() for line in bytes(self._stderr).decode(errors="replace").splitlines()]
        said = next((line for line in reversed(lines) if line), "")
        ended = "is still running" if status is None else _exit_words(status)
        return f"ProxyCommand {self.command_line!r} {ended}" + (f": {said}" if said else " and said nothing")

    def _pipe(self, pipe: IO[bytes] | None) -> IO[bytes]:
        if pipe is None or self._closed:
            raise self._closed_error()
        return pipe

    def _closed_error(self) -> OSError:
        # (errno, text), as a socket's errors are: paramiko's transport thread formats both
        return OSError(errno.EBADF, f"the ProxyCommand {self.command_line!r} was closed")

    def _keep_stderr(self) -> None:
        stderr = self._process.stderr
        assert stderr is not None
        try:
            while chunk := stderr.read(4096):
                with self._lock:
                    self._stderr += chunk
                    del self._stderr[:-STDERR_KEEP_BYTES]
        except (OSError, ValueError):  # closed under the reader: nothing more to keep
            pass
        finally:
            _close_pipe(stderr)
            self._stderr_done.set()

    def _signal_group(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signum)


def _close_pipe(pipe: IO[bytes] | None) -> None:
    if pipe is not None:
        with contextlib.suppress(OSError):
            pipe.close()


def _exit_words(status: int) -> str:
    if status < 0:
        return f"was ended by signal {-status}"
    return f"exited with status {status}"


class ProxyCommands:
    """Every ProxyCommand a connector started, so that none outlives it: ``close_all`` ends those
    still running, and once it has, no new one starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[ProxyCommandSocket] = []
        self._closed = False

    def start(self, command_line: str, label: str) -> ProxyCommandSocket:
        """Start ``command_line`` for the host ``label``. Raises Unreachable when the shell cannot
        start or the connector is closing."""
        closing = Unreachable(f"{label}: not connected: the sweep is ending")
        if self._closed:
            raise closing
        try:
            proxy = ProxyCommandSocket(command_line)
        except OSError as error:
            raise Unreachable(f"{label}: ProxyCommand {command_line!r} could not start: "
                              f"{error.strerror or error}") from error
        with self._lock:
            closed = self._closed
            if not closed:
                self._running = [running for running in self._running if not running.closed]
                self._running.append(proxy)
        if closed:  # close_all ran while it started
            proxy.close()
            raise closing
        return proxy

    def close_all(self) -> None:
        with self._lock:
            self._closed = True
            running, self._running = self._running, []
        for proxy in running:
            proxy.close()
