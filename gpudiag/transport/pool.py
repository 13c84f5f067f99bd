"""One connection per host for a whole sweep: the node probes, the re-tests and every link
round of a host go over the same session, opened once (a 1,000-node sweep must not log in to
every node three times)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from ..bundle import Bundle
from ..hosts import HostSpec
from . import CommandResult, RunningCommand, Session
from .cancel import cancel_all

# After Ctrl-C, how long the sessions get to end their commands on the nodes.
CANCEL_WAIT_S = 15.0


class _Opener(Protocol):
    """What the pool opens sessions with (gpudiag.sweep.Connector)."""

    def connect(self, host: HostSpec) -> Session: ...

    def close(self) -> None: ...


class SessionPool:
    """Hands out the host's open session, opening it on first use; ``close`` ends them all."""

    def __init__(self, connector: _Opener) -> None:
        self._connector = connector
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}
        self._sessions: dict[str, Session] = {}

    def connect(self, host: HostSpec) -> Session:
        """The open session on ``host`` (a new one when there is none or it broke). Raises
        TransportError when the host cannot be reached. Closing what this returns keeps the
        connection for the next phase."""
        with self._lock:
            host_lock = self._host_locks.setdefault(host.label, threading.Lock())
        with host_lock:
            session = self._sessions.get(host.label)
            if session is None or not session.is_open():
                if session is not None:
                    session.close()
                session = self._connector.connect(host)
                with self._lock:
                    self._sessions[host.label] = session
        return _Kept(session)

    def session(self, label: str) -> Session | None:
        """The open session on the host labelled ``label``, or None (never connected, or lost)."""
        with self._lock:
            session = self._sessions.get(label)
        return _Kept(session) if session is not None and session.is_open() else None

    def cancel(self, timeout_s: float = CANCEL_WAIT_S) -> None:
        """End every command any session started (Ctrl-C), on all hosts at once, waiting at most
        ``timeout_s`` seconds."""
        with self._lock:
            sessions = list(self._sessions.values())
        cancel_all(sessions, timeout_s)

    def close(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.close()
        self._connector.close()


class _Kept:
    """A pooled session whose ``close`` leaves the connection open for the next phase."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def prepare(self, bundle: Bundle) -> None:
        self._session.prepare(bundle)

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        return self._session.run(argv, timeout_s)

    def start(self, argv: Sequence[str], timeout_s: float) -> RunningCommand:
        return self._session.start(argv, timeout_s)

    def is_open(self) -> bool:
        return self._session.is_open()

    def cancel(self) -> None:
        self._session.cancel()

    def close(self) -> None:
        return None
