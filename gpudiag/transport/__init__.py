"""How the controller reaches a node and runs the probe bundle there.

Every transport (``local``: this machine; ``ssh``: paramiko; a simulated fleet) hands out
``Session``s through a ``Connector``. A failure to reach or trust a node is a
``TransportError`` whose ``status`` is the host status of the sweep document.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from ..bundle import Bundle


@dataclass(frozen=True)
class CommandResult:
    """What one command did: exit status (None when it was killed), output, and wall time (s).
    ``overflow``: the command printed past a cap of its OutputLimits (gpudiag.transport.bounded),
    in words; its output is cut there and it was ended. None when it stayed within them."""

    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    overflow: str | None = None


class TransportError(Exception):
    """A node could not be reached, trusted or logged into; the message says why and the fix."""

    status: ClassVar[str] = "unreachable"


class Unreachable(TransportError):
    status = "unreachable"


class AuthFailed(TransportError):
    status = "auth_failed"


class HostKeyUnknown(TransportError):
    status = "host_key_unknown"


class HostKeyChanged(TransportError):
    status = "host_key_changed"


class RunningCommand(Protocol):
    """A command started on a node that goes on while the controller does other things (a pair
    server: its first line says where it listens, then it serves the client started elsewhere)."""

    def first_line(self, timeout_s: float) -> str | None:
        """The first line of its stdout, once printed; None when it ended, or ``timeout_s``
        passed, without one."""
        ...

    def finish(self, timeout_s: float) -> CommandResult:
        """Wait at most ``timeout_s`` more for it to end (then end it); how it ended."""
        ...

    def cancel(self) -> None:
        """End it on the node now (from any thread)."""
        ...


class Session(Protocol):
    """A connection to one node, reused for every command a sweep sends there."""

    def prepare(self, bundle: Bundle) -> None:
        """Make the probe bundle available on the node (a no-op where it already is)."""
        ...

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` in the node's bundle folder; it is killed on the node after ``timeout_s``."""
        ...

    def start(self, argv: Sequence[str], timeout_s: float) -> RunningCommand:
        """Start ``argv`` like ``run`` and return at once; the node ends it after ``timeout_s``."""
        ...

    def is_open(self) -> bool:
        """False once the connection is gone (a new session is needed)."""
        ...

    def cancel(self) -> None:
        """End what this session started on the node (from another thread, on Ctrl-C)."""
        ...

    def close(self) -> None:
        ...


class OutputWatch:
    """A command's stdout as it arrives, for a reader that waits for its first line."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._data = bytearray()
        self._ended = False

    def feed(self, chunk: bytes) -> None:
        with self._changed:
            self._data += chunk
            self._changed.notify_all()

    def end(self) -> None:
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def first_line(self, timeout_s: float) -> str | None:
        """The first whole line (without its newline); None when the output ended or
        ``timeout_s`` passed without one."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while b"\n" not in self._data:
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    return None
                self._changed.wait(left)
            return bytes(self._data).split(b"\n", 1)[0].decode(errors="replace")
