"""One ``srun`` process of the controller: started, its stdout and stderr read line by line as
they arrive into a ``StepOutput`` (bounded: srun cuts a task's lines into labelled pieces of at
most 1,024 bytes, and a longer line is cut here), ended past its time.

When a task passes a cap of its output and every other task has ended, srun is ended at once:
the task past its cap goes with it, and the others' results are already whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from .step import StepEnd, StepOutput

# Seconds srun gets to end its step after TERM before it is killed.
SRUN_TERM_WAIT_S = 10.0
# Seconds a started command gets to end on its own once its stdin reached EOF (finish past its time).
STDIN_EOF_WAIT_S = 2.0
# Seconds the readers get to drain srun's pipes once it ended.
READER_JOIN_S = 5.0
# The longest line of srun's kept whole (its own are a label and at most 1,024 bytes).
MAX_SRUN_LINE_BYTES = 64 * 1024
_CHUNK_BYTES = 65536
# Variables srun would read a task layout from instead of ours (--distribution=arbitrary reads
# SLURM_HOSTFILE when it is set): the layout is ours alone.
_LAYOUT_VARIABLES = ("SLURM_HOSTFILE",)


class SrunProcess:
    """srun running one step, its output read into ``output`` on two threads.

    ``live_stdin``: srun's stdin is a pipe this process holds open (a started command's
    stdin: it reaches EOF when ``close_stdin`` is called, or when this process dies), else
    ``/dev/null``. Raises OSError when srun cannot be started.
    """

    def __init__(self, argv: Sequence[str], output: StepOutput, live_stdin: bool = False,
                 environ: Mapping[str, str] | None = None) -> None:
        self._output = output
        self._started = time.monotonic()
        self._ending = threading.Lock()
        self._stdin_lock = threading.Lock()
        self._ended_early = False
        environment = {key: value for key, value in (environ or os.environ).items() if key not in _LAYOUT_VARIABLES}
        self._process = subprocess.Popen(list(argv), stdin=subprocess.PIPE if live_stdin else subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                         env=environment)
        assert self._process.stdout is not None and self._process.stderr is not None
        self._readers = [
            threading.Thread(target=self._read_stdout, args=(self._process.stdout,), name="srun-stdout", daemon=True),
            threading.Thread(target=read_lines, args=(self._process.stderr, output.feed_stderr), name="srun-stderr",
                             daemon=True)]
        for reader in self._readers:
            reader.start()

    def running(self) -> bool:
        """True until srun has ended."""
        return self._process.poll() is None

    def wait(self, wait_s: float, eof_first: bool = False) -> StepEnd:
        """Wait at most ``wait_s`` for srun to end, then end it (with ``eof_first``, its stdin is
        closed first and the command gets STDIN_EOF_WAIT_S to end on its own); how it ended."""
        killed = False
        try:
            self._process.wait(max(0.0, wait_s))
        except subprocess.TimeoutExpired:
            killed = not (eof_first and self._ends_at_eof())
            if killed:
                self.end()
        self.close_stdin()
        for reader in self._readers:
            reader.join(READER_JOIN_S)
        return StepEnd(self._process.returncode, self._output.srun_lines(), killed, time.monotonic() - self._started)

    def write_line(self, text: str) -> None:
        """Write ``text`` and a newline to srun's stdin (srun forwards it to the command). Raises
        ValueError for a line break in ``text``, OSError when the stdin is closed or srun is gone."""
        if "\n" in text or "\r" in text:
            raise ValueError("one line only: the text holds a line break")
        with self._stdin_lock:
            stdin = self._process.stdin
            if stdin is None or stdin.closed:
                raise BrokenPipeError("srun's stdin is closed")
            stdin.write((text + "\n").encode())
            stdin.flush()

    def close_stdin(self) -> None:
        """Close srun's stdin (the started command sees EOF); a no-op when it has none."""
        with self._stdin_lock:  # finish and cancel may close it from two threads at once
            stdin = self._process.stdin
            if stdin is not None and not stdin.closed:
                try:
                    stdin.close()
                except BrokenPipeError:
                    pass  # srun is gone: its end of the pipe with it

    def end(self) -> None:
        """TERM to srun (it ends its step on the nodes), KILL after SRUN_TERM_WAIT_S; returns
        once it ended. Safe from several threads at once."""
        with self._ending:
            if self._process.poll() is not None:
                return
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(SRUN_TERM_WAIT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def terminate(self) -> None:
        """``end`` from a thread of its own, so a cancel never blocks."""
        threading.Thread(target=self.end, name="srun-end", daemon=True).start()

    def _ends_at_eof(self) -> bool:
        self.close_stdin()
        try:
            self._process.wait(STDIN_EOF_WAIT_S)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _read_stdout(self, stream: IO[bytes]) -> None:
        try:
            read_lines(stream, self._feed_stdout)
        finally:
            self._output.end()

    def _feed_stdout(self, line: bytes, cut: bool) -> None:
        self._output.feed(line, cut)
        if not self._ended_early and self._output.settled():
            self._ended_early = True  # a task past its cap, every other one done: nothing more is wanted
            self.terminate()


def read_lines(stream: IO[bytes], feed: Callable[[bytes, bool], None],
               max_line_bytes: int = MAX_SRUN_LINE_BYTES) -> None:
    """Feed each line of ``stream`` (without its newline) to ``feed(line, cut)`` until EOF,
    keeping at most ``max_line_bytes`` of a line (``cut`` True when more was dropped), so a
    stream that never ends a line costs bounded memory."""
    partial = bytearray()
    cut = False
    for chunk in iter(lambda: stream.read1(_CHUNK_BYTES), b""):  # a buffered pipe: what has come, at most a chunk
        start = 0
        while start <= len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            room = max_line_bytes - len(partial)
            partial += chunk[start:min(end, start + room)]
            cut = cut or end - start > room
            if newline < 0:
                break
            feed(bytes(partial), cut)
            partial.clear()
            cut = False
            start = newline + 1
    if partial:
        feed(bytes(partial), cut)
