"""The ``gpudiag`` command line: each command parses, calls one core function, renders, returns."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import click
from rich.console import Console

from . import __version__
from .bundle import BundleMissing, locate_bundle
from .errors import GpudiagError, InputError, InstallationError
from .exitcodes import ExitCode, decide_exit_code
from .nodeprobe import DTYPES, PROBE_NAMES, NodeProbe, ProbeOptions, probe_node
from .progress import make_progress
from .render import render_probe_results, render_sweep
from .sshconfig import SshOptions
from .sweep import SweepOptions, SweepRequest, run_fleet_sweep, write_sweep_json
from .transport.local import LocalSession
from .transport.ssh import SshSettings


class GpudiagGroup(click.Group):
    """The one place where errors become exit codes (see gpudiag.exitcodes)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            code = super().invoke(ctx)
        except GpudiagError as error:
            click.echo(f"gpudiag: error: {error}", err=True)
            ctx.exit(int(error.exit_code))
        except KeyboardInterrupt:
            click.echo("gpudiag: interrupted", err=True)
            ctx.exit(int(ExitCode.INTERRUPTED))
        ctx.exit(int(code) if code is not None else int(ExitCode.OK))


@click.group(cls=GpudiagGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpudiag")
def main() -> None:
    """Find the slow GPUs, NICs and links of a GPU fleet."""


def probe_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say what to measure, shared by ``probe`` and ``sweep``."""
    decorators = [
        click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
                     metavar="S", help="Seconds of timed load per probe and GPU (longer lets throttling show)."),
        click.option("--max-gpu-mem", type=click.IntRange(min=1), default=None, metavar="MIB",
                     help="Most GPU memory one probe may take on one GPU, in MiB."),
        click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True, help="GEMM data type."),
        click.option("--sequential", is_flag=True, help="Load one GPU at a time instead of all at once."),
        click.option("--deadline", type=click.FloatRange(min=1), default=600.0, show_default=True, metavar="S",
                     help="Overall deadline of the probes on a node, in seconds."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


@main.command()
@click.argument("names", nargs=-1, metavar="[PROBE]...")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON lines instead of tables.")
@probe_options
@click.option("--python", "python", default=None, metavar="PATH",
              help="Python interpreter that runs the probes (default: this one).")
def probe(names: tuple[str, ...], as_json: bool, duration: float, max_gpu_mem: int | None, dtype: str,
          sequential: bool, deadline: float, python: str | None) -> ExitCode:
    """Measure this machine: GEMM, memory bandwidth, NVLink/P2P, PCIe, NVML telemetry, SM clocks.

    PROBE names any of: facts, telemetry, gemm, membw, p2p, pcie, smclock (default: all).
    Exit status 0 when every measurement ran or was skipped for a stated reason, 3 when one
    could not be made (an error record), 2 for bad options.
    """
    if python is not None and shutil.which(python) is None:
        raise InputError(f"--python {python}: no such executable; give the path of a Python 3 interpreter")
    options = ProbeOptions(names=_probe_names(names), duration_s=duration, max_gpu_mem_mib=max_gpu_mem,
                           dtype=dtype, sequential=sequential, deadline_s=deadline,
                           python=python or sys.executable)
    node = run_local_probe(options)
    if as_json:
        for result in node.results:
            click.echo(json.dumps(result.to_dict()))
    else:
        render_probe_results(node.results, Console())
    if node.timed_out or node.exit_status not in (0, None):
        click.echo(f"gpudiag: the probe run ended early (exit status {node.exit_status}, "
                   f"timed out: {node.timed_out})", err=True)
    return decide_exit_code(has_fail=False, has_unchecked=not node.complete)


@main.command()
@click.option("--hosts", "hosts_argument", required=True, metavar="FILE|SET|-",
              help="A hosts file (one host per line), a host set such as 'gpu[01-64]', or - for stdin.")
@click.option("--probes", "probe_list", default="", metavar="NAMES",
              help="Comma-separated probes to run on every host (default: all).")
@probe_options
@click.option("--python", "python", default="python3", show_default=True, metavar="PATH",
              help="The nodes' Python interpreter (it needs torch for the GPU probes).")
@click.option("--fanout", type=click.IntRange(min=1, max=4096), default=64, show_default=True,
              help="Hosts probed at once.")
@click.option("--host-timeout", type=click.FloatRange(min=1), default=None, metavar="S",
              help="Time limit of the probes on each host (default: --deadline plus start-up).")
@click.option("--json", "json_path", default=None, metavar="PATH|-", help="Write the sweep document here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress display.")
@click.option("--ssh-config", default=None, metavar="FILE", help="OpenSSH client configuration to use.")
@click.option("-i", "--identity", "identities", multiple=True, metavar="FILE", help="Private key (repeatable).")
@click.option("-l", "--user", default=None, help="Remote user, where the hosts file and config name none.")
@click.option("--known-hosts", default=None, metavar="FILE", help="known_hosts file to check host keys against.")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust and record host keys seen for the first time (changed keys are always refused).")
@click.option("--connect-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True, metavar="S",
              help="TCP connect timeout, where the SSH config sets none.")
def sweep(hosts_argument: str, probe_list: str, duration: float, max_gpu_mem: int | None, dtype: str,
          sequential: bool, deadline: float, python: str, fanout: int, host_timeout: float | None,
          json_path: str | None, quiet: bool, ssh_config: str | None, identities: tuple[str, ...],
          user: str | None, known_hosts: str | None, accept_new_host_keys: bool,
          connect_timeout: float) -> ExitCode:
    """Probe every host of the fleet over SSH, account for every host, write the sweep document.

    Exit status: 0 every host checked and nothing failed; 1 a fail finding; 2 bad input;
    3 some hosts could not be checked; 130 interrupted (what finished is still written).
    """
    names = _probe_names(tuple(name.strip() for name in probe_list.split(",") if name.strip()))
    request = SweepRequest(
        hosts_argument=hosts_argument,
        sweep=SweepOptions(
            probe=ProbeOptions(names=names, duration_s=duration, max_gpu_mem_mib=max_gpu_mem, dtype=dtype,
                               sequential=sequential, deadline_s=deadline, python=python),
            fanout=fanout, host_timeout_s=host_timeout),
        ssh=SshOptions(config_file=ssh_config, identity_files=identities, user=user, known_hosts=known_hosts,
                       connect_timeout_s=connect_timeout),
        settings=SshSettings(accept_new_host_keys=accept_new_host_keys),
    )
    with _sigterm_as_interrupt():
        result = run_fleet_sweep(request, sys.stdin, make_progress(quiet))
    with _signals_ignored():  # what was gathered is written whole, whatever arrives meanwhile
        if json_path is not None:
            write_sweep_json(result, json_path)
        render_sweep(result, Console(stderr=json_path == "-"))
    return result.exit_code


def _probe_names(names: tuple[str, ...]) -> tuple[str, ...]:
    unknown = [name for name in names if name not in PROBE_NAMES]
    if unknown:
        raise InputError(f"unknown probe {unknown[0]!r}; choose from {', '.join(PROBE_NAMES)}")
    return names


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler ending the prolog) is handled like Ctrl-C: save what finished."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_local_probe(options: ProbeOptions) -> NodeProbe:
    """Run the probe bundle on this machine; raises InstallationError if it is missing."""
    try:
        bundle = locate_bundle()
    except BundleMissing as missing:
        raise InstallationError(str(missing)) from missing
    return probe_node(LocalSession(bundle.root), options, source="localhost")
