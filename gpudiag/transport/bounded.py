"""What one command on a node may print, bounded: a node is not trusted.

A node that prints one endless line, or gigabytes of records, must cost the controller no more
than the caps of ``OutputLimits``, whichever transport (SSH, local, srun) reads it. The readers
feed every chunk they receive to a ``BoundedOutput`` (stdout: whole lines kept in order, up to
the caps) and a ``TailBuffer`` (stderr: its last bytes, where a program's reason is). Past a cap
``BoundedOutput.feed`` returns False and ``overflow`` names the cap: the reader ends the command
and stops reading, and the host's probes end as ``probe_error`` naming it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

MIB = 1 << 20
KIB = 1 << 10
# The command-line options that set the caps (gpudiag.cli.options.output_options), for messages.
CAP_OPTIONS = "--max-output-mib and --max-line-kib"


@dataclass(frozen=True)
class OutputLimits:
    """Caps on one command's output: ``max_bytes`` of stdout in all, ``max_line_bytes`` in one
    line, and the last ``stderr_tail_bytes`` of stderr kept.

    The defaults fit an 8-GPU node running every probe (about 160 KB in some 320 lines, the
    longest under 4 KB) a hundred times over."""

    max_bytes: int = 16 * MIB
    max_line_bytes: int = 1 * MIB
    stderr_tail_bytes: int = 64 * KIB

    def __post_init__(self) -> None:
        if self.max_line_bytes < 1 or self.max_bytes < self.max_line_bytes or self.stderr_tail_bytes < 1:
            raise ValueError(f"output limits must be positive, with a line no longer than the whole: {self}")

    def describe(self) -> str:
        """``16 MiB of output, 1024 KiB a line``: the caps in words, for messages."""
        return f"{_size(self.max_bytes)} of output, {_size(self.max_line_bytes)} a line"


class BoundedOutput:
    """A command's stdout as it arrives, split into lines and kept up to the caps; safe to feed
    from one reader thread while others wait for its first line. The lines are kept as one
    buffer (no object per line): the memory of a full output is about the cap itself."""

    def __init__(self, limits: OutputLimits) -> None:
        self._limits = limits
        self._changed = threading.Condition()
        self._kept = bytearray()  # whole lines, each with its newline
        self._first: bytes | None = None  # the first whole line, without its newline
        self._partial = bytearray()
        self._ended = False
        self.overflow: str | None = None

    def feed(self, chunk: bytes) -> bool:
        """Take ``chunk``; False once a cap is passed (``overflow`` says which): the caller ends
        the command and stops reading. Chunks fed after that are dropped."""
        with self._changed:
            if self.overflow is not None:
                return False
            start = 0
            while start < len(chunk):
                newline = chunk.find(b"\n", start)
                end = len(chunk) if newline < 0 else newline
                if len(self._partial) + end - start > self._limits.max_line_bytes:
                    self._over(f"a line longer than {_size(self._limits.max_line_bytes)}")
                    return False
                self._partial += chunk[start:end]
                if newline < 0:
                    break
                if not self._keep_line():
                    return False
                start = newline + 1
            return True

    def end(self) -> None:
        """The output ended: a last line without its newline is kept as a line."""
        with self._changed:
            if self._partial and self.overflow is None:
                self._keep_line()
            self._ended = True
            self._changed.notify_all()

    def first_line(self, timeout_s: float) -> str | None:
        """The first whole line (without its newline); None when the output ended, or
        ``timeout_s`` passed, without one."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._first is None:
                left = deadline - time.monotonic()
                if self._ended or self.overflow is not None or left <= 0:
                    return None
                self._changed.wait(left)
            return self._first.decode(errors="replace")

    def text(self) -> str:
        """Every line kept so far, each ended by a newline."""
        with self._changed:
            return self._kept.decode(errors="replace")

    def _keep_line(self) -> bool:
        if len(self._kept) + len(self._partial) + 1 > self._limits.max_bytes:
            self._over(f"more than {_size(self._limits.max_bytes)} of output")
            return False
        if self._first is None:
            self._first = bytes(self._partial)
            self._changed.notify_all()
        self._kept += self._partial
        self._kept += b"\n"
        self._partial.clear()
        return True

    def _over(self, what: str) -> None:
        self.overflow = (f"the node printed {what} (the cap: {self._limits.describe()}); its output was cut "
                         f"there and the command ended ({CAP_OPTIONS} raise the caps for output this large "
                         f"on purpose)")
        self._partial.clear()
        self._changed.notify_all()


class TailBuffer:
    """The last ``limit`` bytes of a stream (stderr: where a failing program says why); safe to
    feed from one reader thread while another reads its text."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._data = bytearray()
        self.dropped = 0  # bytes that fell off the front

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            if len(chunk) >= self._limit:  # a chunk as large as the whole tail replaces it
                self.dropped += len(self._data) + len(chunk) - self._limit
                self._data = bytearray(chunk[len(chunk) - self._limit:])
                return
            self._data += chunk
            extra = len(self._data) - self._limit
            if extra > 0:
                del self._data[:extra]
                self.dropped += extra

    def text(self) -> str:
        """The bytes kept, decoded; when earlier bytes were dropped, a first line says how many,
        and a character the cut split at the front is left out."""
        with self._lock:
            data, dropped = bytes(self._data), self.dropped
        if not dropped:
            return data.decode(errors="replace")
        start = 0
        while start < min(len(data), 3) and data[start] & 0xC0 == 0x80:  # UTF-8 continuation bytes
            start += 1
        return f"[{dropped} earlier bytes of error output dropped]\n{data[start:].decode(errors='replace')}"


def _size(count: int) -> str:
    if count % MIB == 0:
        return f"{count // MIB} MiB"
    if count % KIB == 0:
        return f"{count // KIB} KiB"
    return f"{count} bytes"
