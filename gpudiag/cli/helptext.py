"""The end of each command's ``--help``: two or three examples and the exit codes it can give,
kept as written (click's ``\\b`` marker stops it re-wrapping them)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from ..exitcodes import ExitCode

# Columns the epilog keeps within (it is never re-wrapped): an 80-column terminal, less click's indent.
WIDTH = 78

# Every command can end in these two: gpudiag's own failure and an interrupt (cli/main.py).
INTERNAL_ROW = (ExitCode.INTERNAL, "gpudiag itself failed (inconclusive, never a finding about a node)")
INTERRUPTED_ROW = (ExitCode.INTERRUPTED, "interrupted (what finished is still written)")
USAGE_ROW = (ExitCode.USAGE, "bad input: the one line on stderr names the option or file and the fix")


def epilog(examples: Sequence[str], codes: Sequence[tuple[ExitCode, str]]) -> str:
    """The epilog of a command: ``examples`` (command lines, a ``  # why`` after one allowed)
    under "Examples:", then ``codes`` under "Exit codes:", with the two every command has where
    ``codes`` does not say them in its own words."""
    given = {code for code, _ in codes}
    rows = [*codes, *(row for row in (INTERNAL_ROW, INTERRUPTED_ROW) if row[0] not in given)]
    example_lines = "\n".join(f"  {line}" for line in examples)
    code_lines = "\n".join(textwrap.fill(meaning, WIDTH, initial_indent=f"  {int(code):<4} ",
                                          subsequent_indent=" " * 7) for code, meaning in rows)
    return f"\b\nExamples:\n{example_lines}\n\n\b\nExit codes:\n{code_lines}"


# The exit codes of the commands that read the store or a file and judge nothing.
DONE_CODES = ((ExitCode.OK, "done"), USAGE_ROW)

FLEET_CODES = (
    (ExitCode.OK, "every host checked, nothing failed"),
    (ExitCode.FAIL, "a fail finding: act on it"),
    USAGE_ROW,
    (ExitCode.UNCHECKED, "no fail finding, but a host, GPU or measurement could not be checked or compared"),
)
