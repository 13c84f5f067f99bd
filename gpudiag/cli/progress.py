"""Sweep progress on stderr: one aggregate bar on a terminal, plain lines elsewhere (a Slurm
prolog, CI), nothing with -q (gpudiag.run.progress has the protocol and the plain displays)."""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

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
        self._bar.stop()

    def phase(self, text: str) -> None:
        self._bar.console.print(f"gpudiag: {text}", markup=False, highlight=False)

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
