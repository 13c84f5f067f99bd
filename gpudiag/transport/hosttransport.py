"""A paramiko Transport whose log records say which host they are about.

paramiko logs a failed connection as one ERROR line and then its traceback, one ERROR record per
line of it (twenty lines for a host that never sends its banner). Here every record of the
connection carries its host's label (``record.host``), and a traceback is one DEBUG record: the
command line shows it only when asked to (gpudiag.cli.logs), and one host's failure is one line.
Once gpudiag has closed the connection (the host's time was up), what paramiko's thread says of
its end is DEBUG too: the host's outcome says what happened.
"""

from __future__ import annotations

import logging
from typing import Any

import paramiko

from .jump import Sock


class HostTransport(paramiko.Transport):
    """paramiko's Transport over ``sock`` to the host labelled ``label``."""

    def __init__(self, sock: Sock, label: str) -> None:
        super().__init__(sock)
        self.host_label = label
        self.name = f"ssh {label}"  # its reader thread's name, in any record a library logs there
        self._closed_here = False

    def close(self) -> None:
        self._closed_here = True
        super().close()

    def _log(self, level: int, msg: Any, *args: Any) -> None:
        # paramiko's own hook: every message of the transport, its authentication and its
        # key exchange comes through here; a list is a traceback, one line per item
        if isinstance(msg, list):
            level, msg, args = logging.DEBUG, "\n".join(str(line) for line in msg).rstrip(), ()
        if self._closed_here:
            level = min(level, logging.DEBUG)
        self.logger.log(level, msg, *args, extra={"host": self.host_label})
