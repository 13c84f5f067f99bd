"""Names that ssh (9.6+) would refuse are input errors on the command line (exit 2, one line naming where the
name came from): ``--hosts``, ``-l/--user`` and ``$SLURM_JOB_NODELIST``; nothing is run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main


def _one_error_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    return line


@pytest.mark.parametrize(("hosts", "said"), [
    ("fe80::1%$(touch pwned)", "whitespace inside"),
    ("fe80::1%$(>pwned)", "host name 'fe80::1%$(>pwned)' contains '$'"),
    ("[fe80::1%`reboot`]:22", "host name 'fe80::1%`reboot`' contains '`'"),
    ("a;b@node1", "'a;b' is not a valid user name"),
])
def test_a_bad_name_in_hosts_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hosts: str, said: str):
    monkeypatch.chdir(tmp_path)

    line = _one_error_line(CliRunner().invoke(main, ["sweep", "--hosts", hosts, "-q", "--no-store"]))

    assert line.startswith("gpudiag: error: --hosts ") and said in line and "fix: " in line
    assert not (tmp_path / "pwned").exists()


def test_a_bad_user_option_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    ProxyCommand nc %h %p %r\n")

    result = CliRunner().invoke(main, ["sweep", "--hosts", "node01", "-l", "a$(>pwned)", "--ssh-config",
                                       str(config), "-q", "--no-store"])

    assert _one_error_line(result) == ("gpudiag: error: -l/--user 'a$(>pwned)' contains '(', a shell metacharacter "
                                       "that ssh refuses in a user name; fix: use letters, digits, '.', '_' and '-' "
                                       "only")
    assert not (tmp_path / "pwned").exists()


def test_a_bad_name_in_the_jobs_node_list_is_exit_2_naming_the_variable(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 4, "name_format": "n{}", "faults": []}))

    result = CliRunner().invoke(main, ["preflight", "--no-store", "-q", "--simulate", str(fleet)],
                                env={"SLURM_JOB_NODELIST": "n[3-4],n$(reboot)", "SLURM_NODELIST": ""},
                                catch_exceptions=False)

    line = _one_error_line(result)
    assert line.startswith("gpudiag: error: $SLURM_JOB_NODELIST 'n[3-4],n$(reboot)' is not a valid Slurm node list")
    assert "'n$(reboot)' is not a valid host name" in line


def test_a_job_node_list_that_names_a_file_here_is_read_as_node_names_never_as_the_file(tmp_path: Path, monkeypatch):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 4, "name_format": "n{}", "faults": []}))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "n1").write_text("n2\nn3\nn4\n")  # a file that happens to bear the node's name
    document = tmp_path / "out.json"

    result = CliRunner().invoke(main, ["preflight", "--no-store", "-q", "--simulate", str(fleet), "--json",
                                       str(document)], env={"SLURM_JOB_NODELIST": "n1", "SLURM_NODELIST": ""},
                                catch_exceptions=False)

    assert result.exit_code in (0, 3), result.output
    assert [host["host"] for host in json.loads(document.read_text())["hosts"]] == ["n1"]
