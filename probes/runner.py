"""``python -m probes``: run the named probes in order and print one JSON line per record.

Every probe runs under its own time budget and the whole run under an overall deadline. If a
probe is still running when the deadline (plus a short grace) passes, a watchdog writes an
``error`` record for it and ends the process with exit status 124, like ``timeout`` would.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from . import gemm, hostfacts, membw, p2p, pause, pcie, smclock, telemetry, xid
from .catalog import CATALOG, CATALOG_FILE, DEFAULT_PROBE_NAMES, DTYPES, PROBE_NAMES, CatalogError
from .context import Deadline, ProbeContext
from .devices import DeviceUnavailable
from .records import Record, failed, skipped, write_records
from .timing import DeadlineReached

ProbeRun = Callable[[ProbeContext], Iterator[Record]]


@dataclass(frozen=True)
class ProbeSpec:
    """A probe's name, entry point, and time budget: ``base_s + per_duration * duration_s``.
    ``by_default``: whether it runs when no probe is named (False: only when named)."""

    name: str
    run: ProbeRun
    metric: str
    base_s: float
    per_duration: float
    by_default: bool = True

    def budget_s(self, duration_s: float) -> float:
        return self.base_s + self.per_duration * duration_s


# Each probe's entry point and time budget (base_s, per_duration).
RUNS: dict[str, tuple[ProbeRun, float, float]] = {
    "facts": (hostfacts.run, 15.0, 0.0),
    "telemetry": (telemetry.run_node, 30.0, 0.0),
    "xid": (xid.run, 70.0, 0.0),
    "gemm": (gemm.run, 60.0, 10.0),
    "membw": (membw.run, 30.0, 10.0),
    "p2p": (p2p.run, 120.0, 0.0),
    "pcie": (pcie.run, 60.0, 0.0),
    "smclock": (smclock.run, 90.0, 2.0),
}
if set(RUNS) != set(PROBE_NAMES):
    raise CatalogError(f"{CATALOG_FILE}: the catalogue's probes ({', '.join(PROBE_NAMES)}) are not the ones "
                       f"this bundle runs ({', '.join(RUNS)})")
# The probes, in the order they run (catalog.json: PROBE_NAMES, each one's headline metric and
# whether it runs by default): facts and telemetry first, while the GPUs are idle; then the kernel
# log's Xid history (gpudiag triage), before any load can hang a failing GPU. xid runs only when
# named: a sweep does not read kernel logs.
PROBES: tuple[ProbeSpec, ...] = tuple(
    ProbeSpec(entry.name, RUNS[entry.name][0], entry.metric, *RUNS[entry.name][1:], by_default=entry.by_default)
    for entry in CATALOG.probes)

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_DEADLINE = 124
DEADLINE_GRACE_S = 5.0


class RecordWriter:
    """Writes records to a stream one whole line at a time, from any thread."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.current_probe: ProbeSpec | None = None

    def write(self, record: Record) -> None:
        with self._lock:
            write_records([record], self._stream)

    def write_line(self, line: str) -> None:
        """One line as it is (a record a pause child printed, already JSON), flushed at once."""
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m probes", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="PROBE",
                        help=f"probes to run (default: all but xid): {', '.join(PROBE_NAMES)}")
    parser.add_argument("--duration", type=float, default=1.0, metavar="S",
                        help="seconds of timed load per probe and GPU (default 1)")
    parser.add_argument("--max-gpu-mem", type=int, default=None, metavar="MIB",
                        help="most GPU memory (MiB) one probe may take on one GPU")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16", help="GEMM data type")
    parser.add_argument("--sequential", action="store_true", help="load one GPU at a time")
    parser.add_argument("--deadline", type=float, default=600.0, metavar="S",
                        help="overall deadline for the whole run (seconds)")
    parser.add_argument("--kernel-dir", default=None, metavar="DIR",
                        help="folder of the CUDA kernel sources (default: cuda_kernels/ beside probes/)")
    parser.add_argument("--pause", action="store_true",
                        help="a job is paused on these GPUs: size each GPU's probes to the memory it left free "
                             "(NVML), one GPU per child process, never touching its processes (probes/pause.py)")
    arguments = parser.parse_args(argv)
    unknown = [name for name in arguments.names if name not in PROBE_NAMES]
    if unknown:
        parser.error(f"unknown probe {unknown[0]!r}; choose from {', '.join(PROBE_NAMES)}")
    return arguments


def selected(names: Sequence[str]) -> list[ProbeSpec]:
    """The named probes in run order (those that run by default when none is named)."""
    wanted = set(names) or set(DEFAULT_PROBE_NAMES)
    return [spec for spec in PROBES if spec.name in wanted]


def run_probes(specs: Sequence[ProbeSpec], ctx: ProbeContext, writer: RecordWriter) -> None:
    """Run each probe under its budget, writing records as they come."""
    for spec in specs:
        if ctx.deadline.expired():
            writer.write(skipped(spec.name, "host", spec.metric,
                                 "the run's overall deadline passed before this probe started"))
            continue
        writer.current_probe = spec
        probe_ctx = ctx.with_deadline(ctx.deadline.sooner(spec.budget_s(ctx.duration_s)))
        try:
            for record in spec.run(probe_ctx):
                writer.write(record)
        except DeviceUnavailable as missing:
            writer.write(skipped(spec.name, "host", spec.metric, str(missing)))
        except DeadlineReached as error:
            writer.write(failed(spec.name, "host", spec.metric, f"deadline: {error}"))
        except Exception as error:  # noqa: BLE001 - one probe's bug must not lose the others' records
            traceback.print_exc(file=sys.stderr)
            writer.write(failed(spec.name, "host", spec.metric,
                                f"probe crashed: {type(error).__name__}: {error}"))
        writer.current_probe = None


def start_watchdog(deadline: Deadline, writer: RecordWriter) -> None:
    """End the process when the deadline plus grace passes, recording which probe was running."""

    def watch() -> None:
        time.sleep(deadline.left_s() + DEADLINE_GRACE_S)
        spec = writer.current_probe
        if spec is not None:
            writer.write(failed(spec.name, "host", spec.metric,
                                "the run's overall deadline passed while this probe was running"))
        os._exit(EXIT_DEADLINE)  # a probe stuck in a CUDA call cannot be unwound by raising

    threading.Thread(target=watch, name="probe-watchdog", daemon=True).start()


def default_kernel_dir() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda_kernels")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m probes``; returns the process exit status."""
    arguments = parse_arguments(sys.argv[1:] if argv is None else argv)
    try:
        ctx = ProbeContext(duration_s=arguments.duration, max_gpu_mem_mib=arguments.max_gpu_mem,
                           dtype=arguments.dtype, sequential=arguments.sequential,
                           kernel_dir=arguments.kernel_dir or default_kernel_dir(),
                           deadline=Deadline.after(arguments.deadline))
    except ValueError as error:
        print(f"python -m probes: {error}", file=sys.stderr)
        return EXIT_USAGE
    writer = RecordWriter(sys.stdout)
    start_watchdog(ctx.deadline, writer)
    # Before torch starts: cuda:N in NVML's (PCI bus) order, as the pause rooms are read and as
    # nvidia-smi numbers them; the facts still map each cuda:N to its NVML index by UUID.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    if arguments.pause:
        pause.run_paused(selected(arguments.names), ctx, writer, run_probes,
                         cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
    else:
        run_probes(selected(arguments.names), ctx, writer)
    return EXIT_OK
