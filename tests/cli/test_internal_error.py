"""The one funnel from errors to exit codes: an error gpudiag did not foresee is inconclusive (4),
never 1 ("this node failed"), and click's own usage errors keep their code."""

import click
from click.testing import CliRunner

from gpudiag.cli.main import GpudiagGroup
from gpudiag.errors import InputError


@click.group(cls=GpudiagGroup)
def tool() -> None:
    """A group wired like ``gpudiag`` itself."""


@tool.command()
def crash() -> None:
    {}["missing"]  # a bug: KeyError


@tool.command()
def bad_input() -> None:
    raise InputError("hosts.txt:3: 'node[1-': unclosed range; write node[1-4]")


@tool.command()
@click.option("--count", type=int, required=True)
def needs_count(count: int) -> None:
    click.echo(count)


def test_an_unforeseen_error_exits_4_and_says_it_is_gpudiag_s_own_failure():
    result = CliRunner().invoke(tool, ["crash"])
    assert result.exit_code == 4
    assert "internal error (a bug in gpudiag, not a finding about any node): KeyError" in result.output
    assert "inconclusive" in result.output


def test_input_errors_exit_2_and_click_usage_errors_keep_their_code():
    assert CliRunner().invoke(tool, ["bad-input"]).exit_code == 2
    usage = CliRunner().invoke(tool, ["needs-count"])
    assert usage.exit_code == 2 and usage.output.count("\n") == 1
    assert "gpudiag needs-count: Missing option --count" in usage.output
    assert CliRunner().invoke(tool, ["needs-count", "--count", "3"]).exit_code == 0
