"""Sweep progress: what a run tells its display (SweepProgress), nothing (QuietProgress) or plain
lines on a stream (a Slurm prolog, CI); the bar on a terminal is the command line's
(gpudiag.cli.progress). Cheap at 1,000 hosts: it counts, it does not list."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Protocol, TextIO


class SweepProgress(Protocol):
    def start(self, total: int) -> None: ...

    def host_started(self) -> None: ...

    def host_done(self, ok: bool) -> None: ...

    def close(self) -> None: ...

    def phase(self, text: str) -> None:
        """Say what the sweep does next (after the node probes: the analysis, a re-test, link
        rounds, writing), so a 1,000-node sweep is never silent for long."""

    def expect(self, seconds: float, what: str) -> None:
        """Say that ``what`` (the next node probes: a triage's minutes of load on one host) ends
        within ``seconds``, its limit: a display shows the time left until the probes end."""


class HostCounts:
    """Hosts done, failed and running, and since when: what a progress display shows."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = self.done = self.failed = self.running = 0
        self.started_at = time.monotonic()

    def line(self) -> str:
        return (f"{self.done}/{self.total} hosts done · {self.failed} failed · {self.running} running · "
                f"{time.monotonic() - self.started_at:.1f} s")


class QuietProgress:
    def start(self, total: int) -> None:
        return None

    def expect(self, seconds: float, what: str) -> None:
        return None

    def host_started(self) -> None:
        return None

    def host_done(self, ok: bool) -> None:
        return None

    def close(self) -> None:
        return None

    def phase(self, text: str) -> None:
        return None


class PlainProgress:
    """A line at most every ``interval_s`` seconds, and a last one at the end."""

    def __init__(self, stream: TextIO, interval_s: float = 5.0) -> None:
        self._stream = stream
        self._interval_s = interval_s
        self._counts = HostCounts()
        self._last_print = 0.0
        self._printed_done = -1

    def start(self, total: int) -> None:
        self._counts.total = total
        self._counts.started_at = time.monotonic()

    def host_started(self) -> None:
        with self._counts.lock:
            self._counts.running += 1

    def host_done(self, ok: bool) -> None:
        with self._counts.lock:
            self._counts.running -= 1
            self._counts.done += 1
            self._counts.failed += 0 if ok else 1
            now = time.monotonic()
            if now - self._last_print >= self._interval_s:
                self._last_print = now
                self._print()

    def close(self) -> None:
        with self._counts.lock:
            if self._counts.done != self._printed_done:
                self._print()

    def phase(self, text: str) -> None:
        print(f"gpudiag: {text}", file=self._stream, flush=True)

    def expect(self, seconds: float, what: str) -> None:
        ends = datetime.now(timezone.utc) + timedelta(seconds=seconds)
        self.phase(f"{what}: at most {seconds:.0f} s, until {ends:%H:%M:%S} UTC")

    def _print(self) -> None:
        self._printed_done = self._counts.done
        print(f"gpudiag: {self._counts.line()}", file=self._stream, flush=True)
