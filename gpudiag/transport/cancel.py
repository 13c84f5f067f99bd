"""Ending what runs on many nodes at once, after Ctrl-C.

Cancelling a session sends a ``kill`` over its connection, which can take seconds on a slow or
dying host; one host after another, 2,000 of them would keep an interrupted sweep silent for
minutes. ``cancel_all`` cancels them all at once and waits a bounded time: a host that does not
answer in time is left to the deadline every remote command runs under on the node itself.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from . import TransportError

# Cancels in flight at once (each is one SSH exec of ``kill``).
MAX_PARALLEL = 64


class Cancellable(Protocol):
    def cancel(self) -> None: ...


def cancel_all(items: Sequence[Cancellable], timeout_s: float) -> int:
    """Call ``cancel()`` on every item, at most MAX_PARALLEL at once, and wait at most
    ``timeout_s`` seconds for them; returns how many finished in that time. The threads are
    daemons: one stuck on a dead connection never keeps the process from exiting. An item whose
    connection broke meanwhile counts as finished: there is nothing left to end through it (the
    node's own deadline ends what it ran)."""
    if not items:
        return 0
    waiting: queue.SimpleQueue[Cancellable] = queue.SimpleQueue()
    for item in items:
        waiting.put(item)
    finished = queue.SimpleQueue[None]()

    def work() -> None:
        while True:
            try:
                item = waiting.get_nowait()
            except queue.Empty:
                return
            try:
                item.cancel()
            except (OSError, TransportError):
                pass
            finally:
                finished.put(None)

    for _ in range(min(MAX_PARALLEL, len(items))):
        threading.Thread(target=work, name="cancel", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    count = 0
    while count < len(items):
        try:
            finished.get(timeout=max(0.001, deadline - time.monotonic()))
        except queue.Empty:
            break
        count += 1
    return count
