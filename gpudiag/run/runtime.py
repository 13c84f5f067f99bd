"""What a run takes from its surroundings, handed in by the command line (as httpie's
``Environment``): where a host list named ``-`` is read from, the progress display, the gate
that decides what an interrupt stops, and the clock that every run-wide deadline is read on.

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

from .interrupts import InterruptGate, QuietGate
from .progress import QuietProgress, SweepProgress

Clock = Callable[[], float]


@dataclass(frozen=True)
class Runtime:
    """The surroundings of one run: ``stdin`` (a host list ``-``), ``progress``, ``gate`` and
    ``clock`` (seconds, monotonic). The defaults are a quiet run with nothing on stdin."""

    stdin: TextIO = field(default_factory=io.StringIO)
    progress: SweepProgress = field(default_factory=QuietProgress)
    gate: InterruptGate = field(default_factory=QuietGate)
    clock: Clock = time.monotonic
