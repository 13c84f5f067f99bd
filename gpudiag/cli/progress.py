"""Sweep progress on stderr: one aggregate bar on a terminal, plain lines elsewhere (a Slurm
prolog, CI), nothing with -q (gpudiag.run.progress has the protocol and the plain displays)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..report.tables import make_console
from ..run.progress import HostCounts, PlainProgress, QuietProgress, SweepProgress


class BarProgress:
    """One rich progress bar: done / failed / running, elapsed and ETA."""

    def __init__(self, console: Console) -> None:
        self._counts = HostCounts()
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                             refresh_per_second=4, transient=False)
        self._task = self._bar.add_task("sweep", total=0)
        self._ticking = threading.Event()
        self._stage: TaskID | None = None

    def start(self, total: int) -> None:
        self._counts.total = total
        self._bar.update(self._task, total=total)
        self._bar.start()

    def host_started(self) -> None:
        with self._counts.lock:
            self._counts.running += 1
            self._describe()

    def host_done(self, ok: bool) -> None:
        with self._counts.lock:
            self._counts.running -= 1
            self._counts.done += 1
            self._counts.failed += 0 if ok else 1
            self._describe()
        self._bar.advance(self._task)

    def close(self) -> None:
        self._ticking.set()
        self._bar.stop()
        for task in self._bar.tasks:  # on the screen as they ended; not drawn again by a later stage
            self._bar.update(task.id, visible=False)

    def phase(self, text: str) -> None:
        self._end_stage()
        self._bar.console.print(f"gpudiag: {text}", markup=False, highlight=False)

    def stage(self, text: str, total: int, unit: str) -> None:
        """A bar of its own for the stage, shown until it is done (or the next phase or stage)."""
        self._end_stage()
        self._stage = self._bar.add_task(f"{text} ({unit})", total=total)
        self._bar.start()

    def advance(self) -> None:
        stage = self._stage
        if stage is None:
            return
        self._bar.advance(stage)
        if any(task.id == stage and task.finished for task in self._bar.tasks):
            self._end_stage()

    def _end_stage(self) -> None:
        """Stop the stage's bar, leaving its last state on the screen; a later stage's bar shows
        alone (rich redraws every visible task when it starts again)."""
        stage, self._stage = self._stage, None
        if stage is not None:
            self._bar.stop()
            self._bar.update(stage, visible=False)

    def expect(self, seconds: float, what: str) -> None:
        """A second bar that fills with the time spent against ``seconds`` (the probes' limit),
        its time left shown, until the hosts are done."""
        self.phase(f"{what}: at most {seconds:.0f} s")
        task = self._bar.add_task("seconds of the probes' limit", total=seconds)
        started = time.monotonic()
        self._ticking.clear()

        def tick() -> None:
            while not self._ticking.wait(0.5):
                self._bar.update(task, completed=min(seconds, time.monotonic() - started))
            self._bar.update(task, completed=seconds)

        threading.Thread(target=tick, name="gpudiag-time-left", daemon=True).start()

    def _describe(self) -> None:
        counts = self._counts
        self._bar.update(self._task, description=f"{counts.failed} failed · {counts.running} running")


def make_progress(quiet: bool, stream: TextIO | None = None) -> SweepProgress:
    """The progress display that fits where stderr goes."""
    stream = stream or sys.stderr
    if quiet:
        return QuietProgress()
    if stream.isatty():
        return BarProgress(make_console(file=stream))
    return PlainProgress(stream)
