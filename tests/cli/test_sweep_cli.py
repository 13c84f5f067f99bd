"""``gpudiag sweep`` input errors: one line naming the file, line and fix; exit 2; nothing run."""

from pathlib import Path

from click.testing import CliRunner

from gpudiag.cli import main


def test_a_bad_line_in_the_hosts_file_is_exit_2_with_file_and_line(tmp_path: Path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# rack 1\nnode[001-004]\n\nnode[005-\nnode009\n")
    json_path = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["sweep", "--hosts", str(hosts), "--json", str(json_path), "-q"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"gpudiag: error: {hosts}:4:")
    assert not json_path.exists()


def test_localhost_is_swept_without_ssh(tmp_path: Path):
    import json
    import sys

    json_path = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["sweep", "--hosts", "localhost", "--probes", "facts", "--python",
                                       sys.executable, "--json", str(json_path), "-q"])
    assert result.exit_code == 0, result.output
    document = json.loads(json_path.read_text())
    assert [(h["host"], h["status"]) for h in document["hosts"]] == [("localhost", "ok")]


def test_json_to_stdout_keeps_the_summary_off_stdout(tmp_path: Path):
    import json
    import sys

    result = CliRunner().invoke(main, ["sweep", "--hosts", "localhost", "--probes", "facts", "--python",
                                       sys.executable, "--json", "-", "-q"])
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["schema"] == "gpudiag.sweep/1"
