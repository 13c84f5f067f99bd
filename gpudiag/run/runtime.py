"""What a run takes from its surroundings, handed in by the command line (as httpie's
``Environment``): where a host list named ``-`` is read from, the progress display, the gate
that decides what an interrupt stops, the clock that every run-wide deadline is read on, and
how the hosts are reached (``connect``: gpudiag.run.connection; the command line hands in
gpudiag.cli.connect.connect, and a run without it reaches a stand-in fleet only).

The clock is ``time.monotonic`` on the command line. Every time of a run is read on it: the
``--budget`` and its deadline, each host's time limit and the duration it reports, the link
rounds' end. Only the short waits for real processes to end after a cancel (an interrupt, a
deadline) are wall time. A test hands in a clock it moves itself, so a budget that runs out
needs no sleeping.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from .connection import Connect, stand_in_only
from .interrupts import InterruptGate, QuietGate
from .progress import QuietProgress, SweepProgress

Clock = Callable[[], float]


@dataclass(frozen=True)
class Runtime:
    """The surroundings of one run: ``stdin`` (a host list ``-``), ``progress``, ``gate``,
    ``clock`` (seconds, monotonic) and ``connect``. The defaults are a quiet run with nothing on
    stdin that reaches a stand-in fleet only."""

    stdin: TextIO = field(default_factory=io.StringIO)
    progress: SweepProgress = field(default_factory=QuietProgress)
    gate: InterruptGate = field(default_factory=QuietGate)
    clock: Clock = time.monotonic
    connect: Connect = stand_in_only
