"""Every command's and subcommand's --help ends with examples of it and its exit codes, kept
within 80 columns, and shows no reStructuredText markup."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.exitcodes import ExitCode


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def _part(text: str, title: str) -> list[str]:
    """The lines of the help's part under ``title`` up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(f"  {title}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_every_help_has_examples_of_the_command_and_its_exit_codes_and_no_rst():
    paths = list(_commands(main))
    assert {("probe",), ("sweep",), ("preflight",), ("baseline", "import"), ("store", "prune")} <= set(paths)
    for path in paths:
        result = CliRunner().invoke(main, [*path, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, (path, result.output)
        text = result.output
        assert "``" not in text, path
        examples = _part(text, "Examples")
        assert 2 <= len(examples) <= 3, (path, examples)
        assert all(line.strip().startswith(" ".join(("gpudiag", *path))) for line in examples), (path, examples)
        codes = [int(match.group(1)) for line in _part(text, "Exit codes") if (match := re.match(r"\s+(\d+)\s", line))]
        assert codes[0] == ExitCode.OK and ExitCode.USAGE in codes and ExitCode.INTERRUPTED in codes, path
        assert set(codes) <= {int(code) for code in ExitCode} and codes == sorted(codes), path
        assert all(len(line) <= 80 for line in text.splitlines()), (path, max(text.splitlines(), key=len))
