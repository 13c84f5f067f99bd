"""The command line refuses bad input before any node is touched: exit 2 and one line that
names the option or file and the fix."""

from pathlib import Path

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
