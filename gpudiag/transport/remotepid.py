"""The PID of a command run over SSH, read from its stderr.

The remote shell reports the PID that ``exec timeout`` keeps (so that Ctrl-C can end the command
on the node) on a line ``gpudiag-pid-<marker>=<PID>``, the marker a random one of each command's
own, which nothing else prints. A login shell may print before it (a .bashrc's warnings, pyenv's
"cannot rehash"), and an unfinished line of such text runs into it: the first PID_SCAN_BYTES of
stderr are looked through for a line ending with the marker and a number.
"""

from __future__ import annotations

import secrets

from .bounded import TailBuffer

PID_PREFIX = "gpudiag-pid-"
PID_SCAN_BYTES = 65536


def new_pid_marker() -> str:
    """The start of one command's PID line: ``gpudiag-pid-<16 hex digits>=``."""
    return f"{PID_PREFIX}{secrets.token_hex(8)}="


class ErrorOutput:
    """A command's stderr, kept as a tail, less the PID line of the remote shell (``<marker>N``) where
    the command is tracked. A login shell may print before that line (a .bashrc's warnings): what
    comes before it is the command's error output too, and the first ``PID_SCAN_BYTES`` are
    looked through for it."""

    def __init__(self, tail_bytes: int, marker: str | None) -> None:
        self._tail = TailBuffer(tail_bytes)
        self._marker = marker.encode() if marker is not None else None
        self._line = bytearray()  # an unfinished line while the PID line is looked for
        self._scanned = 0
        self.pid: int | None = None

    def feed(self, chunk: bytes) -> None:
        if self._marker is not None and self.pid is None and self._scanned < PID_SCAN_BYTES:
            self._scanned += len(chunk)
            pending = bytes(self._line) + chunk
            self._line.clear()
            kept = bytearray()
            while self.pid is None:
                line, newline, rest = pending.partition(b"\n")
                if not newline:
                    break
                before = self._before_pid(line)
                kept += line + newline if before is None else before + (newline if before else b"")
                pending = rest
            if self.pid is None and self._scanned < PID_SCAN_BYTES:
                self._line += pending  # it may be the start of the PID line
            else:
                kept += pending
            chunk = bytes(kept)
        if chunk:
            self._tail.feed(chunk)

    def text(self) -> str:
        return self._tail.text() + bytes(self._line).decode(errors="replace")

    def _before_pid(self, line: bytes) -> bytes | None:
        """What comes before the PID line's marker when ``line`` ends with it (its PID is noted:
        an unfinished line the shell printed before runs into it), else None."""
        assert self._marker is not None
        before, marker, number = line.rpartition(self._marker)
        if marker and number.isdigit() and len(number) <= 10:
            self.pid = int(number)
            return before
        return None
