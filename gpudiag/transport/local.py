"""The local transport: this machine, without SSH (``localhost``)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..bundle import Bundle
from . import CommandResult


class LocalSession:
    """Runs commands as child processes of this one, in the bundle folder."""

    def __init__(self, cwd: Path | None = None) -> None:
        self._cwd = cwd
        self._lock = threading.Lock()
        self._running: subprocess.Popen[str] | None = None
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

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._running is not None:
                _kill_group(self._running)

    def close(self) -> None:
        return None


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended on its own
