"""The command line refuses bad input before any node is touched: exit 2 and one line that
names the option or file and the fix."""

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("gpudiag: error:")]


@pytest.mark.parametrize("command", [
    ["probe", "gemm"],
    ["sweep", "--hosts", "node[1-3].invalid", "-q", "--no-store"],
    ["triage", "node1.invalid", "-q", "--no-store"],
])
def test_a_deadline_no_longer_than_the_duration_is_refused(command):
    result = CliRunner().invoke(main, [*command, "--duration", "5", "--deadline", "2"])
    assert result.exit_code == 2, result.output
    [line] = _error_lines(result.output)
    assert "--deadline 2 is not longer than --duration 5" in line and "raise --deadline" in line


def test_a_deadline_longer_than_the_duration_runs(tmp_path: Path):
    result = CliRunner().invoke(main, ["probe", "facts", "--duration", "1", "--deadline", "2"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", [
    ["sweep", "--hosts", "node[1-3].invalid", "-q", "--no-store"],
    ["preflight", "--hosts", "node[1-3].invalid", "-q", "--no-store"],
    ["triage", "node1.invalid", "-q", "--no-store"],
])
def test_a_missing_or_unreadable_identity_file_is_refused_naming_it(command, tmp_path: Path):
    result = CliRunner().invoke(main, [*command, "-i", "/missing/key"])
    assert result.exit_code == 2, result.output
    [line] = _error_lines(result.output)
    assert "-i /missing/key: no such file" in line
    folder = tmp_path / "a-folder"
    folder.mkdir()
    result = CliRunner().invoke(main, [*command, "-i", str(folder)])
    assert result.exit_code == 2 and f"-i {folder}: no such file" in result.output


@pytest.mark.parametrize("command", [
    ["sweep", "--hosts", "node[1-3].invalid", "-q", "--no-store"],
    ["preflight", "--hosts", "node[1-3].invalid", "-q", "--no-store"],
    ["triage", "node1.invalid", "-q", "--no-store"],
])
def test_a_relative_python_path_for_the_nodes_is_refused_with_the_fix(command):
    result = CliRunner().invoke(main, [*command, "--python", "venv/bin/python"])
    assert result.exit_code == 2, result.output
    [line] = _error_lines(result.output)
    assert "--python venv/bin/python: a relative path names nothing on the nodes" in line
    assert "give an absolute path" in line


def test_probe_jsonl_path_writes_the_records_and_still_prints_the_tables(tmp_path: Path):
    target = tmp_path / "records.jsonl"
    result = CliRunner().invoke(main, ["probe", "--jsonl", str(target), "facts", "gemm", "--duration", "0.1"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["probe"] for r in records] == ["facts", "gemm"]
    assert not any(line.startswith("{") for line in result.output.splitlines())  # the tables, not JSON
    assert "TFLOP/s" in result.output


def test_probe_json_dash_prints_one_json_document_as_every_command_does():
    result = CliRunner().invoke(main, ["probe", "--json", "-", "facts"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)  # the whole of stdout is one document
    assert document["schema"] == "gpudiag.probe/1" and document["exit_code"] == 0
    assert [record["probe"] for record in document["records"]] == ["facts"]
    lines = CliRunner().invoke(main, ["probe", "--jsonl", "-", "facts"]).output.splitlines()
    assert [json.loads(line)["probe"] for line in lines] == ["facts"]


@pytest.mark.parametrize("names", [("gemm,membw",), ("gemm", "membw"), ("gemm, membw",)])
def test_probe_names_are_taken_with_commas_or_spaces_as_sweep_takes_them(names, tmp_path: Path):
    target = tmp_path / "probe.json"
    result = CliRunner().invoke(main, ["probe", *names, "--duration", "0.05", "--json", str(target)])
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text())["probes"] == ["gemm", "membw"]


def test_a_usage_error_is_one_line_on_stderr_and_exit_2():
    for args in (["sweep", "--budget", "-5"], ["probe", "--duration", "-1"], ["report", "--format", "pdf"],
                 ["swep"], ["sweep", "--bogus"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, args
        [line] = _error_lines(result.output)
        assert line.startswith("gpudiag: error: gpudiag") and "--help says more" in line, line
        assert "Usage:" not in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["probe", "--json", "gemm"], "--json gemm: --json takes a PATH or - (stdout), and gemm is a probe"),
    (["probe", "--json", "--duration", "1"], "--json --duration: --json takes a PATH or - (stdout)"),
    (["history", "--json", "--limit", "2"], "--json --limit: --json takes a PATH or - (stdout)"),
    (["sweep", "--hosts", "node1.invalid", "--json", "-q"], "--json -q: --json takes a PATH or - (stdout)"),
])
def test_json_takes_a_path_or_dash_and_says_so(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    [line] = _error_lines(result.output)
    assert message in line


def test_every_json_option_takes_a_path_or_dash():
    def commands(group, prefix=()):
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                yield from commands(command, (*prefix, name))
            else:
                yield (*prefix, name), command

    with_json = {}
    for path, command in commands(main):
        for parameter in command.params:
            if "--json" in getattr(parameter, "opts", ()):
                with_json[" ".join(path)] = parameter
    assert {"probe", "sweep", "preflight", "triage", "history"} <= set(with_json)
    for name, parameter in with_json.items():
        assert not parameter.is_flag and parameter.metavar == "PATH|-", name


def test_history_json_path_writes_the_file(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    fleet = tmp_path / "fleet.json"
    fleet.write_text('{"nodes": 2}')
    swept = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--store", str(store), "--links", "none",
                                      "-q", "--duration", "0.1"])
    assert swept.exit_code in (0, 3), swept.output
    target = tmp_path / "history.json"
    result = CliRunner().invoke(main, ["history", "node001", "--store", str(store), "--json", str(target)])
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text())["host"] == "node001" and "node001" not in result.output
    listed = CliRunner().invoke(main, ["history", "--store", str(store), "--json", "-"])
    assert len(json.loads(listed.output)["sweeps"]) == 1
