"""How the controller reaches a node and runs the probe bundle there.

Every transport (``local``: this machine; ``ssh``: paramiko; a simulated fleet) hands out
``Session``s through a ``Connector``. A failure to reach or trust a node is a
``TransportError`` whose ``status`` is the host status of the sweep document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from ..bundle import Bundle


@dataclass(frozen=True)
class CommandResult:
    """What one command did: exit status (None when it was killed), output, and wall time (s)."""

    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float


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


class Session(Protocol):
    """A connection to one node, reused for every command a sweep sends there."""

    def prepare(self, bundle: Bundle) -> None:
        """Make the probe bundle available on the node (a no-op where it already is)."""
        ...

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` in the node's bundle folder; it is killed on the node after ``timeout_s``."""
        ...

    def cancel(self) -> None:
        """End what this session started on the node (from another thread, on Ctrl-C)."""
        ...

    def close(self) -> None:
        ...
