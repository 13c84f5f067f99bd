"""The local transport: this machine, without SSH (``localhost``).

Commands are child processes in a process group of their own (a timeout or a cap takes any
children they started too). Their output is read as it arrives, stdout through a
``BoundedOutput`` and stderr through a ``TailBuffer`` (the session's OutputLimits), to its end:
a program on this machine is no more trusted than one on a node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..bundle import Bundle
from . import CommandResult, TransportError
from .bounded import BoundedOutput, OutputLimits, TailBuffer

_CHUNK_BYTES = 65536
# After the process group is killed, how long its pipes get to reach EOF (a process that left
# the group with setsid may hold them: its output is not waited for).
_DRAIN_AFTER_KILL_S = 5.0


class LocalSession:
    """Runs commands as child processes of this one, in the bundle folder, their output within
    ``limits``."""

    def __init__(self, cwd: Path | None = None, limits: OutputLimits | None = None) -> None:
        self._cwd = cwd
        self._limits = limits or OutputLimits()
        self._lock = threading.Lock()
        self._commands: set[LocalCommand] = set()
        self._cancelled = False

    def prepare(self, bundle: Bundle) -> None:
        """The bundle is already here: run from its root."""
        self._cwd = bundle.root

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` with stdin at EOF; after ``timeout_s`` seconds kill its whole process
        group. Past a cap of the output the group is killed too (``CommandResult.overflow``)."""
        command = self._launch(argv, timeout_s, live_stdin=False)
        try:
            return command.finish(timeout_s)
        except KeyboardInterrupt:
            command.cancel()
            raise
        finally:
            with self._lock:
                self._commands.discard(command)

    def start(self, argv: Sequence[str], timeout_s: float) -> LocalCommand:
        """Start ``argv`` and return at once; its process group is killed after ``timeout_s``.
        Its stdin is a pipe from this process, open until it is finished or cancelled (EOF when
        this process dies)."""
        return self._launch(argv, timeout_s, live_stdin=True)

    def is_open(self) -> bool:
        return True

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            commands = list(self._commands)
        for command in commands:
            command.cancel()

    def close(self) -> None:
        return None

    def _launch(self, argv: Sequence[str], timeout_s: float, live_stdin: bool) -> LocalCommand:
        command = LocalCommand(argv, self._cwd, timeout_s, self._limits, live_stdin=live_stdin)
        with self._lock:
            self._commands.add(command)
            cancelled = self._cancelled
        if cancelled:
            command.cancel()
        return command


class LocalConnector:
    """The Connector of a sweep whose one host is this machine under its own name (a Slurm
    prolog on the node: ``gpudiag preflight --here --hosts $SLURMD_NODENAME``): every host
    named is reached here, without SSH, its output within ``limits``."""

    def __init__(self, limits: OutputLimits | None = None) -> None:
        self._limits = limits or OutputLimits()

    def connect(self, host: Any, within_s: float | None = None) -> LocalSession:
        return LocalSession(limits=self._limits)

    def close(self) -> None:
        return None


class LocalCommand:
    """A child process whose stdout and stderr are read on threads as they arrive, within
    ``limits``: past a cap its process group is killed and its stdout no longer read.
    ``live_stdin``: its stdin is a pipe kept open until ``finish`` or ``cancel`` (else /dev/null)."""

    def __init__(self, argv: Sequence[str], cwd: Path | None, timeout_s: float, limits: OutputLimits,
                 live_stdin: bool = True) -> None:
        self._started = time.monotonic()
        self._deadline = self._started + timeout_s
        stdin = subprocess.PIPE if live_stdin else subprocess.DEVNULL
        self._process = subprocess.Popen(list(argv), cwd=cwd, stdin=stdin, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True)
        self._stdout = BoundedOutput(limits)
        self._stderr = TailBuffer(limits.stderr_tail_bytes)
        assert self._process.stdout is not None and self._process.stderr is not None
        self._readers = [threading.Thread(target=self._read_stdout, args=(self._process.stdout,), daemon=True),
                         threading.Thread(target=self._read_stderr, args=(self._process.stderr,), daemon=True)]
        for reader in self._readers:
            reader.start()

    def first_line(self, timeout_s: float) -> str | None:
        return self._stdout.first_line(min(timeout_s, max(0.0, self._deadline - time.monotonic())))

    def finish(self, timeout_s: float) -> CommandResult:
        """Wait at most ``timeout_s`` more (and never past its deadline) for it to end and for its
        output to reach EOF, then kill its process group; how it ended."""
        deadline = min(time.monotonic() + timeout_s, self._deadline)
        timed_out = not self._ended_by(deadline)
        if timed_out:
            self.cancel()
        self._join_readers(time.monotonic() + _DRAIN_AFTER_KILL_S)
        self._close_stdin()
        overflow = self._stdout.overflow
        status = None if timed_out or overflow is not None else self._process.wait()
        return CommandResult(exit_status=status, stdout=self._stdout.text(), stderr=self._stderr.text(),
                             timed_out=timed_out and overflow is None, duration_s=time.monotonic() - self._started,
                             overflow=overflow)

    def cancel(self) -> None:
        _kill_group(self._process)
        self._close_stdin()

    def send_line(self, text: str) -> None:
        """Write ``text`` and a newline to its stdin. Raises ValueError for a line break in
        ``text``, TransportError when its stdin is closed (it ended, was finished or cancelled, or
        was started by ``run``)."""
        if "\n" in text or "\r" in text:
            raise ValueError("one line only: the text holds a line break")
        stdin = self._process.stdin
        try:
            if stdin is None or stdin.closed:
                raise BrokenPipeError("the command's stdin is closed")
            stdin.write((text + "\n").encode())
            stdin.flush()
        except (OSError, ValueError) as error:  # ValueError: closed by finish or cancel meanwhile
            raise TransportError(f"this machine: could not write to the command's stdin: {error}") from error

    def _ended_by(self, deadline: float) -> bool:
        """Whether the process ended and its output reached EOF (a child it left behind may hold
        the pipes) before ``deadline``."""
        try:
            self._process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
        self._join_readers(deadline)
        return not any(reader.is_alive() for reader in self._readers)

    def _join_readers(self, deadline: float) -> None:
        for reader in self._readers:
            reader.join(max(0.0, deadline - time.monotonic()))

    def _close_stdin(self) -> None:
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()

    def _read_stdout(self, stream: Any) -> None:
        try:
            for chunk in iter(lambda: stream.read1(_CHUNK_BYTES), b""):
                if not self._stdout.feed(chunk):
                    _kill_group(self._process)  # past a cap: end it, read no more
                    break
        finally:
            stream.close()
            self._stdout.end()

    def _read_stderr(self, stream: Any) -> None:
        try:
            for chunk in iter(lambda: stream.read1(_CHUNK_BYTES), b""):
                self._stderr.feed(chunk)
        finally:
            stream.close()


def _kill_group(process: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended on its own
