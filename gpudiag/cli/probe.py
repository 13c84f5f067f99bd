"""``gpudiag probe``: measure this machine with the probe bundle, run here (no SSH), and the
options that say what to measure, shared with ``gpudiag sweep``."""

from __future__ import annotations

import re
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
    json_target,
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


# The probe document's schema (``gpudiag probe --json``).
PROBE_SCHEMA = "gpudiag.probe/1"


@click.command(epilog=epilog(
    ["gpudiag probe                           # every probe but xid, as tables",
     "gpudiag probe gemm membw --duration 30  # 30 s of load: throttling shows",
     "gpudiag probe --json - --max-gpu-mem 4096  # one JSON document"],
    [(ExitCode.OK, "every measurement ran or was skipped for a stated reason"), USAGE_ROW,
     (ExitCode.UNCHECKED, "a measurement could not be made (an error record, a probe the deadline cut short, "
                          "a bundle that died)")]))
@click.argument("names", nargs=-1, metavar="[PROBE]...")
@json_option(f"One JSON document ({PROBE_SCHEMA}: the records, the exit code): with - instead of the tables, with "
             "PATH beside them.")
@click.option("--jsonl", "jsonl_path", default=None, metavar="PATH|-", callback=json_target,
              help="The records as JSON lines, as the bundle prints them: with - instead of the tables.")
@probe_options
@node_python_option(None, "Python interpreter that runs the probes (default: this one).", here=True)
@click.option("--pause", is_flag=True,
              help="A job paused for mitigation holds the GPUs: each GPU's probes sized to the memory it left, "
                   "in a process that sees that GPU alone; a GPU without room is skipped with the figures.")
@output_options
def probe(names: tuple[str, ...], json_path: str | None, jsonl_path: str | None, duration: float,
          max_gpu_mem: int | None, dtype: str, sequential: bool, deadline: float, python: str | None, pause: bool,
          output: OutputLimits) -> ExitCode:
    """Measure this machine: GEMM, memory bandwidth, NVLink/P2P, PCIe, NVML telemetry, SM clocks.

    PROBE names any of: facts, telemetry, gemm, membw, p2p, pcie, smclock, xid (default: all
    but xid), separated by spaces or commas (as sweep's --probes).
    """
    check_deadline(duration, deadline)
    for option, path in (("--json", json_path), ("--jsonl", jsonl_path)):
        if path in PROBE_NAMES:
            raise InputError(f"{option} {path}: {option} takes a PATH or - (stdout), and {path} is a probe; "
                             f"write {option} - {path} to print its records")
    if json_path == "-" and jsonl_path == "-":
        raise InputError("--json - and --jsonl - both write to stdout: give one of them a PATH")
    check_outputs(json_path)
    check_outputs(jsonl_path)
    if python is not None and shutil.which(python) is None:
        raise InputError(f"--python {python}: no such executable; give the path of a Python 3 interpreter")
    options = ProbeOptions(names=probe_names(names), duration_s=duration, max_gpu_mem_mib=max_gpu_mem,
                           dtype=dtype, sequential=sequential, deadline_s=deadline,
                           python=python or sys.executable, pause=pause)
    node = run_local_probe(options, output)
    code = decide_exit_code(has_fail=False, has_unchecked=not node.complete)
    if jsonl_path is not None:
        emit_json("".join(strict_dumps(result.to_dict()) + "\n" for result in node.results), jsonl_path)
    if json_path is not None:
        document = {"schema": PROBE_SCHEMA, "host": "localhost", "probes": list(options.names),
                    "complete": node.complete, "exit_code": int(code),
                    "records": [result.to_dict() for result in node.results]}
        emit_json(strict_dumps(document, indent=1) + "\n", json_path)
    if "-" not in (json_path, jsonl_path):
        render_probe_results(node.results, make_console())
    if node.stray is not None:
        click.echo(f"gpudiag: the probes printed {node.stray.describe()} (skipped)", err=True)
    if node.timed_out or node.exit_status not in (0, None):
        click.echo(f"gpudiag: the probe run ended early (exit status {node.exit_status}, "
                   f"timed out: {node.timed_out})", err=True)
    return code


def listed_probe_names(probe_list: str) -> tuple[str, ...]:
    """The probes of ``--probes a,b`` (or ``"a b"``); raises InputError as probe_names."""
    return probe_names((probe_list,))


def probe_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """The probes ``names`` list, each argument split at commas and spaces (``gemm,membw`` or
    ``gemm membw``: the same in probe and sweep), if each is a probe of the catalogue; raises
    InputError naming the first that is not."""
    listed = tuple(name for argument in names for name in re.split(r"[,\s]+", argument) if name)
    unknown = [name for name in listed if name not in PROBE_NAMES]
    if unknown:
        raise InputError(f"unknown probe {unknown[0]!r}; choose from {', '.join(PROBE_NAMES)} (separated by "
                         "commas or spaces)")
    return listed


def run_local_probe(options: ProbeOptions, limits: OutputLimits | None = None) -> HostProbe:
    """Run the probe bundle on this machine, its output within ``limits`` (default caps when
    None); raises InstallationError if it is missing, ProbeOutputError past a cap."""
    try:
        bundle = locate_bundle()
    except BundleMissing as missing:
        raise InstallationError(str(missing)) from missing
    return probe_host(LocalSession(bundle.root, limits), options, source="localhost")
