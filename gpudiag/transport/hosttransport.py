"""A paramiko Transport whose log records say which host they are about.

paramiko logs a failed connection as one ERROR line and then its traceback, one ERROR record per
line of it (twenty lines for a host that never sends its banner). Here every record of the
connection carries its host's label (``record.host``), and a traceback is one DEBUG record: the
command line shows it only when asked to (gpudiag.cli.logs), and one host's failure is one line.
Once gpudiag has closed the connection, or the host's time is up (``quiet_from``), what paramiko's
thread says of its end is DEBUG too: the host's outcome (``timeout``) says what happened. The time
is checked when the record is made, so a reader thread that gives up on the banner just before
the connecting thread closes it (a loaded machine) is quiet as well.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import paramiko

from .jump import Sock


class HostTransport(paramiko.Transport):
    """paramiko's Transport over ``sock`` to the host labelled ``label``. From ``quiet_from`` (on
    time.monotonic) where given, the moment the connecting counts as out of the host's time, its
    records are DEBUG."""

    def __init__(self, sock: Sock, label: str, quiet_from: float | None = None) -> None:
        super().__init__(sock)
        self.host_label = label
        self.name = f"ssh {label}"  # its reader thread's name, in any record a library logs there
        self._closed_here = False
        self._quiet_from = quiet_from

    def close(self) -> None:
        self._closed_here = True
        super().close()

    def _log(self, level: int, msg: Any, *args: Any) -> None:
        # paramiko's own hook: every message of the transport, its authentication and its
        # key exchange comes through here; a list is a traceback, one line per item
        if isinstance(msg, list):
            level, msg, args = logging.DEBUG, "\n".join(str(line) for line in msg).rstrip(), ()
        if self._closed_here or (self._quiet_from is not None and time.monotonic() >= self._quiet_from):
            level = min(level, logging.DEBUG)
        self.logger.log(level, msg, *args, extra={"host": self.host_label})
