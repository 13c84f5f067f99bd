"""Ctrl-C and SIGTERM during a sweep: what they stop, and what they never stop.

A sweep's remote phases (node probes, re-tests, link rounds) stop at an interrupt: they end
what runs on the nodes and keep what finished. Its local phases (analysis, the store's final
write, the JSON document and the exclude list) never stop half-way, because a pre-flight hook
needs those outputs most when it is being cut short: an interrupt that arrives during them is
*deferred* — noted, said once on stderr, and acted on when the phase ends (no remote phase
starts after it). A second or third Ctrl-C changes nothing: the phase it lands in is already
ending what it runs, or is writing.

One ``InterruptGate`` is installed for the whole command (``installed()``); the remote phases
run through ``gate.run_phase()`` (inside ``gate.interruptible()``), where the first interrupt
raises KeyboardInterrupt and ends the phase; a phase that had returned keeps its result.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TextIO, TypeVar

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class InterruptGate:
    """Decides what an interrupt does: raise (in an interruptible phase) or wait for the phase
    to end. ``received`` is true once any interrupt arrived. ``say`` writes a progress line."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._interruptible = 0
        self._raised = False  # in the current interruptible block
        self._received = threading.Event()
        self._deferred_said = False

    @property
    def received(self) -> bool:
        return self._received.is_set()

    def say(self, text: str) -> None:
        """One line on stderr (``gpudiag: <text>``): what the command is doing after an interrupt."""
        try:
            self._stream.write(f"gpudiag: {text}\n")
            self._stream.flush()
        except (OSError, ValueError):
            pass  # stderr closed (a killed terminal): nothing to tell, the work goes on

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """A remote phase: an interrupt raises KeyboardInterrupt here. One that arrived earlier
        (deferred) raises at once, so the phase does not start."""
        if self.received:
            raise KeyboardInterrupt
        self._interruptible += 1
        self._raised = False
        try:
            yield
        finally:
            self._interruptible -= 1

    def run_phase(self, phase: Callable[[], T], interrupted: Callable[[], T]) -> T:
        """``phase()`` as a remote phase (see ``interruptible``), or ``interrupted()`` where an
        interrupt ended it before it returned. One that lands after it returned, while the phase
        is being left, keeps its result: ``received`` says it came, for the phases after."""
        finished: list[T] = []
        try:
            with self.interruptible():
                finished.append(phase())
        except KeyboardInterrupt:
            if not finished:
                return interrupted()
        return finished[0]

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler (main thread)."""
        self._received.set()
        if self._interruptible and not self._raised:
            self._raised = True  # once: the phase is already ending what it runs and keeping what finished
            raise KeyboardInterrupt
        if self._interruptible:
            self.say("already stopping: ending what runs on the nodes, then writing what finished")
            return
        if not self._deferred_said:
            self._deferred_said = True
            name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
            self.say(f"{name}: finishing the analysis and writing what was gathered first "
                     "(it is never left half-written; more interrupts are ignored until then)")

    @contextlib.contextmanager
    def installed(self) -> Iterator[InterruptGate]:
        """SIGINT and SIGTERM go to this gate until the block ends (then the previous handlers)."""
        previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}
        for signum in SIGNALS:
            previous[signum] = signal.signal(signum, self.handle)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


class QuietGate(InterruptGate):
    """A gate for callers that install no handlers (library use, tests of one phase): every
    phase is interruptible as Python's default handler makes it, and nothing is said."""

    def say(self, text: str) -> None:
        return None
