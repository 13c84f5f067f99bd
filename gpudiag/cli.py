"""The ``gpudiag`` command line: each command parses, calls one core function, renders, returns."""

from __future__ import annotations

import json
import shutil
import sys
from typing import Any

import click
from rich.console import Console

from . import __version__
from .bundle import BundleMissing, locate_bundle
from .errors import GpudiagError, InputError, InstallationError
from .exitcodes import ExitCode, decide_exit_code
from .nodeprobe import DTYPES, PROBE_NAMES, NodeProbe, ProbeOptions, probe_node
from .render import render_probe_results
from .transport.local import LocalSession


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


@main.command()
@click.argument("names", nargs=-1, metavar="[PROBE]...")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON lines instead of tables.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              metavar="S", help="Seconds of timed load per probe and GPU (longer lets throttling show).")
@click.option("--max-gpu-mem", type=click.IntRange(min=1), default=None, metavar="MIB",
              help="Most GPU memory one probe may take on one GPU, in MiB.")
@click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True, help="GEMM data type.")
@click.option("--sequential", is_flag=True, help="Load one GPU at a time instead of all at once.")
@click.option("--deadline", type=click.FloatRange(min=1), default=600.0, show_default=True, metavar="S",
              help="Overall deadline for the probe run, in seconds.")
@click.option("--python", "python", default=None, metavar="PATH",
              help="Python interpreter that runs the probes (default: this one).")
def probe(names: tuple[str, ...], as_json: bool, duration: float, max_gpu_mem: int | None, dtype: str,
          sequential: bool, deadline: float, python: str | None) -> ExitCode:
    """Measure this machine: GEMM, memory bandwidth, NVLink/P2P, PCIe, NVML telemetry, SM clocks.

    PROBE names any of: facts, telemetry, gemm, membw, p2p, pcie, smclock (default: all).
    Exit status 0 when every measurement ran or was skipped for a stated reason, 3 when one
    could not be made (an error record), 2 for bad options.
    """
    unknown = [name for name in names if name not in PROBE_NAMES]
    if unknown:
        raise InputError(f"unknown probe {unknown[0]!r}; choose from {', '.join(PROBE_NAMES)}")
    if python is not None and shutil.which(python) is None:
        raise InputError(f"--python {python}: no such executable; give the path of a Python 3 interpreter")
    options = ProbeOptions(names=names, duration_s=duration, max_gpu_mem_mib=max_gpu_mem, dtype=dtype,
                           sequential=sequential, deadline_s=deadline, python=python or sys.executable)
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


def run_local_probe(options: ProbeOptions) -> NodeProbe:
    """Run the probe bundle on this machine; raises InstallationError if it is missing."""
    try:
        bundle = locate_bundle()
    except BundleMissing as missing:
        raise InstallationError(str(missing)) from missing
    return probe_node(LocalSession(bundle.root), options, source="localhost")
