"""Benchmark: the controller's memory against the size of the host argument.

Two parts, in the same run:
- folding host labels into a node set (what every report, exclude line and ``scontrol`` call does
  with a host list): gpudiag's ``fold_hosts`` against ClusterShell's ``NodeSet.fromlist`` on node
  names (one run of digits) and on addresses with a port (four runs and a port), each timed and
  its peak traced with tracemalloc, as a ratio to ClusterShell in the same process;
- a whole ``gpudiag sweep`` in a child process over N hosts that refuse at once (loopback
  addresses ``127.a.b.c:1``: every ``ssh -G`` lookup, connection attempt, finding, document and
  report of a real sweep, with no network wait), its peak resident memory (the kernel's ru_maxrss)
  for a small and a large N; the difference gives the memory a host costs, projected to the
  largest host list gpudiag takes (MAX_HOSTS). Target: under 200 MiB at MAX_HOSTS.

Usage: python bench/host_scale.py [--hosts 20000] [--fold 100000]
       python bench/host_scale.py --smoke      (300 hosts, 5,000 labels: under a minute)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT))

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet  # noqa: E402
from limited_run import run_limited  # noqa: E402

from gpudiag.hosts import MAX_HOSTS, fold_hosts  # noqa: E402

TARGET_MIB = 200.0
SMALL_SWEEP = 100


def _address(index: int) -> str:
    return f"127.{1 + index // 65536}.{index // 256 % 256}.{index % 256}"


def _traced(fold: Callable[[list[str]], str], labels: list[str]) -> tuple[float, float, str]:
    """(seconds, traced peak MiB, text) of one fold of ``labels``."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        text = fold(labels)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return elapsed, peak / 2**20, text


def _clustershell(labels: list[str]) -> str:
    return str(NodeSet.fromlist(labels, resolver=RESOLVER_NOGROUP))


def fold_rows(count: int) -> None:
    print(f"folding {count} labels (seconds under tracemalloc, traced peak):")
    print(f"  {'labels':<24} {'gpudiag s':>9} {'MiB':>7} {'ClusterShell s':>14} {'MiB':>7} {'memory ratio':>12}")
    for name, labels in (("node names", [f"node{i:06d}" for i in range(count)]),
                         ("addresses with a port", [f"{_address(i)}:22" for i in range(count)])):
        ours_s, ours_mib, ours = _traced(fold_hosts, labels)
        theirs_s, theirs_mib, theirs = _traced(_clustershell, labels)
        if set(NodeSet(ours, resolver=RESOLVER_NOGROUP)) != set(labels):
            raise SystemExit(f"{name}: the folded text does not expand to the labels: {ours[:200]}")
        same = "same text" if ours == theirs else "other text, same labels"
        print(f"  {name:<24} {ours_s:>9.2f} {ours_mib:>7.1f} {theirs_s:>14.2f} {theirs_mib:>7.1f} "
              f"{ours_mib / theirs_mib:>11.2f}x  ({same}: {ours[:60]})")


def sweep_peak_mib(count: int, folder: Path) -> tuple[float, float, int]:
    """(peak RSS MiB, wall s, exit status) of a sweep of ``count`` refusing hosts."""
    hosts = folder / f"hosts{count}.txt"
    hosts.write_text("".join(f"{_address(i)}:1\n" for i in range(count)))
    (folder / "ssh_config").write_text("")
    (folder / "known_hosts").write_text("")
    run = run_limited([sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(hosts), "--ssh-config",
                       str(folder / "ssh_config"), "--known-hosts", str(folder / "known_hosts"), "--links", "none",
                       "--probes", "facts", "--no-store", "-q", "--host-timeout", "5", "--connect-timeout", "2",
                       "--json", str(folder / "sweep.json")],
                      timeout_s=3600, cwd=ROOT)
    if run.returncode != 3:  # every host unreachable: not checked
        raise SystemExit(f"the sweep of {count} hosts exited {run.returncode}: {run.stderr[-1500:]}")
    return run.peak_rss_kib / 1024, run.wall_s, run.returncode


def sweep_rows(count: int) -> None:
    print(f"a whole sweep of hosts that refuse at once (child process, peak RSS), {os.cpu_count()} CPUs:")
    with tempfile.TemporaryDirectory(prefix="gpudiag-host-scale-") as name:
        folder = Path(name)
        small, small_s, _ = sweep_peak_mib(SMALL_SWEEP, folder)
        large, large_s, _ = sweep_peak_mib(count, folder)
    per_host_kib = max(0.0, large - small) * 1024 / (count - SMALL_SWEEP)
    projected = small + per_host_kib * (MAX_HOSTS - SMALL_SWEEP) / 1024
    print(f"  {SMALL_SWEEP:>6} hosts: {small:7.1f} MiB, {small_s:6.1f} s")
    print(f"  {count:>6} hosts: {large:7.1f} MiB, {large_s:6.1f} s")
    print(f"  a host costs {per_host_kib:.2f} KiB; projected at {MAX_HOSTS} hosts: {projected:.0f} MiB "
          f"(target < {TARGET_MIB:.0f} MiB: {'met' if projected < TARGET_MIB else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20000, help="hosts of the large sweep (default 20000)")
    parser.add_argument("--fold", type=int, default=100000, help="labels folded (default 100000)")
    parser.add_argument("--smoke", action="store_true", help="300 hosts, 5,000 labels")
    arguments = parser.parse_args()
    fold_rows(5000 if arguments.smoke else arguments.fold)
    sweep_rows(300 if arguments.smoke else max(SMALL_SWEEP + 1, arguments.hosts))


if __name__ == "__main__":
    main()
