"""Scale benchmark of the analysis: one 10,000-node x 8-GPU sweep.

Builds the sweep's host documents in memory (the records the probes print: GEMM, memory
bandwidth, PCIe both ways, SM clock, and the telemetry readings the rules use, each GPU's 18
NVLinks with their error counters among them; with --p2p also
the 84 NVLink pair records per node), with a few slow GPUs, then times ``analyse`` and measures
its peak memory with tracemalloc (the input is built before tracing starts). Targets: <= 1 s and
<= 1 GiB. The wall time is printed as a ratio to a baseline pass over the same records done in
the same process (a loop that only reads every value), so a noisy machine shows as both moving.

Then whole simulated sweeps (``gpudiag sweep --simulate``: every probe, a link screen, the store
and the compact JSON) in a child process each: wall time, peak memory (the child's maximum
resident set) and the store's and the JSON's bytes a node (targets <= 30 KB and <= 50 KB).

Usage: python bench/analysis_scale.py [--nodes 10000] [--p2p] [--sweep-nodes 500 2000]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpudiag.analysis import SweepReader, analyse  # noqa: E402
from gpudiag.analysis.thresholds import default_thresholds  # noqa: E402
from gpudiag.records import HostRecords, host_records  # noqa: E402
from gpudiag.run.outcome import HostOutcome  # noqa: E402

FACTS = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
         "cuda_version": "12.4", "torch_version": "2.4.0", "gpu_count": 8}
LOAD = {"sm_clock_mhz_median": 1980, "sm_clock_max_mhz": 1980, "clocks_event_reasons": [],
        "pcie_width_min_loaded": 16, "pcie_width_max": 16, "pcie_generation_min_loaded": 5,
        "pcie_generation_max": 5}


def record(probe: str, gpu: int, metric: str, value: float, unit: str, params: dict, details: dict | None = None,
           device: str | None = None) -> dict:
    return {"probe": probe, "device": device or f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": metric,
            "value": value, "unit": unit, "samples": 20, "cv": 0.003, "status": "ok", "reason": None,
            "params": params, "details": details or {}}


def node(name: str, rng: random.Random, slow_gpu: int | None, with_p2p: bool) -> dict:
    results = []
    for gpu in range(8):
        factor = 0.85 if gpu == slow_gpu else 1.0
        results += [
            record("gemm", gpu, "tflops", 740 * factor * rng.gauss(1, 0.01), "TFLOP/s",
                   {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}, dict(LOAD)),
            record("membw", gpu, "bandwidth", 2900 * rng.gauss(1, 0.01), "GB/s",
                   {"memory": "device", "buffer_mib": 1024}),
            record("pcie", gpu, "bandwidth", 55 * rng.gauss(1, 0.01), "GB/s", {"direction": "h2d", "buffer_mib": 256}),
            record("pcie", gpu, "bandwidth", 53 * rng.gauss(1, 0.01), "GB/s", {"direction": "d2h", "buffer_mib": 256}),
            record("smclock", gpu, "sm_clock", 1978 * rng.gauss(1, 0.002), "MHz", {"threads_per_block": 512}),
        ]
        for metric, value, unit in (("pcie_width", 16, "lanes"), ("pcie_width_max", 16, "lanes"),
                                    ("ecc_uncorrected_volatile", 0, "count"), ("remapped_rows_pending", 0, "bool"),
                                    ("remapped_rows_failure", 0, "bool"), ("pcie_replay_count", 0, "count")):
            results.append(record("telemetry", gpu, metric, value, unit, {}, device=f"gpu:{gpu}"))
        # An H100's 18 NVLinks as NVML lists them (the error counters judged against the fleet's).
        links = [{"link": link, "state": "up", "crc_errors": 0, "replay_errors": 0, "recovery_errors": 0}
                 for link in range(18)]
        results.append(record("telemetry", gpu, "nvlink_links_up", 18, "count", {}, {"links": links},
                              device=f"gpu:{gpu}"))
        if with_p2p:
            for peer in range(8):
                if peer != gpu:
                    results.append(record("p2p", gpu, "bandwidth", 370 * rng.gauss(1, 0.01), "GB/s",
                                          {"direction": "unidirectional", "src": f"cuda:{gpu}", "dst": f"cuda:{peer}",
                                           "buffer_mib": 256}))
    return {"host": name, "status": "ok", "error": None, "duration_s": 10.0, "facts": dict(FACTS), "results": results}


def reading_pass(hosts: list[HostRecords]) -> float:
    """The same-process baseline: touch every record's value once."""
    started = time.perf_counter()
    total = 0.0
    for host in hosts:
        for result in host.results:
            total += result.value or 0.0
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--p2p", action="store_true", help="also 56 NVLink pair records per node")
    parser.add_argument("--sweep-nodes", type=int, nargs="*", default=[500, 2000],
                        help="whole simulated sweeps of these sizes (0 to skip): memory and bytes per node")
    parser.add_argument("--smoke", action="store_true", help="200 nodes, a 20-node sweep: seconds")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.nodes, arguments.sweep_nodes = 200, [20]
    analysis(arguments.nodes, arguments.p2p)
    for nodes in (n for n in arguments.sweep_nodes if n > 0):
        whole_sweep(nodes)


