"""What the libraries gpudiag uses (paramiko, above all) log, on stderr at the verbosity asked.

Without a handler of its own, Python prints a library's warnings and errors as they come: a sweep
of 48 hung hosts printed paramiko's 20-line traceback for each, even with ``-q``. Here every
record is one line that names its host where it has one (gpudiag.transport.hosttransport), its
text made safe as a node's is (a server's banner is the node's text):

- ``-q``: nothing but a library's critical failure (a host's failure is its status in the
  document and the report already);
- default: warnings and errors, one line each (paramiko's one for a host it could not
  connect to);
- ``-v``: and what the libraries tell (connections made, keys tried);
- ``-vv``: everything they log, debug detail and tracebacks included, each record whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..schema.text import REASON_CHARS, clean_text

F = TypeVar("F", bound=Callable[..., Any])

VERBOSE_HELP = ("Say more of what the SSH library does on stderr: -v its connections and logins, -vv debug "
                "detail with tracebacks (default: its warnings and errors, one line each; -q: none).")


def verbose_option(function: F) -> F:
    """``-v/--verbose`` (repeatable): the command's ``verbose`` count."""
    return click.option("-v", "--verbose", count=True, help=VERBOSE_HELP)(function)


def library_level(quiet: bool, verbose: int) -> int:
    """The lowest level of a library's record that is shown."""
    if verbose >= 2:
        return logging.DEBUG
    if verbose == 1:
        return logging.INFO
    return logging.CRITICAL if quiet else logging.WARNING


def configure_logging(quiet: bool = False, verbose: int = 0) -> None:
    """Send every logger's records to stderr at the level ``quiet`` and ``verbose`` ask for,
    replacing what an earlier call set up (the root logger keeps any other handler)."""
    root = logging.getLogger()
    for handler in [handler for handler in root.handlers if isinstance(handler, _StderrLines)]:
        root.removeHandler(handler)
    level = library_level(quiet, verbose)
    handler = _StderrLines(whole=verbose >= 2)
    handler.setLevel(level)
    root.addHandler(handler)
    root.setLevel(level)  # below it, libraries do not even build their records


class _StderrLines(logging.Handler):
    """Each record on stderr as it is now (click's: a test's captured stream too): ``gpudiag:
    HOST: LOGGER: message``, its first line alone unless ``whole`` (then with its traceback)."""

    def __init__(self, whole: bool) -> None:
        super().__init__()
        self._whole = whole

    def format(self, record: logging.LogRecord) -> str:
        host = getattr(record, "host", None)
        where = f"{host}: " if isinstance(host, str) and host else ""
        lines = [line for line in record.getMessage().splitlines() if line.strip()] or [""]
        if not self._whole:
            return f"gpudiag: {where}{record.name}: {clean_text(lines[0].strip(), REASON_CHARS)}"
        if record.exc_info:
            lines += logging.Formatter().formatException(record.exc_info).splitlines()
        return "\n".join(f"gpudiag: {where}{record.name}: {clean_text(line, REASON_CHARS)}" for line in lines)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(self.format(record), err=True)
        except Exception:  # noqa: BLE001 - logging's own rule: a record that cannot be written never ends the run
            self.handleError(record)
