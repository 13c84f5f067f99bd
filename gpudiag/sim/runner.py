"""The simulated ``python -m probes`` (probes/runner.py): its command line, every selected probe
in run order under the run's overall deadline, and what the command prints."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from ..records import DEFAULT_PROBE_NAMES, DTYPES, HEADLINE_METRICS, PROBE_NAMES
from ..transport import CommandResult
from .pause import GPU_PROBES, run_paused
from .printed import BundleCall, not_ok
from .probes import PROBES
from .state import Draw, NodeState

# Simulated wall time (s) the node's Python takes to import torch.
STARTUP_S = 4.0
# A probe still running this long (s) past the deadline is ended by the watchdog (probes/runner.py).
DEADLINE_GRACE_S = 5.0


class BundleUsage(Exception):
    """The command line is not one the bundle accepts; the message is argparse's complaint."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BundleUsage(message)


def parse_bundle_argv(argv: Sequence[str]) -> BundleCall:
    """``[python, -m, probes, ...]`` as the bundle's runner reads it. Raises BundleUsage."""
    if len(argv) < 3 or list(argv[1:3]) != ["-m", "probes"]:
        raise BundleUsage(f"a simulated node only runs the probe bundle (python -m probes), not {list(argv)!r}")
    parser = _Parser(prog="python -m probes", add_help=False)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--duration", type=float, default=1.0)
    parser.add_argument("--max-gpu-mem", type=int, default=None)
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--sequential", action="store_true")
    parser.add_argument("--deadline", type=float, default=600.0)
    parser.add_argument("--kernel-dir", default=None)
    parser.add_argument("--pause", action="store_true")
    arguments = parser.parse_args(list(argv[3:]))
    unknown = [name for name in arguments.names if name not in PROBE_NAMES]
    if unknown:
        raise BundleUsage(f"unknown probe {unknown[0]!r}; choose from {', '.join(PROBE_NAMES)}")
    if arguments.duration <= 0 or (arguments.max_gpu_mem is not None and arguments.max_gpu_mem <= 0):
        raise BundleUsage("duration and max GPU memory must be positive")
    return BundleCall(tuple(arguments.names), arguments.duration, arguments.max_gpu_mem, arguments.dtype,
                      arguments.sequential, arguments.deadline, arguments.pause)


@dataclass(frozen=True)
class BundleRun:
    """What the simulated bundle printed: each line with the simulated time (s) it appeared at."""

    lines: tuple[tuple[float, str], ...]
    exit_status: int
    duration_s: float
    stderr: str = ""

    def command_result(self, timeout_s: float) -> CommandResult:
        """The command's result; past ``timeout_s`` only the lines printed by then, and a timeout."""
        if self.duration_s > timeout_s:
            stdout = "".join(line + "\n" for at_s, line in self.lines if at_s <= timeout_s)
            return CommandResult(exit_status=None, stdout=stdout, stderr="", timed_out=True, duration_s=timeout_s)
        return CommandResult(exit_status=self.exit_status, stdout="".join(line + "\n" for _, line in self.lines),
                             stderr=self.stderr, timed_out=False, duration_s=self.duration_s)


def run_bundle(call: BundleCall, node: NodeState, draw: Draw) -> BundleRun:
    """Every selected probe in run order, under the bundle's deadline, as JSON lines; with
    ``--pause`` the GPU probes after the others, as gpudiag/sim/pause.py says."""
    wanted = set(call.names) or set(DEFAULT_PROBE_NAMES)
    names = [name for name in PROBE_NAMES if name in wanted]
    gpu_names = tuple(name for name in names if name in GPU_PROBES)
    if not (call.pause and gpu_names and node.cuda_gpus):  # no GPU torch sees: probes/pause.py runs them as usual
        return _run_in_order(names, call, node, draw)
    first = _run_in_order([name for name in names if name not in GPU_PROBES], call, node, draw)
    if first.exit_status != 0:
        return first
    records, end_s = run_paused(replace(call, names=gpu_names), node, draw, first.duration_s, STARTUP_S, run_bundle)
    lines = first.lines + tuple((at_s, _line(record)) for at_s, record in records)
    return BundleRun(lines, 0, end_s)


def _run_in_order(names: Sequence[str], call: BundleCall, node: NodeState, draw: Draw) -> BundleRun:
    clock_s = STARTUP_S
    lines: list[tuple[float, str]] = []
    for name in names:
        if clock_s - STARTUP_S >= call.deadline_s:
            lines.append((clock_s, _line(not_ok("skipped", name, "host", HEADLINE_METRICS[name],
                                                "the run's overall deadline passed before this probe started"))))
            continue
        output = PROBES[name](call, node, draw)
        if clock_s + output.seconds - STARTUP_S > call.deadline_s + DEADLINE_GRACE_S:
            clock_s = STARTUP_S + call.deadline_s + DEADLINE_GRACE_S
            lines.append((clock_s, _line(not_ok("error", name, "host", HEADLINE_METRICS[name],
                                                "the run's overall deadline passed while this probe was running"))))
            return BundleRun(tuple(lines), 124, clock_s)
        clock_s += output.seconds
        lines.extend((clock_s, _line(record)) for record in output.records)
    return BundleRun(tuple(lines), 0, clock_s)


def _line(data: Mapping[str, Any]) -> str:
    return json.dumps(data, allow_nan=False)
