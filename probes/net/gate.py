"""The pair server's door: the connections its listener accepts, each read on one selector thread
until its first line is whole (a client's hello, or a data connection's greeting), all at once.

Anyone who reaches the port can connect without the pair secret, stay silent, or send a byte a
second; none of that may keep the real client out (issue 30). So:

- a first line has ``line_s`` seconds from its connection's accept to be whole: one deadline for the
  whole line, never one per read;
- at most ``max_pending`` connections wait for their first line at once; a newcomer past that closes
  the one that has waited longest (never the newcomer): however many strangers came before the real
  client, they cannot keep it out, and each waits ``line_s`` at most;
- the connections of the ``favoured`` address (the proved client's, for its data connections) wait
  in a set of their own: strangers from elsewhere never crowd them out;
- every waiting connection is read as its bytes come (a stalled one holds up nobody), and exactly up
  to its newline: what follows the line stays in the socket for its reader.

Standard library only (the node bundle's rule).
"""

from __future__ import annotations

import collections
import selectors
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..context import Deadline

# Connections a gate accepts in one go before it reads the waiting ones again.
ACCEPT_BURST = 64
# Lines a process writes to stderr about dropped connections; past these, only their count.
NOTES_SHOWN = 32
# Seconds to back off when accept itself fails (out of file descriptors): no busy loop.
ACCEPT_ERROR_PAUSE_S = 0.05


@dataclass(frozen=True)
class Arrival:
    """A connection whose first line is whole: its socket (blocking again, the line read out of it),
    its peer's plain address, the line (newline included) and what ``greet`` returned with the
    greeting it was sent (None without one)."""

    sock: socket.socket
    address: str
    line: bytes
    context: Any = None


@dataclass(eq=False)
class _Waiting:
    sock: socket.socket
    address: str
    until: float
    favoured: bool
    context: Any = None
    line: bytearray = field(default_factory=bytearray)


class Notes:
    """What a server says on stderr about the connections it dropped: the first NOTES_SHOWN, then
    only how many more (a flood does not flood the controller's output too)."""

    def __init__(self, who: str = "net-server", shown: int = NOTES_SHOWN) -> None:
        self.who = who
        self._shown = shown
        self.hidden = 0

    def say(self, text: str) -> None:
        if self._shown > 0:
            self._shown -= 1
            print(f"{self.who}: {text}", file=sys.stderr)
        else:
            self.hidden += 1

    def summary(self) -> None:
        if self.hidden:
            print(f"{self.who}: dropped {self.hidden} more connection(s) (not shown one by one)", file=sys.stderr)
            self.hidden = 0


# The process's notes: one pair server, one test.
NOTES = Notes()


