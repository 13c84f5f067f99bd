"""``gpudiag sweep``: probe every host of the fleet, compare, name the slow parts; and ``gpudiag
demo``, the same over a built-in simulated fleet."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TextIO

import click

from ..errors import InputError
from ..exitcodes import ExitCode
from ..links.tiebreak import EXTRA_PAIR_TESTS_PER_HOST
from ..pause import (
    DEFAULT_REFERENCE_PEERS,
    PAUSE_BUDGET_S,
    PAUSE_DEADLINE_S,
    FocusRequest,
    check_pause_backend,
    pause_budget_s,
    pause_deadline_s,
)
from ..report import render_report, write_report
from ..report.console import render_sweep_table
from ..report.detail import COMPACT, DETAILS
from ..report.document import write_exclude_list, write_sweep_json
from ..report.prometheus import write_prom_file
from ..report.tables import make_console
from ..run.fanout import SweepOptions, SweepResult
from ..run.hostprobe import ProbeOptions
from ..run.interrupts import InterruptGate
from ..run.request import Judging, LinkOptions, Reach, SweepRequest
from ..run.runtime import Runtime
from ..run.sweep import run_sweep
from ..sim import FleetFile, demo_fleet_path
from ..slurm.nodelist import job_hosts_argument
from ..transport.bounded import MIB
from .connect import connect
from .groups import judging_options, link_options, reach_options
from .helptext import FLEET_CODES, USAGE_ROW, SectionedCommand, epilog
from .logs import configure_logging, verbose_option
from .options import (
    check_deadline,
    check_outputs,
    exclude_file_option,
    json_option,
    node_python_option,
    probes_option,
)
from .probe import listed_probe_names, probe_options
from .progress import make_progress
from .textout import echo_text

LINKS_HELP = ("Pairwise node-to-node tests: screen (two rounds forming a cycle, then confirm rounds), full (every "
              "pair), none; auto: screen.")


@click.command(cls=SectionedCommand, epilog=epilog(
    ["gpudiag sweep --hosts 'gpu[01-64]' --json sweep.json --exclude-file ex.txt",
     "gpudiag sweep --hosts hosts.txt -i ~/.ssh/fleet --links full -q",
     "gpudiag sweep --simulate examples/fleet.json --no-store --links none"],
    FLEET_CODES))
@click.option("--hosts", "hosts_argument", default=None, metavar="FILE|SET|-",
              help="A hosts file (one host per line), a host set such as 'gpu[01-64]', or - for stdin.")
@probes_option("default: every probe but xid")
@probe_options
@node_python_option("python3", "The nodes' Python interpreter (it needs torch for the GPU probes).")
@click.option("--fanout", type=click.IntRange(min=1, max=4096), default=64, show_default=True,
              help="Hosts probed at once.")
@link_options(LINKS_HELP)
@click.option("--host-timeout", type=click.FloatRange(min=1), default=None, metavar="S",
              help="Time limit of the probes on each host (default: --deadline plus start-up).")
@json_option("Write the sweep document (schema gpudiag.sweep/1).")
@click.option("--json-detail", type=click.Choice(DETAILS), default=COMPACT, show_default=True,
              help="compact: every figure, P2P as matrices, telemetry as a table per GPU, per-SM arrays only for "
                   "GPUs a finding names (under 50 KB a node); full: every record as the node printed it.")
@click.option("--prom-file", default=None, metavar="PATH.prom",
              help="Write the sweep here as a node_exporter textfile (per-GPU and per-link figures, findings, last "
                   "run; dcgm-exporter's labels), replaced atomically.")
@click.option("-q", "--quiet", is_flag=True, help="No progress display.")
@verbose_option
@judging_options(no_store_help="Keep nothing in the store.",
                 baseline_help="Stored baseline for keys with too few peers (default: 'default', if stored).",
                 retest_help="Report suspects without re-testing them: each stays unconfirmed and unchecked (exit 3, "
                             "on the exclude list).")
@exclude_file_option("Write the hosts a job should not get here, one per line.")
@reach_options(simulate_help="Sweep a simulated fleet instead of real hosts (demos, tests, benchmarks).",
               launcher_help="How the probes reach the nodes: ssh, or slurm (one srun step across the hosts; inside a "
                             "job, --hosts defaults to $SLURM_JOB_NODELIST).",
               fallback=True, bundle_dir_help="slurm: a folder the nodes share where the probe bundle is staged "
                                              "(default: ~/.cache/gpudiag).")
@click.option("--pause", is_flag=True,
              help="A job paused for mitigation holds the GPUs: each GPU's probes are sized to the memory it left "
                   "(read through NVML first), in a process that sees that GPU alone, never touching the job's "
                   "processes; a GPU in exclusive mode or with too little free memory is unchecked, never passed; "
                   f"links over host memory (no nccl); --deadline defaults to {PAUSE_DEADLINE_S:g} s and --budget "
                   f"to {PAUSE_BUDGET_S:g} s.")
@click.option("--budget", "budget_s", type=click.FloatRange(min=1), default=None, metavar="S",
              help="Seconds for the whole sweep: every remote phase ends by then, and what it cut short is "
                   f"unchecked (default: none; {PAUSE_BUDGET_S:g} with --pause).")
@click.option("--suspects", default=None, metavar="HOSTS|rank:LIST",
              help="Probe only these hosts (a host set or file, or rank:3,7: 0-based positions in the host list, "
                   "the job's node ranks) and --reference-peers unsuspected peers each as reference. Where "
                   "the references' own level is shifted, as many further nodes of the list as were probed, and "
                   "one more, are probed too; where their pairs cannot decide, further nodes join the pair tests, "
                   f"at most {EXTRA_PAIR_TESTS_PER_HOST} pair tests with them a probed host.")
@click.option("--reference-peers", type=click.IntRange(min=0, max=64), default=DEFAULT_REFERENCE_PEERS,
              show_default=True, metavar="K",
              help="With --suspects: unsuspected hosts probed per suspect, spread over the host list.")
def sweep(hosts_argument: str | None, probe_list: str, duration: float,
          max_gpu_mem: int | None, dtype: str, sequential: bool, deadline: float, python: str, fanout: int,
          links: LinkOptions, host_timeout: float | None, json_path: str | None, json_detail: str,
          prom_file: str | None, quiet: bool, verbose: int, judging: Judging, exclude_file: str | None, reach: Reach,
          pause: bool, budget_s: float | None, suspects: str | None, reference_peers: int) -> ExitCode:
    """Probe every host of the fleet over SSH, compare each with its peers, name the slow parts."""
    configure_logging(quiet, verbose)
    stdin: TextIO = sys.stdin
    if hosts_argument is None and reach.stand_in is None and reach.launcher == "slurm":
        hosts_argument, stdin = job_hosts_argument(os.environ) or (None, stdin)  # inside a job: its nodes
    if (hosts_argument is None) == (reach.stand_in is None):
        raise InputError("give exactly one of --hosts FILE|SET|- and --simulate FLEET.json")
    names = listed_probe_names(probe_list)
    check_pause_backend(pause, links.pair.backend)
    given = click.get_current_context().get_parameter_source("deadline") != click.core.ParameterSource.DEFAULT
    deadline = pause_deadline_s(pause, deadline, given)
    check_deadline(duration, deadline)
    request = SweepRequest(
        hosts_argument=hosts_argument,
        sweep=SweepOptions(
            probe=ProbeOptions(names=names, duration_s=duration, max_gpu_mem_mib=max_gpu_mem, dtype=dtype,
                               sequential=sequential, deadline_s=deadline, python=python, pause=pause),
            fanout=fanout, host_timeout_s=host_timeout),
        reach=reach, judging=judging, links=links,
        focus=FocusRequest(suspects, reference_peers) if suspects is not None else None,
        budget_s=pause_budget_s(pause, budget_s),
    )
    check_outputs(json_path, exclude_file, prom_file)
    # From here an interrupt stops what runs on the nodes, never the writing of what was gathered.
    with InterruptGate().installed() as gate:
        result = run_sweep(request, Runtime(stdin, make_progress(quiet), gate, connect=connect))
        if result.interrupted:
            gate.say("writing " + (" and ".join(f"{name} {path}" for name, path in (
                ("the sweep document", json_path), ("the exclude list", exclude_file)) if path) or "the report"))
        _write_outputs(result, json_path, exclude_file, json_detail)
        if prom_file is not None:  # its hosts read one at a time, from the sweep's packed outcomes
            write_prom_file(result.summary(), prom_file)
        # the per-host figures first: the findings and the verdict end what a terminal shows
        render_sweep_table(result, make_console(stderr=json_path == "-"))
        for warning in result.warnings:
            click.echo(f"gpudiag: warning: {warning}", err=True)
        outputs = output_words(json_path, exclude_file, prom_file, judging.store_path)
        click.echo(err=json_path == "-")
        echo_text(render_report(result.summary(), "text", outputs=outputs), err=json_path == "-")
    # An interrupt that came after the last remote phase left the outputs whole, and still asked to stop.
    return ExitCode.INTERRUPTED if gate.received else result.exit_code


@click.command(epilog=epilog(
    ["gpudiag demo --output demo   # demo/report.html, gpudiag.db, sweep.json",
     "gpudiag demo -q              # in a new temporary folder it names"],
    [(ExitCode.OK, "the demo ran (it says what a real sweep with its findings would exit)"), USAGE_ROW]))
@click.option("--output", "output_dir", default=None, metavar="DIR",
              help="Folder for the report, store, sweep document and exclude list (default: a new temporary "
                   "one, kept, its path and size said last).")
@click.option("-q", "--quiet", is_flag=True, help="No progress display.")
def demo(output_dir: str | None, quiet: bool) -> ExitCode:
    """Sweep a built-in simulated 64-node H100 fleet with a few faults, every node pair too, and
    write the HTML report.

    Needs no GPU and no cluster; the analysis sees only the measurements, never the faults.
    """
    folder = _demo_folder(output_dir)
    # Every pair of the 64 nodes (the full round robin), so a slow link between two nodes the
    # screen would not pair is named too.
    request = SweepRequest(hosts_argument=None, sweep=SweepOptions(probe=ProbeOptions()),
                           reach=Reach(stand_in=FleetFile(str(demo_fleet_path()))),
                           judging=Judging(store_path=str(folder / "gpudiag.db")), links=LinkOptions(mode="full"))
    with InterruptGate().installed() as gate:
        result = run_sweep(request, Runtime(sys.stdin, make_progress(quiet), gate, connect=connect))
    document = result.to_dict()
    write_sweep_json(result, str(folder / "sweep.json"))
    write_report(render_report(document, "html"), folder / "report.html")
    _write_outputs(result, None, str(folder / "exclude.txt"))
    outputs = [f"the HTML report {folder / 'report.html'}",
               *output_words(str(folder / "sweep.json"), str(folder / "exclude.txt"), None, str(folder / "gpudiag.db"))]
    if output_dir is None:  # a temporary folder is not removed: the report and store are for reading
        outputs.append(f"all kept in {folder} ({_folder_mib(folder):.0f} MiB; remove them with rm -r {folder}, "
                       "or give --output DIR)")
    text = render_report(document, "text", outputs=outputs)
    # a demo exits 0 whatever it finds: its verdict says what a real sweep with these findings would exit
    echo_text(text.replace("verdict: ", "verdict (a real sweep with these findings would exit so): ", 1))
    return ExitCode.OK if not result.interrupted else ExitCode.INTERRUPTED


def output_words(json_path: str | None, exclude_file: str | None, prom_file: str | None,
                 store_path: str | None) -> list[str]:
    """Where a run's outputs went, in words, for its verdict line."""
    named = [("the sweep document", json_path if json_path != "-" else "(stdout)"), ("the exclude list", exclude_file),
             ("the textfile", prom_file), ("the store", store_path)]
    return [f"{what} {where}" for what, where in named if where]


