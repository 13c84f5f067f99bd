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

    def stage(self, text: str, total: int, unit: str) -> None:
        """Start a counted stage of a later phase (``re-test run 1 of 2``, ``screen round 2 of
        3``) of ``total`` ``unit`` (hosts, pairs): a display shows how many are done, live."""

    def advance(self) -> None:
        """One more of the current stage's is done."""


class HostCounts:
    """Hosts done, failed and running, and since when: what a progress display shows."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = self.done = self.failed = self.running = 0
        self.started_at = time.monotonic()

    def line(self) -> str:
        return (f"{self.done}/{self.total} hosts done · {self.failed} failed · {self.running} running · "
                f"{time.monotonic() - self.started_at:.1f} s")


class Stage:
    """A counted stage: its words, how many of how many ``unit`` are done."""

    def __init__(self, text: str, total: int, unit: str) -> None:
        self.text, self.total, self.unit, self.done = text, total, unit, 0

    def line(self) -> str:
        return f"{self.text}: {self.done}/{self.total} {self.unit}"


class QuietProgress:
    def start(self, total: int) -> None:
        return None

    def stage(self, text: str, total: int, unit: str) -> None:
        return None

    def advance(self) -> None:
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
        self._stage: Stage | None = None

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
        self._say(text)

    def stage(self, text: str, total: int, unit: str) -> None:
        """Stages come and go fast (a 1,000-node full round-robin has 999 rounds): a line at
        most every ``interval_s`` seconds, whatever stage it is in."""
        with self._counts.lock:
            self._stage = Stage(text, total, unit)
            self._say_stage()

    def advance(self) -> None:
        with self._counts.lock:
            if self._stage is not None:
                self._stage.done += 1
                self._say_stage()

    def _say_stage(self) -> None:
        now = time.monotonic()
        if self._stage is not None and now - self._last_print >= self._interval_s:
            self._last_print = now
            self.phase(self._stage.line())

    def expect(self, seconds: float, what: str) -> None:
        ends = datetime.now(timezone.utc) + timedelta(seconds=seconds)
        self.phase(f"{what}: at most {seconds:.0f} s, until {ends:%H:%M:%S} UTC")

    def _print(self) -> None:
        self._printed_done = self._counts.done
        self._say(self._counts.line())

    def _say(self, text: str) -> None:
        # one write per line: a line another thread writes (a library's log record) never lands inside it
        self._stream.write(f"gpudiag: {text}\n")
        self._stream.flush()


class StageOf:
    """A fan-out's hosts counted as one stage of ``progress`` (``re-test run 1 of 2``): what the
    fan-out tells a display of its own becomes that stage's count."""

    def __init__(self, progress: SweepProgress, text: str) -> None:
        self._progress = progress
        self._text = text

    def start(self, total: int) -> None:
        self._progress.stage(self._text, total, "hosts")

    def host_started(self) -> None:
        return None

    def host_done(self, ok: bool) -> None:
        self._progress.advance()

    def close(self) -> None:
        return None

    def phase(self, text: str) -> None:
        self._progress.phase(text)

    def expect(self, seconds: float, what: str) -> None:
        self._progress.expect(seconds, what)

    def stage(self, text: str, total: int, unit: str) -> None:
        self._progress.stage(text, total, unit)

    def advance(self) -> None:
        self._progress.advance()


class RoundsOf:
    """The link rounds counted as stages of ``progress``: ``screen round 2 of 3: 45/128 pairs``."""

    def __init__(self, progress: SweepProgress) -> None:
        self._progress = progress

    def round_started(self, label: str, pairs: int) -> None:
        self._progress.stage(label, pairs, "pairs")

    def pair_done(self) -> None:
        self._progress.advance()
