"""Every example a --help gives runs as written from the repository root (examples/ and
gpudiag/data/ hold the files they name; `gpudiag demo --output demo`, the top-level help's
first example, makes the store the others read). The examples that reach a real fleet over SSH
or Slurm, or that load this machine for half a minute, are named below with why they are not
run here."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main

REPO = Path(__file__).resolve().parents[2]
NOT_RUN_HERE = {
    "gpudiag sweep --hosts 'gpu[01-64]' --json sweep.json": "reaches a real fleet over SSH",
    "gpudiag sweep --hosts 'gpu[01-64]' --json sweep.json --exclude-file ex.txt": "reaches a real fleet over SSH",
    "gpudiag sweep --hosts hosts.txt -i ~/.ssh/fleet --links full -q": "reaches a real fleet over SSH",
    "gpudiag preflight --budget 90 --drain": "runs inside a Slurm job, on its nodes",
    'gpudiag preflight --here --hosts "$SLURMD_NODENAME" --budget 60 --drain': "runs in a Slurm prolog",
    "gpudiag triage node017": "reaches node017 over SSH",
    "gpudiag triage node017 --duration 300 --json t.json": "reaches node017 over SSH",
    "gpudiag probe gemm membw --duration 30": "30 s of load per probe: `gpudiag probe` runs the same code",
    "gpudiag demo -q": "a demo in a temporary folder: test_fleet_cli runs it",
}


def _examples(command: click.Command) -> Iterator[str]:
    """The example command lines of ``command``'s help and its subcommands', in order, each
    without its comment."""
    lines = (command.epilog or "").splitlines()
    if "Examples:" in lines:
        for line in lines[lines.index("Examples:") + 1:]:
            if not line.strip():
                break
            yield line.split("  #")[0].strip()
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from _examples(sub)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[tuple[str, object]]:
    """Each example run, in the order the helps give them, from a copy of the repository root
    (its examples/ and gpudiag/ linked in), with a store home of its own."""
    root = tmp_path_factory.mktemp("root")
    for name in ("examples", "gpudiag"):
        (root / name).symlink_to(REPO / name)
    ordered = list(dict.fromkeys(_examples(main)))
    runner = CliRunner(env={"XDG_DATA_HOME": str(root / "xdg"), "COLUMNS": "100"})
    done = []
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for line in ordered:
            if line not in NOT_RUN_HERE:
                done.append((line, runner.invoke(main, shlex.split(line)[1:], catch_exceptions=False)))
    return done


def test_the_helps_give_examples_of_every_kind_and_the_exceptions_are_examples(runs):
    given = set(_examples(main))
    assert set(NOT_RUN_HERE) <= given, set(NOT_RUN_HERE) - given  # no exception outlives its example
    assert len(runs) >= 25 and runs[0][0] == "gpudiag demo --output demo"


def test_every_example_runs_as_written(runs):
    failed = [(line, result.exit_code, result.output[-600:]) for line, result in runs
              if result.exit_code not in (0, 1, 3) or "error:" in result.output]
    assert not failed, failed


def test_the_demo_ends_with_its_verdict_and_writes_what_it_says(runs, tmp_path_factory):
    result = dict(runs)["gpudiag demo --output demo"]
    folder = next(tmp_path_factory.getbasetemp().glob("root*/demo"))
    assert (folder / "report.html").stat().st_size > 10_000 and (folder / "gpudiag.db").is_file()
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("verdict (a real sweep with these findings would exit so): FAIL (exit 1: ")
    assert "wrote the HTML report demo/report.html, the sweep document demo/sweep.json" in lines[-1]
    assert lines[-3].startswith("  warn unchecked node05") and lines[-2] == ""  # the last finding, then the verdict
