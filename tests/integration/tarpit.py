"""Hung SSH hosts on loopback addresses, for tests and benchmarks of how a sweep treats them.

Two kinds, as a fleet's hung nodes are, and a broken one:
- ``silent``: a port that accepts the TCP connection and never sends the SSH banner (sshd
  stuck before its banner, a node whose kernel answers and nothing above it does): each
  connection is accepted, held open and never written to.
- ``deaf``: a port that never accepts: its listen queue is kept full (one connection of the
  tarpit's own), so the kernel drops every SYN and the client's connect waits.
- ``garbled``: not a hung host but a broken one: it answers with lines that are no SSH banner,
  a terminal escape sequence in each (paramiko gives up after 100 lines).

``arrivals`` gives when each connection reached a silent or garbled port (monotonic seconds):
the hosts a sweep started, and when.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from pathlib import Path
from types import TracebackType

SILENT = "silent"
DEAF = "deaf"
GARBLED = "garbled"
# What a garbled host sends: no "SSH-" line among them, and an escape sequence that sets a terminal's title.
GARBLE = b"\x1b]0;owned\x07not an ssh server\r\n" * 101
# Queued connections one silent port holds: a host is connected to once per sweep.
SILENT_BACKLOG = 64


class Tarpit:
    """``count`` hosts on addresses ``127.0.<subnet>.1`` on, all on one port as a fleet's are (their
    labels fold as a fleet's do): ``garbled`` of them garbled, then silent ones, and the last
    ``deaf_share`` of them deaf. A context manager; ``close`` ends every socket it opened."""

    def __init__(self, count: int, *, deaf_share: float = 0.5, garbled: int = 0, subnet: int = 77) -> None:
        self._count = count
        self._deaf = round(count * deaf_share)
        self._garbled = garbled
        self._subnet = subnet
        self._sockets: list[socket.socket] = []
        self._silent: list[socket.socket] = []
        self._garbling: set[socket.socket] = set()
        self.hosts: list[tuple[str, int, str]] = []  # (address, port, kind)
        self._arrivals: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        self._port = 0  # the first socket's, then every host's where it is free

    def __enter__(self) -> Tarpit:
        for index in range(self._count):
            address = f"127.0.{self._subnet + index // 250}.{index % 250 + 1}"
            kind = DEAF if index >= self._count - self._deaf else GARBLED if index < self._garbled else SILENT
            port = self._deaf_port(address) if kind == DEAF else self._silent_port(address, kind == GARBLED)
            self.hosts.append((address, port, kind))
        self._watch = threading.Thread(target=self._note_arrivals, name="tarpit", daemon=True)
        self._watch.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(5.0)
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            sock.close()

    def arrivals(self) -> list[float]:
        """When each connection reached a silent or garbled port (time.monotonic), in order."""
        with self._lock:
            return sorted(self._arrivals)

    def write_hosts_file(self, path: Path) -> Path:
        """One ``address:port`` line per hung host."""
        path.write_text("".join(f"{address}:{port}\n" for address, port, _ in self.hosts))
        return path

    def _bound(self, address: str) -> socket.socket:
        """A socket bound to ``address`` on the tarpit's port (another where that one is taken)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((address, self._port))
        except OSError:
            sock.bind((address, 0))
        self._port = self._port or int(sock.getsockname()[1])
        return sock

    def _silent_port(self, address: str, garbled: bool) -> int:
        sock = self._bound(address)
        sock.listen(SILENT_BACKLOG)
        self._sockets.append(sock)
        self._silent.append(sock)
        if garbled:
            self._garbling.add(sock)
        return int(sock.getsockname()[1])

    def _deaf_port(self, address: str) -> int:
        sock = self._bound(address)
        sock.listen(0)  # a queue of one: the filler below takes it
        port = int(sock.getsockname()[1])
        filler = socket.create_connection((address, port), timeout=5.0)
        self._sockets += [sock, filler]
        return port

    def _note_arrivals(self) -> None:
        """Hold every connection that reaches a silent port, until ``close``."""
        with selectors.DefaultSelector() as selector:  # epoll: past select's 1,024 descriptors
            for sock in self._silent:
                selector.register(sock, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in selector.select(0.1):
                    assert isinstance(key.fileobj, socket.socket)
                    self._hold(key.fileobj)

    def _hold(self, sock: socket.socket) -> None:
        """Accept a connection to a silent port, note when, and keep it open and silent (a
        garbled port's: after its garble)."""
        try:
            connection, _ = sock.accept()
            if sock in self._garbling:
                connection.sendall(GARBLE)
        except OSError:
            return
        with self._lock:
            self._arrivals.append(time.monotonic())
            self._sockets.append(connection)  # held open, never written to