def _demo_folder(output_dir: str | None) -> Path:
    """``--output DIR``, created if need be, else a new temporary folder; InputError when DIR
    cannot be created."""
    if output_dir is None:
        return Path(tempfile.mkdtemp(prefix="gpudiag-demo-"))
    folder = Path(output_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"--output {output_dir}: cannot create the folder ({error.strerror}); "
                         f"give another DIR") from None
    _refuse_planted_store(folder, output_dir)
    return folder


# The demo's store and the files SQLite keeps beside it.
DEMO_STORE_FILES = ("gpudiag.db", "gpudiag.db-wal", "gpudiag.db-shm", "gpudiag.db-journal")


def _refuse_planted_store(folder: Path, output_dir: str) -> None:
    """InputError where the demo's store in ``folder`` (or a file SQLite keeps beside it) is a
    symbolic link, or a file another user owns: in a folder others may write, the demo would write
    its sweep into whatever store it leads to. The outputs it writes whole (report, document,
    exclude list) replace a link instead of following it."""
    for name in DEMO_STORE_FILES:
        path = folder / name
        if path.is_symlink():
            raise InputError(f"--output {output_dir}: {path} is a symbolic link (to {os.readlink(path)}); the demo "
                             "follows no link into another store: remove the link, or give a new DIR")
        if path.exists() and path.stat().st_uid != os.geteuid():
            raise InputError(f"--output {output_dir}: {path} belongs to another user; the demo writes only a store "
                             "of its own: give a new DIR")


def _folder_mib(folder: Path) -> float:
    """The size of the files under ``folder``, in MiB."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / MIB


def _write_outputs(result: SweepResult, json_path: str | None, exclude_file: str | None,
                   json_detail: str = COMPACT) -> None:
    if json_path is not None:
        write_sweep_json(result, json_path, json_detail)
    if exclude_file is not None:
        write_exclude_list(result, exclude_file)
