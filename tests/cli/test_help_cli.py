"""Every command's and subcommand's --help ends with examples of it and its exit codes, kept
within 80 columns, and shows no reStructuredText markup."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

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


def _help(*path: str, columns: int = 80) -> str:
    result = CliRunner().invoke(main, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def _sections(text: str) -> dict[str, list[str]]:
    """Each section of a help ("Probes:") and the options listed in it, by their long flag."""
    found: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][A-Za-z ]+:", line):
            current = found.setdefault(line[:-1], [])
        elif current is not None and (match := re.match(r"  (?:-\w, )?(--[\w-]+)", line)):
            current.append(match.group(1))
    return found


def test_the_fleet_commands_group_their_options_by_what_they_are_for():
    for path, wanted in ((("sweep",), ["Reaching the nodes", "Probes", "Links between nodes", "Judging", "Outputs"]),
                         (("preflight",), ["Reaching the nodes", "Probes", "Links between nodes", "Judging",
                                           "Outputs"]),
                         (("triage",), ["Reaching the nodes", "Probes", "Links between nodes", "Judging", "Outputs"])):
        sections = _sections(_help(*path))
        assert [title for title in sections if title != "Other options"] == wanted, (path, list(sections))
        assert sections["Other options"] == ["--help"], path  # every option has its section
        listed = [flag for flags in sections.values() for flag in flags]
        command = main.commands[path[0]]
        assert sorted(listed) == sorted([next(flag for flag in p.opts if flag.startswith("--"))
                                         for p in command.params if isinstance(p, click.Option)] + ["--help"])
    sweep = _sections(_help("sweep"))
    assert {"--hosts", "--identity", "--fanout"} <= set(sweep["Reaching the nodes"])
    assert {"--links", "--topology", "--net-backend"} <= set(sweep["Links between nodes"])
    assert {"--json", "--prom-file", "--exclude-file", "--store"} <= set(sweep["Outputs"])


def test_every_command_list_gives_each_command_whole():
    for path in ((), ("baseline",), ("store",)):
        text = _help(*path)
        assert "…" not in text and "..." not in text.split("Commands:")[1].split("Examples:")[0], path
        group = main if not path else main.commands[path[0]]
        listed = [line.split()[0] for line in text.split("Commands:\n")[1].split("\n\n")[0].splitlines()
                  if line.startswith("  ") and not line.startswith("   ")]
        assert listed == sorted(group.commands), path


def test_the_readme_gives_the_exit_codes_the_probes_help_gives():
    codes = {int(m.group(1)) for line in _part(_help("probe"), "Exit codes") if (m := re.match(r"\s+(\d+)\s", line))}
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    sentence = readme[readme.index("`probe` measures and judges nothing"):].split(". `history`")[0]
    assert {int(code) for code in re.findall(r"`(\d+)`", sentence)} == codes


def test_a_probe_list_is_read_the_same_way_by_probe_and_sweep_and_a_wrong_separator_says_which_are_right(tmp_path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text('{"nodes": 2}')
    for args in (["probe", "gemm;membw"], ["sweep", "--simulate", str(fleet), "--probes", "gemm;membw", "--no-store"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2
        assert "unknown probe 'gemm;membw'" in result.output and "(separated by commas or spaces)" in result.output
