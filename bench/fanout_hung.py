"""Benchmark of the sweep's fan-out over hung hosts: how long ``gpudiag sweep`` takes when every
host hangs while connecting, and what it prints on stderr.

The hosts are a tarpit on loopback addresses (tests/integration/tarpit.py): half accept the TCP
connection and never send the SSH banner, half never accept it. Every host is ``timeout`` at
``--host-timeout``, and its fan-out slot goes to the next host then, so the sweep should take
about (hosts / fanout) x host-timeout. Target: within 1.5 x that. Before the slots were freed at the
host's deadline, each one stayed taken until paramiko's 15 s banner timeout.

The wall time is the whole ``gpudiag sweep`` command, its start (some 1-2 s of imports) included.

Usage: python bench/fanout_hung.py [--hosts 500] [--fanout 16] [--host-timeout 4]
       python bench/fanout_hung.py --smoke      (48 hosts, --host-timeout 2: seconds)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from tarpit import Tarpit  # noqa: E402

TARGET_FACTOR = 1.5


def sweep_hung(hosts: int, fanout: int, host_timeout_s: float, folder: Path) -> dict[str, object]:
    """Run ``gpudiag sweep -q`` over ``hosts`` hung hosts; its wall seconds, statuses and stderr."""
    config = folder / "ssh_config"
    config.write_text("")  # no user configuration: the hosts file says where each host is
    known = folder / "known_hosts"
    known.write_text("")
    document = folder / "sweep.json"
    with Tarpit(hosts) as tarpit:
        hosts_file = tarpit.write_hosts_file(folder / "hosts.txt")
        command = [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(hosts_file), "--ssh-config", str(config),
                   "--known-hosts", str(known), "--fanout", str(fanout), "--host-timeout", f"{host_timeout_s:g}",
                   "--links", "none", "--probes", "facts", "--no-store", "--json", str(document), "-q"]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        wall_s = time.monotonic() - started
        arrivals = tarpit.arrivals()
    swept = json.loads(document.read_text()) if document.exists() else {"hosts": []}
    span_s = float("nan")
    if "started_at" in swept:
        started_at, finished_at = (datetime.fromisoformat(swept[key]) for key in ("started_at", "finished_at"))
        span_s = (finished_at - started_at).total_seconds()
    return {"wall_s": wall_s, "span_s": span_s, "exit": done.returncode, "stderr": done.stderr.splitlines(),
            "statuses": Counter(host["status"] for host in swept["hosts"]), "arrivals": arrivals,
            "longest_host_s": max((host["duration_s"] for host in swept["hosts"]), default=0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--fanout", type=int, default=16)
    parser.add_argument("--host-timeout", type=float, default=4.0)
    parser.add_argument("--smoke", action="store_true", help="48 hosts at --host-timeout 2")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.hosts, arguments.host_timeout = 48, 2.0
    waves = -(-arguments.hosts // arguments.fanout)
    ideal_s = arguments.hosts / arguments.fanout * arguments.host_timeout
    with tempfile.TemporaryDirectory() as folder:
        run = sweep_hung(arguments.hosts, arguments.fanout, arguments.host_timeout, Path(folder))
    counted: Counter[str] = run["statuses"]  # type: ignore[assignment]
    statuses = " ".join(f"{status} {count}" for status, count in sorted(counted.items()))
    stderr: list[str] = run["stderr"]  # type: ignore[assignment]
    arrivals: list[float] = run["arrivals"]  # type: ignore[assignment]
    print(f"hung-host fan-out: {arguments.hosts} hosts (half silent after accepting, half never accepting), "
          f"fanout {arguments.fanout}, --host-timeout {arguments.host_timeout:g} s, {waves} waves")
    print(f"  sweep wall time: {run['wall_s']:.1f} s (target <= {TARGET_FACTOR:g} x {ideal_s:.1f} s = "
          f"{TARGET_FACTOR * ideal_s:.1f} s) · exit {run['exit']} · statuses: {statuses} · "
          f"longest host {run['longest_host_s']:.1f} s")
    print(f"  of which the sweep itself (its document's started_at to finished_at): {run['span_s']:.1f} s; the rest "
          f"is the command's start (Python and its imports)")
    if len(arrivals) > arguments.fanout:
        print(f"  silent hosts reached: {len(arrivals)} · the first {arguments.fanout} over "
              f"{arrivals[arguments.fanout - 1] - arrivals[0]:.1f} s, host {arguments.fanout + 1} "
              f"{arrivals[arguments.fanout] - arrivals[0]:.1f} s after the first")
    tracebacks = sum(line.startswith("Traceback") for line in stderr)
    print(f"  stderr with -q: {len(stderr)} lines, {tracebacks} tracebacks")
    print(f"  within target: {'yes' if run['wall_s'] <= TARGET_FACTOR * ideal_s else 'NO'}")


if __name__ == "__main__":
    main()
