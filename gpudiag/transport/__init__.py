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
from ..hosts import HostSpec


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


class ConnectTimedOut(TransportError):
    """The host's time ran out while it was still being connected to or logged into (a node that
    accepts and never answers): the host is ``timeout``."""

    status = "timeout"


class RunningCommand(Protocol):
    """A command started on a node that goes on while the controller does other things (a pair
    server: its first line says where it listens, then it serves the client started elsewhere).

    Its stdin stays open while the controller holds it, and reaches EOF when the controller
    ends it or dies (SIGKILL included): a command that must not outlive its controller reads
    stdin and ends at EOF. Its stdout is read through a ``BoundedOutput`` (the session's caps):
    past a cap it is ended and ``finish`` says so in ``CommandResult.overflow``."""

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

    def send_line(self, text: str) -> None:
        """Write ``text`` and a newline to its stdin (a secret that must not show on a command
        line, where any user of the node can read it). Raises ValueError when ``text`` holds a
        line break, TransportError when its stdin is closed (it ended, or the connection went)."""
        ...


class Session(Protocol):
    """A connection to one node, reused for every command a sweep sends there."""

    def prepare(self, bundle: Bundle) -> None:
        """Make the probe bundle available on the node (a no-op where it already is)."""
        ...

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` in the node's bundle folder; it is killed on the node after ``timeout_s``.
        Nothing is written to its stdin: /dev/null on this machine, over SSH the channel's (open
        until the command ends or the connection goes, as for ``start``). Its output is read to
        the end (EOF of stdout and stderr, then its exit status), within the session's
        OutputLimits: past a cap the command is ended and the result's ``overflow`` names it."""
        ...

    def start(self, argv: Sequence[str], timeout_s: float) -> RunningCommand:
        """Start ``argv`` like ``run`` and return at once; the node ends it after ``timeout_s``.
        Unlike ``run``, its stdin is a live pipe from this controller: open while the controller
        holds the command, at EOF once it is finished, cancelled, or the controller is gone."""
        ...

    def is_open(self) -> bool:
        """False once the connection is gone (a new session is needed)."""
        ...

    def cancel(self) -> None:
        """End what this session started on the node (from another thread: Ctrl-C, or a host past
        its time limit), a bundle copy in progress included."""
        ...

    def close(self) -> None:
        ...


class Connector(Protocol):
    """Opens a session on a host; raises TransportError when it cannot. Every way of reaching
    nodes is one: SSH (a pool of them), this machine, srun, a simulated fleet."""

    def connect(self, host: HostSpec, within_s: float | None = None) -> Session:
        """A session on ``host``. ``within_s``: the seconds the host has left (its time limit in
        a sweep); every wait of the connecting (TCP, the SSH banner and key exchange, each
        login attempt) ends by then, and ConnectTimedOut says so. None: the transport's own
        timeouts alone."""
        ...

    def close(self) -> None: ...
