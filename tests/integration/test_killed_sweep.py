"""A sweep killed outright (SIGKILL: no handler runs) with one of its four real sshd hosts stored
says so wherever it is read back: the report's first line, its markdown, HTML and JSON, ``gpudiag
history`` and its JSON; and ``gpudiag baseline build`` skips it, saying why, so its unjudged
host never becomes a reference."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result
from sshd_hosts import SshdFleet

from gpudiag.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def _wrapper(tmp_path: Path, fleet: SshdFleet, finishing: str) -> str:
    """A node Python that runs the real one on ``finishing`` and, on every other host, waits for
    its SSH channel to close (the killed controller's) without printing anything."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\ncase "$SSH_CONNECTION" in\n'
                       f'  *" {fleet.host(finishing).address} "*) exec {sys.executable} "$@" ;;\n'
                       f'  *) exec cat >/dev/null ;;\nesac\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_a_sweep_killed_with_one_of_four_hosts_stored_is_unfinished_everywhere_and_no_baseline_source(
        make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(4)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt")
    store = tmp_path / "gpudiag.db"
    argv = [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(hosts), "--ssh-config", str(config),
            "--known-hosts", str(known), "--python", _wrapper(tmp_path, fleet, "node01"), "--probes", "facts",
            "--links", "none", "--store", str(store), "--host-timeout", "600"]
    controller = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
    try:
        assert controller.stderr is not None
        # The progress line comes after the store recorded the host that finished (gpudiag.run.fanout).
        for line in controller.stderr:
            if "1/4 hosts done" in line:
                break
        else:
            raise AssertionError(f"the sweep ended before its first host finished (exit {controller.wait()})")
        controller.send_signal(signal.SIGKILL)
    finally:
        controller.kill()
        controller.wait()
    assert controller.returncode == -signal.SIGKILL

    report = _run("report", "--store", str(store))
    first = report.output.splitlines()[0]
    assert first.startswith("unfinished: 1 of 4 planned hosts measured, not analysed · sweep "), report.output
    assert "findings not analysed" in first and "0 findings" not in report.output
    assert "findings: not analysed" in report.output and "findings: none" not in report.output
    assert "verdict: INTERRUPTED" in report.output and "nothing judged (not analysed)" in report.output
    for fmt, words in (("md", "unfinished: 1 of 4 planned hosts measured, not analysed"),
                       ("html", "unfinished: 1 of 4 planned hosts measured, not analysed")):
        text = _run("report", "--store", str(store), "--format", fmt).output
        assert words in text and "No findings" not in text and "0 findings" not in text
    document = json.loads(_run("report", "--store", str(store), "--format", "json").output)
    assert document["completeness"] == {"planned_hosts": 4, "measured_hosts": 1, "analysed": False,
                                        "interrupted": True, "not_measured": ["node02", "node03", "node04"]}

    listed = json.loads(_run("history", "--store", str(store), "--json", "-").output)["sweeps"]
    assert listed[0]["completeness"]["planned_hosts"] == 4 and listed[0]["completeness"]["analysed"] is False
    table = CliRunner().invoke(main, ["history", "--store", str(store)], env={"COLUMNS": "120"}).output
    assert "not analysed" in table and "unfinished" in table and "of 4 planned" in table
    host = json.loads(_run("history", "node01", "--store", str(store), "--json", "-").output)["sweeps"][0]
    assert host["analysed"] is False and host["verdict"]["severity"] is None
    assert host["verdict"]["text"].startswith("measured, not judged")

    built = _run("baseline", "build", "--last", "1", "--store", str(store))
    assert built.exit_code == 2
    assert "skipped sweep" in built.output and "(unfinished: 1 of 4 planned hosts measured, not analysed)" in \
        built.output and "finished sweeps only" in built.output
    assert _run("baseline", "show", "--store", str(store)).output.count("default") == 0
