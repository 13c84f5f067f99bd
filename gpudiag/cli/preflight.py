"""``gpudiag preflight``: a job's nodes checked before it starts, within a time budget
(gpudiag/preflight/); drains the nodes of ``fail`` findings with ``--drain``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

import click

from ..errors import InputError, OutputError
from ..exitcodes import ExitCode
from ..preflight import DEFAULT_BUDGET_S, PreflightRequest, run_preflight
from ..preflight.planner import DEFAULT_PROBES
from ..preflight.render import action_lines, summary_line
from ..preflight.run import PreflightRun, check_request, host_text, make_plan
from ..report import render_report
from ..report.console import render_sweep_table
from ..report.detail import COMPACT, DETAILS
from ..report.document import write_exclude_list, write_sweep_json
from ..report.prometheus import write_prom_file
from ..report.tables import make_console
from ..run.interrupts import InterruptGate
from ..run.request import Judging, LinkOptions, Reach
from ..run.runtime import Runtime
from ..slurm.nodelist import in_slurm_job, job_hosts_argument
from .connect import connect
from .groups import judging_options, link_options, reach_options
from .helptext import SectionedCommand, epilog
from .logs import configure_logging, verbose_option
from .options import (
    check_outputs,
    deadline_option,
    dtype_option,
    exclude_file_option,
    json_option,
    max_gpu_mem_option,
    node_python_option,
    probes_option,
)
from .probe import listed_probe_names
from .progress import make_progress
from .textout import echo_text


@click.command(cls=SectionedCommand,
    short_help="Check a job's nodes within a time budget; say (or drain) which it should not get.",
    epilog=epilog(
    ["gpudiag preflight --budget 90 --drain   # in a job: its nodes",
     "gpudiag preflight --here --hosts \"$SLURMD_NODENAME\" --budget 60 --drain",
     "gpudiag preflight --simulate examples/fleet.json --hosts 'node[001-004]'"],
    [(ExitCode.OK, "healthy"),
     (ExitCode.FAIL, "a fail finding: the only outcome --drain drains (also an output not written after a drain)"),
     (ExitCode.USAGE, "bad input, or an output that could not be written (one line on stderr names it)"),
     (ExitCode.UNCHECKED, "inconclusive: something could not be checked, within the budget or at all; never drains"),
     (ExitCode.INTERNAL, "gpudiag itself failed: inconclusive, never drains"),
     (ExitCode.INTERRUPTED, "interrupted: drains nothing")]))
@click.option("--hosts", "hosts_argument", default=None, metavar="FILE|SET|-",
              help="The nodes: a hosts file, a host set such as 'gpu[01-04]', or - for stdin (default: "
                   "$SLURM_JOB_NODELIST, in a job or a prolog).")
@reach_options(
    here_help="The one host named is this machine: probe it directly, without SSH or srun (a prolog or health "
              "check on the node: --here --hosts \"$SLURMD_NODENAME\").",
    simulate_help="Check nodes of a simulated fleet (with --hosts or in a job: those of its nodes) instead of real "
                  "hosts.",
    launcher_help="How the probes reach the nodes: ssh, or slurm (srun inside the job).",
    bundle_dir_help="slurm: a folder the nodes share where the probe bundle is staged.")
@click.option("--budget", "budget_s", type=click.FloatRange(min=1), default=DEFAULT_BUDGET_S, show_default=True,
              metavar="S", help="Seconds the whole check may take; what does not finish is unchecked (exit 3).")
@click.option("--drain", is_flag=True,
              help="Drain the nodes of fail findings whose action takes a node out of service (drain, reset_gpu, "
                   "reboot): scontrol update NodeName=... State=DRAIN Reason=\"gpudiag: CHECKS: ...\" (without it, the "
                   "command is printed).")
@click.option("--undrain", is_flag=True,
              help="Return to service the nodes gpudiag drained that pass this run and in it passed again each "
                   "check their reason names ('gpudiag: gemm: ...'); a node drained by anyone else, or for a check "
                   "this run did not make, stays drained and is named with why.")
@click.option("--scontrol", "scontrol", default="scontrol", show_default=True, metavar="PATH",
              help="The scontrol command that drains, reads and resumes nodes; each call ends within what is left "
                   "of the budget (5 s at least for them all).")
@probes_option(f"default: {','.join(DEFAULT_PROBES)}; the budget plans their load")
@link_options("Link tests between the nodes (two or more), from the same budget: screen (two rounds forming a "
              "cycle, then confirm rounds), full (every pair: more rounds), none; auto: screen.",
              tuning=False, no_links=True)
@deadline_option(None, " (default: planned within --budget; given, the planned one is capped at it)")
@node_python_option("python3", "The nodes' Python interpreter (it needs torch for the GPU probes).")
@dtype_option
@max_gpu_mem_option
@judging_options(store_help="SQLite store with the baseline; the check is kept there (default: "
                            "$XDG_DATA_HOME/gpudiag/gpudiag.db).",
                 no_store_help="No store: judged against the SKU figures and the nodes alone.", job=True)
@exclude_file_option("Write the nodes a job should not get here.")
@json_option("Write the sweep document with a 'preflight' part (plan, drains).")
@click.option("--json-detail", type=click.Choice(DETAILS), default=COMPACT, show_default=True,
              help="How much of each node's records the document keeps.")
@click.option("--prom-file", default=None, metavar="PATH.prom", help="Write a node_exporter textfile here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress display.")
@verbose_option
def preflight(hosts_argument: str | None, reach: Reach, budget_s: float, drain: bool, undrain: bool, scontrol: str,
              probe_list: str, links: LinkOptions, deadline: float | None, python: str, dtype: str,
              max_gpu_mem: int | None, judging: Judging, exclude_file: str | None, json_path: str | None,
              json_detail: str, prom_file: str | None, quiet: bool, verbose: int) -> ExitCode:
    """Check a job's nodes before it starts: GEMM, memory bandwidth, telemetry, and a link screen
    where there are two nodes or more, within --budget seconds, against the stored baseline, the SKU
    figures and the live peers. Prints the plan first and one summary line last.
    """
    started = time.monotonic()
    configure_logging(quiet, verbose)
    stdin: TextIO = sys.stdin
    if hosts_argument is None:  # in a job or a prolog: its nodes (of a simulated fleet too)
        hosts_argument, stdin = job_hosts_argument(os.environ) or (None, stdin)
    request = PreflightRequest(
        hosts_argument=hosts_argument, budget_s=budget_s, reach=reach, judging=judging, links=links,
        python=python, dtype=dtype, max_gpu_mem_mib=max_gpu_mem,
        probes=listed_probe_names(probe_list) if probe_list else DEFAULT_PROBES, deadline_s=deadline,
        drain=drain, undrain=undrain, scontrol=scontrol, slurm_gpus=undrain or in_slurm_job(os.environ))
    check_request(request)
    names, hosts_stdin = host_text(request, stdin)
    if reach.here and len(names) != 1:
        raise InputError(f"--here probes this machine: name it as one host, not {len(names)}")
    plan = make_plan(request, names)
    check_outputs(json_path, exclude_file, prom_file)
    to_stderr = json_path == "-"  # stdout carries the document
    for line in plan.lines():
        click.echo(line, err=to_stderr)
    with InterruptGate().installed() as gate:
        run = run_preflight(request, plan, Runtime(hosts_stdin, make_progress(quiet), gate, connect=connect), started)
        output_errors = _write_outputs(run, json_path, json_detail, exclude_file, prom_file)
        _print_report(run, to_stderr, output_errors)
    if gate.received:
        return ExitCode.INTERRUPTED
    return outputs_exit_code(run, output_errors)


def outputs_exit_code(run: PreflightRun, output_errors: list[str]) -> ExitCode:
    """The exit code once the outputs are written: the run's own; where an output could not be
    written, 1 when nodes were drained (the drain happened: a hook must see the fail), else 2
    (an output error)."""
    if not output_errors:
        return run.exit_code
    return ExitCode.FAIL if run.drained else ExitCode.USAGE


def _write_outputs(run: PreflightRun, json_path: str | None, json_detail: str, exclude_file: str | None,
                   prom_file: str | None) -> list[str]:
    """Write each output asked for; one that cannot be written does not stop the others (the
    drains are done by now: what happened must still be said). Returns each failure's message."""
    result = run.result
    errors = []
    if json_path is not None:  # the sweep document with the pre-flight's own part as its last field
        errors += _written(lambda: write_sweep_json(result, json_path, json_detail, {"preflight": run.to_dict()}),
                           "--json")
    if exclude_file is not None:
        errors += _written(lambda: write_exclude_list(result, exclude_file), "--exclude-file")
    if prom_file is not None:
        errors += _written(lambda: write_prom_file(result.summary(), prom_file),
                           "--prom-file")
    return errors


def _written(write: Callable[[], None], option: str) -> list[str]:
    """[] when ``write`` wrote its output, else [its error, naming ``option``]."""
    try:
        write()
    except OutputError as error:
        return [f"{option} {error}"]
    return []


def _print_report(run: PreflightRun, to_stderr: bool, output_errors: list[str]) -> None:
    """The per-host table (on a terminal), the report (its findings last), then the drains, the
    outputs that could not be written, and the summary line: plain lines unless on a terminal."""
    stream = sys.stderr if to_stderr else sys.stdout
    if stream.isatty():  # the per-host figures first: the findings and the summary line end the screen
        render_sweep_table(run.result, make_console(stderr=to_stderr))
    echo_text(render_report(run.result.summary(), "text", outputs=None), err=to_stderr)
    for warning in run.result.warnings:
        click.echo(f"gpudiag: warning: {warning}", err=True)
    for line in action_lines(run):
        click.echo(line, err=to_stderr)
    for error in output_errors:
        click.echo(f"gpudiag: error: {error}", err=True)
    click.echo(summary_line(run, output_errors), err=to_stderr)
