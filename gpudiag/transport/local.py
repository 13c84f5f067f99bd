"""The local transport: this machine, without SSH (``localhost``)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..bundle import Bundle
from . import CommandResult, OutputWatch


class LocalSession:
    """Runs commands as child processes of this one, in the bundle folder."""

    def __init__(self, cwd: Path | None = None) -> None:
        self._cwd = cwd
        self._lock = threading.Lock()
        self._running: subprocess.Popen[str] | None = None
        self._started: set[LocalCommand] = set()
        self._cancelled = False

    def prepare(self, bundle: Bundle) -> None:
        """The bundle is already here: run from its root."""
        self._cwd = bundle.root

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv``; after ``timeout_s`` seconds kill its whole process group."""
        started = time.monotonic()
        # A process group of its own, so a timeout takes any children the probe started too.
        process = subprocess.Popen(list(argv), cwd=self._cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        with self._lock:
            self._running = process
            if self._cancelled:
                _kill_group(process)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(process)
            stdout, stderr = process.communicate()
            timed_out = True
        except KeyboardInterrupt:
            _kill_group(process)
            process.communicate()
            raise
        finally:
            with self._lock:
                self._running = None
        return CommandResult(exit_status=None if timed_out else process.returncode, stdout=stdout,
                             stderr=stderr, timed_out=timed_out, duration_s=time.monotonic() - started)

    def start(self, argv: Sequence[str], timeout_s: float) -> LocalCommand:
        """Start ``argv`` and return at once; its process group is killed after ``timeout_s``."""
        command = LocalCommand(argv, self._cwd, timeout_s)
        with self._lock:
            self._started.add(command)
            if self._cancelled:
                command.cancel()
        return command

    def is_open(self) -> bool:
        return True

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._running is not None:
                _kill_group(self._running)
            started = list(self._started)
        for command in started:
            command.cancel()

    def close(self) -> None:
        return None


class LocalConnector:
    """The Connector of a sweep whose one host is this machine under its own name (a Slurm
    prolog on the node: ``gpudiag preflight --here --hosts $SLURMD_NODENAME``): every host
    named is reached here, without SSH."""

    def connect(self, host: Any) -> LocalSession:
        return LocalSession()

    def close(self) -> None:
        return None


class LocalCommand:
    """A child process whose stdout and stderr are read on threads as they arrive."""

    def __init__(self, argv: Sequence[str], cwd: Path | None, timeout_s: float) -> None:
        self._started = time.monotonic()
        self._deadline = self._started + timeout_s
        self._process = subprocess.Popen(list(argv), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True)
        self._watch = OutputWatch()
        self._out = bytearray()
        self._err = bytearray()
        assert self._process.stdout is not None and self._process.stderr is not None
        self._readers = [threading.Thread(target=self._read, args=(self._process.stdout, self._out, True), daemon=True),
                         threading.Thread(target=self._read, args=(self._process.stderr, self._err, False),
                                          daemon=True)]
        for reader in self._readers:
            reader.start()

    def first_line(self, timeout_s: float) -> str | None:
        return self._watch.first_line(min(timeout_s, max(0.0, self._deadline - time.monotonic())))

    def finish(self, timeout_s: float) -> CommandResult:
        wait_s = max(0.0, min(timeout_s, self._deadline - time.monotonic()))
        try:
            status: int | None = self._process.wait(wait_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            self.cancel()
            self._process.wait()
            status, timed_out = None, True
        for reader in self._readers:
            reader.join(5.0)
        return CommandResult(exit_status=status, stdout=bytes(self._out).decode(errors="replace"),
                             stderr=bytes(self._err).decode(errors="replace"), timed_out=timed_out,
                             duration_s=time.monotonic() - self._started)

    def cancel(self) -> None:
        _kill_group(self._process)

    def _read(self, stream: Any, into: bytearray, watched: bool) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            into += chunk
            if watched:
                self._watch.feed(chunk)
        if watched:
            self._watch.end()


def _kill_group(process: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended on its own
