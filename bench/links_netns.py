"""Benchmark of the link phase on real hosts: ``--links screen`` against ``--links full`` over SSH.

Starts N hosts in network namespaces (tests/integration/netns_hosts.py: an sshd each, a management and
a data bridge), every data link held to 200 Mbit/s, one host's port to 50 Mbit/s (a slow NIC) and one
pair's path to 50 Mbit/s (a slow link, two places apart so that only some screens test it). Then runs
``gpudiag sweep`` as a user would (facts only, the tcp pair probe over the data addresses) with
``--links none``, ``screen`` and ``full``, and prints for each the wall time, the link phase's share
of it (against the ``none`` run of the same script), the pair tests and the link findings.

Needs root (network namespaces, tc) and OpenSSH's sshd.

Usage: python bench/links_netns.py [--hosts 8] [--duration 1]
       python bench/links_netns.py --smoke      (4 hosts, 2 s tests: about a minute)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from netns_hosts import NetnsFleet, netns_unavailable_reason  # noqa: E402
from quick_node import quick_facts_python  # noqa: E402

LINE_RATE_MBIT = 200
SLOW_MBIT = 50
LINK_KINDS = ("slow_nic", "slow_link", "link_error", "fleet_shift")
# The node probes are not measured here: every "host" shares this machine's CPUs. Nor are the
# links judged at a real fabric's 5 %: tcp through veth on two shared, busy cores (the test suite's
# other workers) varies by more: twice in a row a healthy pair read low under load named a healthy
# NIC beside the planted faults (75 % below the line rate). A pair here must fall 25 % below its
# level (or under 60 % of the line rate) to be slow.
NODE_THRESHOLDS = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                   '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}, '
                   '"link_deficit": {"value": 25.0, "unit": "percent"}, '
                   '"link_line_rate_efficiency": {"value": 60.0, "unit": "percent"}}')


def sweep(fleet: NetnsFleet, folder: Path, links: str, duration_s: float, python: str) -> tuple[float, dict]:
    """Wall seconds of one ``gpudiag sweep`` and its document; ``python`` is the nodes' Python."""
    known = fleet.write_known_hosts(folder / "known_hosts")
    thresholds = folder / "thresholds.json"
    thresholds.write_text(NODE_THRESHOLDS)
    out = folder / f"{links}.json"
    argv = [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(fleet.write_hosts_file(folder / "hosts",
                                                                                             data_field=True)),
            "--ssh-config", str(fleet.write_ssh_config(folder / "ssh_config", known)), "--known-hosts", str(known),
            "--python", python, "--probes", "facts", "--thresholds", str(thresholds), "--no-store",
            "--json", str(out), "-q", "--links", links, "--net-backend", "tcp", "--net-duration", f"{duration_s:g}",
            "--net-streams", "2", "--net-line-rate", f"{LINE_RATE_MBIT / 1000:g}", "--net-address", "field"]
    if links == "screen":
        argv += ["--screen-stride", "1"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"gpudiag sweep --links {links} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, json.loads(out.read_text())


def named(document: dict) -> str:
    found = sorted(f"{f['kind']} {'–'.join(x for x in (f['host'], f['peer']) if x)}"
                   for f in document["findings"] if f["kind"] in LINK_KINDS)
    return ", ".join(found) or "none"


def run(count: int, duration_s: float, keep: Path | None = None) -> None:
    slow_nic = "node03"
    slow_pair = ("node05", "node06") if count >= 6 else ("node01", "node02")
    with NetnsFleet(count) as fleet, tempfile.TemporaryDirectory(prefix="gpudiag-bench-") as folder:
        fleet.cap_all(LINE_RATE_MBIT)
        fleet.cap_host(slow_nic, SLOW_MBIT)
        fleet.cap_pair(*slow_pair, SLOW_MBIT)
        print(f"{count} hosts in network namespaces, tcp pair tests of {duration_s:g} s each way, 2 streams; "
              f"links at {LINE_RATE_MBIT} Mbit/s, planted: slow_nic {slow_nic}, slow_link {'–'.join(slow_pair)} "
              f"({SLOW_MBIT} Mbit/s)")
        # the facts probe answered at once (tests/integration/quick_node.py): the link phase is measured
        python = quick_facts_python(Path(folder))
        base, _ = sweep(fleet, Path(folder), "none", duration_s, python)
        print(f"{'links':>7}  {'wall s':>7}  {'link phase s':>12}  {'pair tests':>10}  {'phases':<22}  link findings")
        print(f"{'none':>7}  {base:7.1f}  {'-':>12}  {'-':>10}  {'-':<22}  -")
        walls = {}
        for mode in ("screen", "full"):
            wall, document = sweep(fleet, Path(folder), mode, duration_s, python)
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{mode}.json").write_text(json.dumps(document, indent=1))
            walls[mode] = wall - base
            phases: dict[str, int] = {}
            for link in document["links"]:
                phases[link["phase"]] = phases.get(link["phase"], 0) + 1
            text = " ".join(f"{phase} {n}" for phase, n in phases.items())
            print(f"{mode:>7}  {wall:7.1f}  {wall - base:12.1f}  {len(document['links']):>10}  {text:<22}  "
                  f"{named(document)}")
        if walls["screen"] > 0:
            print(f"full / screen link phase: {walls['full'] / walls['screen']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8, help="hosts in the fleet (default 8)")
    parser.add_argument("--duration", type=float, default=1.0, help="seconds of each pair test direction")
    parser.add_argument("--smoke", action="store_true", help="4 hosts, 2 s tests: about a minute")
    parser.add_argument("--keep", type=Path, help="write each sweep's JSON document to this folder")
    args = parser.parse_args()
    reason = netns_unavailable_reason()
    if reason is not None:
        raise SystemExit(f"links_netns: {reason}")
    if args.smoke:
        # Shorter tests read a healthy pair slow when the two cores were busy (0.3 s: under the floor; 1 s: a
        # fresh-clone CI run named a healthy node's NIC in the screen once): 2 s average the dips out.
        run(4, 2.0, args.keep)
    else:
        run(args.hosts, args.duration, args.keep)


if __name__ == "__main__":
    main()
