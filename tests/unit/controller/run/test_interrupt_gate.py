"""The interrupt gate's remote phases (gpudiag.run.interrupts): an interrupt ends a phase that is
still running, and never throws away one that had returned."""

from __future__ import annotations

import contextlib
import io
import os
import signal
from collections.abc import Iterator

from gpudiag.run.interrupts import InterruptGate


def _interrupt() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # the installed gate's handler runs at once, in this thread


class _LateGate(InterruptGate):
    """A gate whose interrupt lands after the phase returned, while its block is being left: the
    moment a real signal can also land in."""

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        with super().interruptible():
            yield
            _interrupt()


def test_an_interrupt_while_a_phase_runs_ends_it_with_the_fallback():
    with InterruptGate(io.StringIO()).installed() as gate:
        def phase() -> str:
            _interrupt()
            return "finished"

        assert gate.run_phase(phase, lambda: "ended") == "ended"
        assert gate.received


def test_an_interrupt_that_lands_as_a_phase_is_left_keeps_its_result():
    with _LateGate(io.StringIO()).installed() as gate:
        assert gate.run_phase(lambda: "finished", lambda: "ended") == "finished"
        assert gate.received  # the phases after it see the interrupt


def test_a_phase_after_an_interrupt_does_not_start():
    with InterruptGate(io.StringIO()).installed() as gate:
        _interrupt()  # outside a remote phase: deferred
        started = []
        assert gate.run_phase(lambda: started.append(1), lambda: "not started") == "not started"
        assert started == []
