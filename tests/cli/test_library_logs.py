"""What paramiko logs reaches stderr one line per record, naming its host, at the verbosity the
command line asks (-q, default, -v, -vv); a traceback only with -vv. (A sweep of real hung and
broken hosts: tests/integration/test_hung_hosts.py.)"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from gpudiag.cli.logs import configure_logging
from gpudiag.cli.main import main
from gpudiag.transport.hosttransport import HostTransport


@pytest.fixture
def transport() -> Iterator[HostTransport]:
    ours, theirs = socket.socketpair()
    transport = HostTransport(ours, "node07")
    yield transport
    ours.close()
    theirs.close()
    configure_logging()


def _fail_with_a_traceback(transport: HostTransport) -> None:
    """What paramiko's transport thread logs when the server's banner is garbage."""
    try:
        raise EOFError("the server said \x1b]0;owned\x07hello")
    except EOFError as error:
        transport._log(logging.ERROR, f"Exception (client): {error}")
        transport._log(logging.ERROR, ["Traceback (most recent call last):", '  File "x.py", line 1, in run',
                                       "EOFError: the server said hello", ""])


@pytest.mark.parametrize(("quiet", "verbose", "lines"), [
    (True, 0, 0), (False, 0, 1), (False, 1, 1), (False, 2, 4)])
def test_a_failure_paramiko_logs_with_its_traceback_is_one_line_unless_vv(
        transport: HostTransport, capsys: pytest.CaptureFixture[str], quiet: bool, verbose: int, lines: int):
    configure_logging(quiet, verbose)
    _fail_with_a_traceback(transport)
    said = capsys.readouterr().err.splitlines()
    assert len(said) == lines, said
    assert all(line.startswith("gpudiag: node07: paramiko.transport: ") for line in said)
    assert all("\x1b" not in line for line in said)  # the server's text is made safe
    if lines:
        assert said[0].endswith("Exception (client): the server said hello")
    assert any("Traceback" in line for line in said) == (verbose >= 2)


def test_what_paramiko_logs_of_a_connection_gpudiag_closed_is_debug_detail(
        transport: HostTransport, capsys: pytest.CaptureFixture[str]):
    configure_logging()
    transport.close()  # the host's time was up: its outcome says so
    _fail_with_a_traceback(transport)
    assert capsys.readouterr().err == ""
    configure_logging(verbose=2)
    _fail_with_a_traceback(transport)
    assert "Exception (client)" in capsys.readouterr().err


def test_the_fleet_commands_offer_v_beside_q():
    for command in ("sweep", "preflight", "triage"):
        done = CliRunner().invoke(main, [command, "--help"])
        assert done.exit_code == 0
        assert "-v, --verbose" in done.output and "-q, --quiet" in done.output, command
