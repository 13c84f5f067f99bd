"""``gpudiag triage HOST``: a deep look at one node for the engineer on call (gpudiag/triage/)."""

from __future__ import annotations

import sys

import click

from ..errors import InputError
from ..exitcodes import ExitCode
from ..run.hostprobe import ProbeOptions
from ..run.interrupts import InterruptGate
from ..run.request import Judging, Reach
from ..run.runtime import Runtime
from ..schema.jsonout import dumps as strict_dumps
from ..triage import DEFAULT_DURATION_S, TRIAGE_PROBES, TriageRequest, default_deadline_s, explain, render_text
from ..triage.run import HISTORY_SWEEPS, run_triage
from .connect import connect
from .groups import judging_options, reach_options
from .helptext import USAGE_ROW, SectionedCommand, epilog
from .logs import configure_logging, verbose_option
from .options import (
    check_deadline,
    check_outputs,
    deadline_option,
    dtype_option,
    emit_json,
    json_option,
    max_gpu_mem_option,
    node_python_option,
    topology_option,
)
from .progress import make_progress
from .textout import echo_text


@click.command(cls=SectionedCommand,
    short_help="Look deeply at one node and explain what is wrong, against its peers and history.",
    epilog=epilog(
    ["gpudiag triage node017                  # every probe, with longer loads",
     "gpudiag triage node017 --duration 300 --json t.json",
     "gpudiag triage --simulate examples/fleet.json --host node012 --no-store"],
    [(ExitCode.OK, "nothing found and everything checked"), (ExitCode.FAIL, "a problem to act on"), USAGE_ROW,
     (ExitCode.UNCHECKED, "nothing to act on, but something could not be checked")]))
@click.argument("host_argument", required=False, metavar="HOST")
@click.option("--host", "host_option", default=None, metavar="HOST",
              help="The host (the same as the HOST argument; with --simulate, a node of the fleet).")
@reach_options(simulate_help="Triage a node of a simulated fleet instead of a real host (demos, tests).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_DURATION_S,
              show_default=True, metavar="S",
              help="Seconds of timed load per load probe (GEMM, memory): long enough for heat and power limits "
                   "to show.")
@max_gpu_mem_option
@dtype_option
@click.option("--sequential", is_flag=True, help="Load one GPU at a time instead of all at once.")
@deadline_option(None, " (default: 600 s plus 4 x --duration)")
@node_python_option("python3", "The node's Python interpreter (it needs torch for the GPU probes).")
@click.option("--host-timeout", type=click.FloatRange(min=1), default=None, metavar="S",
              help="Time limit of the probes on the host (default: --deadline plus start-up).")
@judging_options(store_help="SQLite store with the baseline and the host's history (default: "
                            "$XDG_DATA_HOME/gpudiag/gpudiag.db). Only read.",
                 no_store_help="Compare with no stored baseline or history.", job=True)
@click.option("--history", "history_sweeps", type=click.IntRange(min=0), default=HISTORY_SWEEPS, show_default=True,
              metavar="N", help="How many of the host's stored sweeps to compare with.")
@json_option("Write the triage document (schema gpudiag.triage/1).")
@topology_option
@click.option("-q", "--quiet", is_flag=True, help="No progress display.")
@verbose_option
def triage(host_argument: str | None, host_option: str | None, reach: Reach, duration: float,
           max_gpu_mem: int | None, dtype: str, sequential: bool, deadline: float | None, python: str,
           host_timeout: float | None, judging: Judging, history_sweeps: int, json_path: str | None,
           topology: tuple[str, ...], quiet: bool, verbose: int) -> ExitCode:
    """Look deeply at one node: every probe with a longer load (heat and power throttling show), the
    P2P matrix, all telemetry, the Xid history of the kernel log decoded with NVIDIA's catalog, and
    each GPU's pending recovery action; judged against the stored baseline, the SKU figures and the
    host's own history. Prints each problem with its evidence and the next action, most severe
    first, and what could not be checked.
    """
    configure_logging(quiet, verbose)
    host = _one_host(host_argument, host_option)
    check_outputs(json_path)
    if deadline is not None:
        check_deadline(duration, deadline)
    probe = ProbeOptions(names=TRIAGE_PROBES, duration_s=duration, max_gpu_mem_mib=max_gpu_mem, dtype=dtype,
                         sequential=sequential, deadline_s=deadline or default_deadline_s(duration), python=python)
    request = TriageRequest(
        host=host, probe=probe, reach=reach, judging=judging, store_required=_given("store_path"),
        history_sweeps=history_sweeps, host_timeout_s=host_timeout, topology=topology)
    with InterruptGate().installed() as gate:
        run = run_triage(request, Runtime(sys.stdin, make_progress(quiet), gate, connect=connect))
        result = explain(run)
        if json_path is not None:
            emit_json(strict_dumps(result.to_dict(), indent=1) + "\n", json_path)
        echo_text(render_text(result), err=json_path == "-")
    return ExitCode.INTERRUPTED if gate.received else result.exit_code


def _one_host(argument: str | None, option: str | None) -> str:
    """The one host given, as HOST or --host (InputError for none, or two that differ)."""
    if argument is None and option is None:
        raise InputError("name the host: gpudiag triage HOST (or --simulate FLEET.json --host NODE)")
    if argument is not None and option is not None and argument != option:
        raise InputError(f"two hosts given ({argument} and --host {option}): gpudiag triage looks at one")
    return argument or option or ""


def _given(parameter: str) -> bool:
    """Whether the command's ``parameter`` was given (else it holds its default)."""
    return click.get_current_context().get_parameter_source(parameter) != click.core.ParameterSource.DEFAULT