def analysis(nodes: int, with_p2p: bool) -> None:
    """The analysis of ``nodes`` 8-GPU hosts: all at once from their typed records, and as a sweep
    runs it (each host read as it finishes, then the fleet analysis after the last one)."""
    rng = random.Random(3)
    slow = {f"node{i:05d}": rng.randrange(8) for i in rng.sample(range(nodes), 20)}
    documents = [node(f"node{i:05d}", rng, slow.get(f"node{i:05d}"), with_p2p) for i in range(nodes)]
    hosts = [host_records(document) for document in documents]
    records = sum(len(h.results) for h in hosts)
    baseline_s = reading_pass(hosts)
    tracemalloc.start()
    started = time.perf_counter()
    result = analyse(hosts, default_thresholds())
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    started = time.perf_counter()
    analyse(hosts, default_thresholds())
    untraced = time.perf_counter() - started
    # As a sweep runs it: each host read in its worker thread as it finishes (a HostOutcome keeps
    # its reading), then the fleet analysis after the last host joins the readings.
    reader = SweepReader()
    outcomes = [HostOutcome(h.host, "ok", None, 10.0, h.facts, h.results) for h in hosts]
    started = time.perf_counter()
    for outcome in outcomes:
        outcome.reading = reader.read(outcome)
    per_host_s = (time.perf_counter() - started) / nodes
    started = time.perf_counter()
    analyse(outcomes, default_thresholds())
    after_last = time.perf_counter() - started
    # The pipeline re-tests the suspects' hosts and analyses again: fresh noise, same faults.
    suspect_hosts = sorted({s.measurement.host for s in result.suspects})
    retest = [node(name, rng, slow.get(name), with_p2p) for name in suspect_hosts]
    for host in retest:
        for item in host["results"]:
            if "mode" in item["params"]:
                item["params"] = {**item["params"], "mode": "sequential"}
    retest_records = [host_records(host) for host in retest]
    started = time.perf_counter()
    final = analyse(outcomes, default_thresholds(), retest_hosts=retest_records)
    second = time.perf_counter() - started
    named = {(f.host, f.gpu) for f in final.findings}
    found = sum((host, gpu) in named for host, gpu in slow.items())
    print(f"analysis of {nodes} nodes x 8 GPUs, {records:,} records{' (with NVLink pairs)' if with_p2p else ''}:")
    print(f"  all at once from typed records: {untraced:.2f} s untraced ({elapsed:.2f} s under tracemalloc); "
          f"{untraced / baseline_s:.0f}x a bare pass over the values ({baseline_s * 1000:.0f} ms)")
    print(f"  as a sweep runs it: {per_host_s * 1000:.2f} ms to read each host as it finishes (in its worker "
          f"thread, beside the probing), then {after_last:.2f} s after the last host")
    print(f"  peak memory of the analysis {peak / 2**20:.0f} MiB")
    print(f"  first pass: {len(result.suspects)} suspects on {len(suspect_hosts)} hosts; after their re-test "
          f"({second:.2f} s): {len(final.findings)} findings, {found} of the {len(slow)} slow GPUs named")
    print("targets: <= 1 s after the last host, and <= 1 GiB")


