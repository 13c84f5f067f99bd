"""Where report text goes: every command's findings and summaries are printed here.

On a terminal each long line is wrapped to the terminal's width with a hanging indent, never inside
a host name or a number with its unit (gpudiag.report.wrap); off a terminal (a pipe, a file, a log
collector) nothing is wrapped, so one finding is one line and ``grep node017`` finds all of it.
"""

from __future__ import annotations

import shutil
import sys

import click

from ..report.wrap import wrap_text


def echo_text(text: str, *, err: bool = False) -> None:
    """Print ``text`` (lines, ending in a newline or not) to stdout, or stderr with ``err``."""
    stream = sys.stderr if err else sys.stdout
    if stream.isatty():
        text = wrap_text(text, shutil.get_terminal_size().columns)
    click.echo(text, nl=not text.endswith("\n"), err=err)
