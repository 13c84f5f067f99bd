"""``gpudiag probe``: measure this machine with the probe bundle, run here (no SSH), and the
options that say what to measure, shared with ``gpudiag sweep``."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import Any

import click

from ..bundle import BundleMissing, locate_bundle
from ..errors import InputError, InstallationError
from ..exitcodes import ExitCode, decide_exit_code
from ..records import PROBE_NAMES
from ..report.console import render_probe_results
from ..report.tables import make_console
from ..run.hostprobe import HostProbe, ProbeOptions, probe_host
from ..schema.jsonout import dumps as strict_dumps
from ..transport.bounded import OutputLimits
from ..transport.local import LocalSession
from .helptext import USAGE_ROW, epilog
from .options import (
    check_deadline,
    check_outputs,
    deadline_option,
    dtype_option,
    emit_json,
    json_option,
    max_gpu_mem_option,
    node_python_option,
    output_options,
    with_options,
)


def probe_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say what to measure, shared by ``probe`` and ``sweep``."""
    decorators = [
        click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
                     metavar="S", help="Seconds of timed load per probe and GPU (longer lets throttling show)."),
        max_gpu_mem_option,
        dtype_option,
        click.option("--sequential", is_flag=True, help="Load one GPU at a time instead of all at once."),
        deadline_option(600.0),
    ]
    return with_options(function, decorators)


@click.command(epilog=epilog(
    ["gpudiag probe                           # every probe but xid, as tables",
     "gpudiag probe gemm membw --duration 30  # 30 s of load: throttling shows",
     "gpudiag probe --json - --max-gpu-mem 4096  # JSON lines, 4 GiB a GPU at most"],
    [(ExitCode.OK, "every measurement ran or was skipped for a stated reason"), USAGE_ROW,
     (ExitCode.UNCHECKED, "a measurement could not be made (an error record, a probe the deadline cut short, "
                          "a bundle that died)")]))
@click.argument("names", nargs=-1, metavar="[PROBE]...")
@json_option("The records as JSON lines: with - instead of the tables, with PATH beside them.")
@probe_options
@node_python_option(None, "Python interpreter that runs the probes (default: this one).", here=True)
@click.option("--pause", is_flag=True,
              help="A job paused for mitigation holds the GPUs: each GPU's probes sized to the memory it left, "
                   "in a process that sees that GPU alone; a GPU without room is skipped with the figures.")
@output_options
def probe(names: tuple[str, ...], json_path: str | None, duration: float, max_gpu_mem: int | None, dtype: str,
          sequential: bool, deadline: float, python: str | None, pause: bool, output: OutputLimits) -> ExitCode:
    """Measure this machine: GEMM, memory bandwidth, NVLink/P2P, PCIe, NVML telemetry, SM clocks.

    PROBE names any of: facts, telemetry, gemm, membw, p2p, pcie, smclock, xid (default: all
    but xid).
    """
    check_deadline(duration, deadline)
    if json_path in PROBE_NAMES:
        raise InputError(f"--json {json_path}: --json takes a PATH or - (stdout), and {json_path} is a probe; "
                         f"write --json - {json_path} to print its records as JSON lines")
    check_outputs(json_path)
    if python is not None and shutil.which(python) is None:
        raise InputError(f"--python {python}: no such executable; give the path of a Python 3 interpreter")
    options = ProbeOptions(names=probe_names(names), duration_s=duration, max_gpu_mem_mib=max_gpu_mem,
                           dtype=dtype, sequential=sequential, deadline_s=deadline,
                           python=python or sys.executable, pause=pause)
    node = run_local_probe(options, output)
    if json_path is not None:
        emit_json("".join(strict_dumps(result.to_dict()) + "\n" for result in node.results), json_path)
    if json_path != "-":
        render_probe_results(node.results, make_console())
    if node.stray is not None:
        click.echo(f"gpudiag: the probes printed {node.stray.describe()} (skipped)", err=True)
    if node.timed_out or node.exit_status not in (0, None):
        click.echo(f"gpudiag: the probe run ended early (exit status {node.exit_status}, "
                   f"timed out: {node.timed_out})", err=True)
    return decide_exit_code(has_fail=False, has_unchecked=not node.complete)


def listed_probe_names(probe_list: str) -> tuple[str, ...]:
    """The probes of ``--probes a,b`` (blank parts left out); raises InputError as probe_names."""
    return probe_names(tuple(name.strip() for name in probe_list.split(",") if name.strip()))


def probe_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` if each is a probe of the catalogue; raises InputError naming the first that is not."""
    unknown = [name for name in names if name not in PROBE_NAMES]
    if unknown:
        raise InputError(f"unknown probe {unknown[0]!r}; choose from {', '.join(PROBE_NAMES)}")
    return names


def run_local_probe(options: ProbeOptions, limits: OutputLimits | None = None) -> HostProbe:
    """Run the probe bundle on this machine, its output within ``limits`` (default caps when
    None); raises InstallationError if it is missing, ProbeOutputError past a cap."""
    try:
        bundle = locate_bundle()
    except BundleMissing as missing:
        raise InstallationError(str(missing)) from missing
    return probe_host(LocalSession(bundle.root, limits), options, source="localhost")