class Gate:
    """First lines of the connections ``listener`` accepts (see the module docstring). ``greet``
    gives the bytes to send each new connection at once, and a context its Arrival carries (the
    server's nonce); ``line_bytes`` bounds a line (newline included). Use :meth:`next_line` until
    the caller has what it wants, then :meth:`close` (or ``with``), which closes every connection
    still waiting and gives the listener its blocking mode back; the listener stays open."""

    def __init__(self, listener: socket.socket, line_bytes: int, line_s: float, max_pending: int,
                 greet: Callable[[], tuple[bytes, Any]] | None = None, favoured: str | None = None,
                 notes: Notes | None = None, plain: Callable[[str], str] = str) -> None:
        self._listener = listener
        self._timeout = listener.gettimeout()
        self._line_bytes = line_bytes
        self._line_s = line_s
        self._max_pending = max_pending
        self._greet = greet
        self._favoured = favoured
        self._plain = plain
        self.notes = notes or NOTES
        # oldest first, in each set: the strangers', the favoured address's
        self._waiting: dict[bool, dict[socket.socket, _Waiting]] = {False: {}, True: {}}
        self._done: collections.deque[Arrival] = collections.deque()
        self._selector = selectors.DefaultSelector()
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, None)

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def pending(self) -> int:
        """Connections waiting for their first line now."""
        return sum(len(waiting) for waiting in self._waiting.values())

    def next_line(self, deadline: Deadline, why: str = "no connection sent its first line in time") -> Arrival:
        """The next connection whose first line is whole. Raises TimeoutError(``why``) at ``deadline``."""
        while not self._done:
            now = time.monotonic()
            self._expire(now)
            left = deadline.left_s()
            if left <= 0:
                raise TimeoutError(why)
            for key, _ in self._selector.select(min(left, self._next_expiry(now))):
                if key.data is None:
                    self._accept()
                elif key.data.sock in self._waiting[key.data.favoured]:  # not crowded out meanwhile
                    self._read(key.data)
        return self._done.popleft()

    def close(self) -> None:
        for waiting in [*self._waiting[False].values(), *self._waiting[True].values()]:
            self._release(waiting)
            waiting.sock.close()
        while self._done:
            self._done.popleft().sock.close()
        self._selector.close()
        try:
            self._listener.settimeout(self._timeout)
        except OSError:
            pass  # closed meanwhile
        self.notes.summary()

    # --- inside -----------------------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                conn, address = self._listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as error:  # EMFILE and the like: the next connection gets its chance later
                self.notes.say(f"cannot accept a connection: {error.strerror or error}")
                time.sleep(ACCEPT_ERROR_PAUSE_S)
                return
            self._admit(conn, self._plain(str(address[0])))

    def _admit(self, conn: socket.socket, address: str) -> None:
        favoured = self._favoured is not None and address == self._favoured
        waiting_set = self._waiting[favoured]
        if len(waiting_set) >= self._max_pending:
            oldest = next(iter(waiting_set.values()))
            self._drop(oldest, f"crowded out after {self._line_s - (oldest.until - time.monotonic()):.1f} s "
                               f"without a whole first line ({self._max_pending} connections waiting)")
        conn.setblocking(False)
        context = None
        if self._greet is not None:
            data, context = self._greet()
            try:
                sent = conn.send(data)
            except OSError:
                sent = -1
            if sent != len(data):  # a new connection's send buffer is empty: it takes a greeting whole
                self.notes.say(f"dropped a connection from {address}: it could not take the greeting")
                conn.close()
                return
        waiting = _Waiting(conn, address, time.monotonic() + self._line_s, favoured, context)
        waiting_set[conn] = waiting
        self._selector.register(conn, selectors.EVENT_READ, waiting)
        self._read(waiting)  # a data greeting often comes with its connection

    def _read(self, waiting: _Waiting) -> None:
        try:
            # a peek first, so that nothing past the newline is taken from the socket
            seen = waiting.sock.recv(self._line_bytes - len(waiting.line), socket.MSG_PEEK)
            if seen:
                end = seen.find(b"\n")
                waiting.line += waiting.sock.recv(len(seen) if end < 0 else end + 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._drop(waiting, f"{error.strerror or error}")
            return
        if not seen:
            self._drop(waiting, "closed before its first line was whole")
        elif waiting.line.endswith(b"\n"):
            self._release(waiting)
            waiting.sock.setblocking(True)
            self._done.append(Arrival(waiting.sock, waiting.address, bytes(waiting.line), waiting.context))
        elif len(waiting.line) >= self._line_bytes:
            self._drop(waiting, f"a first line longer than {self._line_bytes} bytes")

    def _expire(self, now: float) -> None:
        for waiting_set in self._waiting.values():
            while waiting_set:
                oldest = next(iter(waiting_set.values()))
                if oldest.until > now:
                    break  # each set is in accept order: its deadlines too
                self._drop(oldest, f"no whole first line within {self._line_s:g} s "
                                   f"({len(oldest.line)} bytes of it)")

    def _next_expiry(self, now: float) -> float:
        firsts = [next(iter(waiting_set.values())).until for waiting_set in self._waiting.values() if waiting_set]
        return max(0.0, min(firsts) - now) if firsts else float("inf")

    def _release(self, waiting: _Waiting) -> None:
        self._waiting[waiting.favoured].pop(waiting.sock, None)
        try:
            self._selector.unregister(waiting.sock)
        except (KeyError, ValueError):
            pass

    def _drop(self, waiting: _Waiting, why: str) -> None:
        self._release(waiting)
        waiting.sock.close()
        self.notes.say(f"dropped a connection from {waiting.address}: {why}")
