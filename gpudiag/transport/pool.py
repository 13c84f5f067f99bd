"""One connection per host for a whole sweep: the node probes, the re-tests and every link
round of a host go over the same session, opened once (a 1,000-node sweep must not log in to
every node three times)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ..bundle import Bundle
from ..hosts import HostSpec
from . import CommandResult, Connector, RunningCommand, Session, TransportError
from .cancel import cancel_all

# After Ctrl-C, how long the sessions get to end their commands on the nodes.
CANCEL_WAIT_S = 15.0


class SessionPool:
    """Hands out the host's open session, opening it on first use; ``close`` ends them all.

    ``max_open`` (None: no limit) bounds the connections kept open (the open-file limit: see
    gpudiag.transport.fdlimit): opening one more first closes the connection idle longest — no session of
    it handed out and not yet closed — and a host whose connection was closed so is connected
    again when it is next needed."""

    def __init__(self, connector: Connector, max_open: int | None = None) -> None:
        self._connector = connector
        self._max_open = max_open
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}
        self._sessions: dict[str, Session] = {}
        self._specs: dict[str, HostSpec] = {}
        self._users: dict[str, int] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()  # open, unused: the longest idle first
        self._bundles: dict[str, Bundle] = {}  # what each host's session was prepared with
        self._opening = 0  # connections being opened (they count against max_open already)

    def connect(self, host: HostSpec, within_s: float | None = None) -> Session:
        """The open session on ``host`` (a new one when there is none or it broke, connected
        within ``within_s`` seconds as Connector says). Raises TransportError when the host
        cannot be reached. Closing what this returns keeps the connection for the next phase."""
        with self._lock:
            host_lock = self._host_locks.setdefault(host.label, threading.Lock())
            self._specs[host.label] = host
        with host_lock:
            session = self._sessions.get(host.label)
            if session is None or not session.is_open():
                if session is not None:
                    session.close()
                self._make_room(host.label)
                try:
                    session = self._open(host, within_s)
                finally:
                    with self._lock:
                        self._opening -= 1
                with self._lock:
                    self._sessions[host.label] = session
            with self._lock:
                self._users[host.label] = self._users.get(host.label, 0) + 1
                self._idle.pop(host.label, None)
        return _Kept(session, lambda: self._release(host.label), lambda bundle: self._prepared(host.label, bundle))

    def session(self, label: str) -> Session | None:
        """The session on the host labelled ``label``, connected again if its connection was
        lost or closed for room; None for a host never connected, or one that cannot be reached
        now. Close it when done."""
        with self._lock:
            spec = self._specs.get(label)
        if spec is None:
            return None
        try:
            return self.connect(spec)
        except TransportError:
            return None

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
            self._idle.clear()
        for session in sessions:
            session.close()
        self._connector.close()

    def _open(self, host: HostSpec, within_s: float | None) -> Session:
        session = self._connector.connect(host, within_s)
        with self._lock:
            bundle = self._bundles.get(host.label)
        if bundle is not None:  # connected again: its commands run in the bundle's folder
            try:
                session.prepare(bundle)
            except TransportError:
                session.close()
                raise
        return session

    def _prepared(self, label: str, bundle: Bundle) -> None:
        with self._lock:
            self._bundles[label] = bundle

    def _release(self, label: str) -> None:
        with self._lock:
            users = self._users.get(label, 0) - 1
            self._users[label] = max(0, users)
            if users <= 0 and label in self._sessions:
                self._idle[label] = None
                self._idle.move_to_end(label)

    def _make_room(self, label: str) -> None:
        """Close idle connections until one more fits under ``max_open`` (in-use ones stay), and
        count it as being opened."""
        closing = []
        with self._lock:
            self._opening += 1
            while self._max_open is not None and len(self._sessions) + self._opening > self._max_open and self._idle:
                oldest, _ = self._idle.popitem(last=False)
                if oldest != label:
                    closing.append(self._sessions.pop(oldest))
        for session in closing:
            session.close()


class _Kept:
    """A pooled session whose ``close`` hands it back to the pool (the connection stays open for
    the next phase, unless the pool needs the room)."""

    def __init__(self, session: Session, release: Callable[[], None], prepared: Callable[[Bundle], None]) -> None:
        self._session = session
        self._release: Callable[[], None] | None = release
        self._prepared = prepared

    def prepare(self, bundle: Bundle) -> None:
        self._session.prepare(bundle)
        self._prepared(bundle)

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        return self._session.run(argv, timeout_s)

    def start(self, argv: Sequence[str], timeout_s: float) -> RunningCommand:
        return self._session.start(argv, timeout_s)

    def is_open(self) -> bool:
        return self._session.is_open()

    def cancel(self) -> None:
        self._session.cancel()

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:  # once, however often it is closed
            release()
