"""The end of each command's ``--help``: two or three examples and the exit codes it can give,
kept as written (click's ``\\b`` marker stops it re-wrapping them)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import click

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


# The sections a fleet command's --help groups its options in, each by its long flag; an option
# of no section is listed last under "Other options".
REACH = ("Reaching the nodes", ("--hosts", "--here", "--host", "--simulate", "--fanout", "--host-timeout",
                                "--ssh-config", "--identity", "--user", "--known-hosts", "--accept-new-host-keys",
                                "--connect-timeout", "--launcher", "--launcher-fallback", "--slurm-bundle-dir",
                                "--python", "--max-output-mib", "--max-line-kib"))
PROBES = ("Probes", ("--probes", "--duration", "--max-gpu-mem", "--dtype", "--sequential", "--deadline", "--pause",
                     "--budget", "--suspects", "--reference-peers", "--history"))
JUDGING = ("Judging", ("--thresholds", "--baseline", "--no-retest"))
LINKS = ("Links between nodes", ("--links", "--no-links", "--net-backend", "--net-address", "--net-duration",
                                 "--net-streams", "--net-line-rate", "--screen-stride", "--net-allow-socket",
                                 "--topology"))
OUTPUTS = ("Outputs", ("--json", "--jsonl", "--json-detail", "--prom-file", "--exclude-file", "--store", "--no-store",
                       "--quiet", "--verbose", "--drain", "--undrain", "--scontrol"))
FLEET_SECTIONS = (REACH, PROBES, LINKS, JUDGING, OUTPUTS)


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options in ``sections`` ((title, long flags), in
    order), then any others under "Other options"."""

    def __init__(self, *args: Any, sections: Sequence[tuple[str, Sequence[str]]] = FLEET_SECTIONS,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                rows[_long_flag(param)] = record
        for title, flags in self.sections:
            listed = [rows.pop(flag) for flag in flags if flag in rows]
            if listed:
                with formatter.section(title):
                    formatter.write_dl(listed)
        if rows:
            with formatter.section("Other options"):
                formatter.write_dl(list(rows.values()))


def _long_flag(param: click.Parameter) -> str:
    """``--identity`` for ``-i, --identity``: the flag the sections name an option by."""
    flags = [flag for flag in getattr(param, "opts", ()) if flag.startswith("--")]
    return flags[0] if flags else (param.name or "")


class WholeHelpGroup(click.Group):
    """A group whose command list gives each command's first sentence whole, wrapped to the
    terminal, never cut with "…" (click cuts it at 45 characters)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, command.get_short_help_str(limit=10_000)) for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
