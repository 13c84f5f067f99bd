"""The local transport: this machine, without SSH (``localhost``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from . import CommandResult


class LocalSession:
    """Runs commands as child processes of this one, in ``cwd``."""

    def __init__(self, cwd: Path) -> None:
        self._cwd = cwd

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv``; after ``timeout_s`` seconds kill its whole process group."""
        started = time.monotonic()
        # A process group of its own, so a timeout takes any children the probe started too.
        process = subprocess.Popen(list(argv), cwd=self._cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            timed_out = True
        except KeyboardInterrupt:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
        return CommandResult(exit_status=None if timed_out else process.returncode, stdout=stdout,
                             stderr=stderr, timed_out=timed_out, duration_s=time.monotonic() - started)