# gpudiag as a child process that says, as it exits, its own peak resident memory (VmHWM of its
# own image: a fork's copy of this process, before the exec, does not count as the child's rusage would).
PEAK_REPORTING_SWEEP = """
import atexit, sys
def peak():
    with open('/proc/self/status') as status:
        sys.stderr.write(next((line for line in status if line.startswith('VmHWM:')), 'VmHWM: unknown\\n'))
atexit.register(peak)
from gpudiag.cli.main import main
sys.argv = ['gpudiag', *sys.argv[1:]]
main()
"""


def whole_sweep(nodes: int) -> None:
    """``gpudiag sweep --simulate`` of ``nodes`` 8-GPU H100 nodes (every probe, a link screen, the
    store and the compact JSON) in a child process: its wall time, peak memory and bytes a node."""
    fleet = json.loads((ROOT / "gpudiag" / "data" / "demo_fleet.json").read_text())
    fleet["nodes"] = nodes
    names = {fleet["name_format"].format(number) for number in range(1, nodes + 1)}
    fleet["faults"] = [fault for fault in fleet["faults"]  # the demo's faults on nodes this fleet has
                       if all(fault[end] in names for end in ("host", "a", "b") if end in fault)]
    with tempfile.TemporaryDirectory(prefix="gpudiag-scale-") as folder:
        path = Path(folder)
        (path / "fleet.json").write_text(json.dumps(fleet))
        first = _sweep_once(path, nodes)
        store = _store_bytes(path)
        document = (path / "sweep.json").stat().st_size
        # A second sweep into the same store: what the host's last sweep already stored (its
        # telemetry, here all of it) is not stored again, so it adds less than the first.
        second = _sweep_once(path, nodes)
        added = _store_bytes(path) - store
    print(f"whole sweep of {nodes} simulated nodes (every probe, link screen, store, compact JSON): {first[0]:.1f} s, "
          f"peak memory {first[1]}; store {store / nodes / 1000:.1f} KB a node, JSON "
          f"{document / nodes / 1000:.1f} KB a node")
    print(f"  a second sweep into that store: {second[0]:.1f} s ({second[0] / first[0]:.2f}x the first), peak memory "
          f"{second[1]}; adds {added / nodes / 1000:.1f} KB a node ({added / store:.2f}x the first)")
    print("targets: store <= 30 KB and JSON <= 50 KB a node; <= 1 GiB at 10,000 nodes")


def _sweep_once(path: Path, nodes: int) -> tuple[float, str]:
    """One simulated sweep into the store and JSON in ``path``: its wall time and peak memory."""
    started = time.perf_counter()
    argv = ["sweep", "--simulate", str(path / "fleet.json"), "-q", "--store", str(path / "gpudiag.db"),
            "--json", str(path / "sweep.json"), "--links", "screen"]
    done = subprocess.run([sys.executable, "-c", PEAK_REPORTING_SWEEP, *argv], capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"the {nodes}-node sweep exited {done.returncode}: {done.stderr[-2000:]}")
    peak = [f"{int(line.split()[1]) / 1024:.0f} MiB" for line in done.stderr.splitlines()
            if line.startswith("VmHWM:") and line.split()[1].isdigit()]
    return wall, peak[-1] if peak else "unknown"


def _store_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("gpudiag.db*"))


if __name__ == "__main__":
    main()
