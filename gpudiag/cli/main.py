"""The ``gpudiag`` command line: the group, and the one place where errors become exit codes.
Each command lives in a module of its own (probe, sweep and demo, preflight, triage, and the
store's report, history, baseline and store), parses, calls one core function, renders, and
returns its exit code."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import click

from .. import __version__
from ..errors import GpudiagError
from ..exitcodes import ExitCode
from . import preflight, probe, store, sweep, triage
from . import topology as topology_command
from .helptext import FLEET_CODES, WholeHelpGroup, epilog
from .logs import configure_logging


class GpudiagGroup(WholeHelpGroup):
    """The one place where errors become exit codes (see gpudiag.exitcodes).

    An error gpudiag did not foresee is its own failure, exit 4 (inconclusive): a pre-flight
    hook must never read it as exit 1, "this node failed". A usage error (a bad option value, an
    option or command that does not exist) is one line on stderr and exit 2, as every other bad
    input is: never click's usage block."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.UsageError as error:
            click.echo(f"gpudiag: error: {usage_line(error)}", err=True)
            sys.exit(int(ExitCode.USAGE))
        except click.exceptions.Abort:
            click.echo("gpudiag: interrupted", err=True)
            sys.exit(int(ExitCode.INTERRUPTED))
        except click.exceptions.ClickException as error:
            click.echo(f"gpudiag: error: {' '.join(error.format_message().split())}", err=True)
            sys.exit(int(error.exit_code))
        sys.exit(int(code) if isinstance(code, int) else int(ExitCode.OK))

    def invoke(self, ctx: click.Context) -> Any:
        configure_logging()  # every command: a library's records one line each (-q and -v change it where offered)
        try:
            code = super().invoke(ctx)
        except GpudiagError as error:
            click.echo(f"gpudiag: error: {error}", err=True)
            ctx.exit(int(error.exit_code))
        except KeyboardInterrupt:
            click.echo("gpudiag: interrupted", err=True)
            ctx.exit(int(ExitCode.INTERRUPTED))
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own usage errors and exits keep their codes
        except BrokenPipeError:
            # The reader went away (``| head``): not a bug; the rest of the output cannot be delivered.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(int(ExitCode.INTERNAL))
        except Exception as error:  # noqa: BLE001 - the last guard: an unforeseen error is inconclusive
            traceback.print_exc(file=sys.stderr)
            click.echo(f"gpudiag: internal error (a bug in gpudiag, not a finding about any node): "
                       f"{type(error).__name__}: {error}; the result is inconclusive", err=True)
            ctx.exit(int(ExitCode.INTERNAL))
        ctx.exit(int(code) if code is not None else int(ExitCode.OK))


def usage_line(error: click.exceptions.UsageError) -> str:
    """``gpudiag sweep: --budget: -5.0 is not in the range x>=1 (gpudiag sweep --help says more)``:
    click's message on one line, naming the command and where its help is."""
    message = " ".join(error.format_message().split())
    for wordy, plain in (("Invalid value for ", ""), ("'", "")):
        message = message.replace(wordy, plain)
    path = " ".join(["gpudiag", *error.ctx.command_path.split()[1:]]) if error.ctx is not None else "gpudiag"
    return f"{path}: {message} ({path} --help says more)"


@click.group(cls=GpudiagGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=epilog(
    ["gpudiag demo --output demo              # a simulated fleet swept",
     "gpudiag probe gemm membw --duration 2   # this machine",
     "gpudiag sweep --hosts 'gpu[01-64]' --json sweep.json"],
    FLEET_CODES))
@click.version_option(__version__, prog_name="gpudiag")
def main() -> None:
    """Find the slow GPUs, NICs and links of a GPU fleet."""


for command in (probe.probe, sweep.sweep, sweep.demo, store.report, store.history, store.baseline, store.store_group,
                triage.triage, preflight.preflight):
    main.add_command(command)
main.add_command(topology_command.topology)
