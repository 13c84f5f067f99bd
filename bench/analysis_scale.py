"""Scale benchmark of the analysis: one 10,000-node x 8-GPU sweep.

Builds the sweep's host documents in memory (the records the probes print: GEMM, memory
bandwidth, PCIe both ways, SM clock, and the telemetry readings the rules use; with --p2p also
the 84 NVLink pair records per node), with a few slow GPUs, then times ``analyse`` and measures
its peak memory with tracemalloc (the input is built before tracing starts). Targets: <= 2 s and
<= 1 GiB. The wall time is printed as a ratio to a baseline pass over the same records done in
the same process (a loop that only reads every value), so a noisy machine shows as both moving.

Usage: python bench/analysis_scale.py [--nodes 10000] [--p2p]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpudiag.analysis import analyse  # noqa: E402
from gpudiag.thresholds import default_thresholds  # noqa: E402

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
                                    ("remapped_rows_failure", 0, "bool")):
            results.append(record("telemetry", gpu, metric, value, unit, {}, device=f"gpu:{gpu}"))
        if with_p2p:
            for peer in range(8):
                if peer != gpu:
                    results.append(record("p2p", gpu, "bandwidth", 370 * rng.gauss(1, 0.01), "GB/s",
                                          {"direction": "unidirectional", "src": f"cuda:{gpu}", "dst": f"cuda:{peer}",
                                           "buffer_mib": 256}))
    return {"host": name, "status": "ok", "error": None, "duration_s": 10.0, "facts": dict(FACTS), "results": results}


def reading_pass(hosts: list[dict]) -> float:
    """The same-process baseline: touch every record's value once."""
    started = time.perf_counter()
    total = 0.0
    for host in hosts:
        for result in host["results"]:
            total += result["value"]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--p2p", action="store_true", help="also 56 NVLink pair records per node")
    parser.add_argument("--smoke", action="store_true", help="200 nodes: seconds")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.nodes = 200
    rng = random.Random(3)
    slow = {f"node{i:05d}": rng.randrange(8) for i in rng.sample(range(arguments.nodes), 20)}
    hosts = [node(f"node{i:05d}", rng, slow.get(f"node{i:05d}"), arguments.p2p) for i in range(arguments.nodes)]
    records = sum(len(h["results"]) for h in hosts)
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
    # The pipeline re-tests the suspects' hosts and analyses again: fresh noise, same faults.
    suspect_hosts = sorted({s.measurement.host for s in result.suspects})
    retest = [node(name, rng, slow.get(name), arguments.p2p) for name in suspect_hosts]
    for host in retest:
        for item in host["results"]:
            if "mode" in item["params"]:
                item["params"] = {**item["params"], "mode": "sequential"}
    started = time.perf_counter()
    final = analyse(hosts, default_thresholds(), retest_hosts=retest)
    second = time.perf_counter() - started
    named = {(f.host, f.gpu) for f in final.findings}
    found = sum((host, gpu) in named for host, gpu in slow.items())
    print(f"analysis of {arguments.nodes} nodes x 8 GPUs, {records:,} records"
          f"{' (with NVLink pairs)' if arguments.p2p else ''}:")
    print(f"  wall {untraced:.2f} s untraced ({elapsed:.2f} s under tracemalloc); "
          f"{untraced / baseline_s:.0f}x a bare pass over the values ({baseline_s * 1000:.0f} ms)")
    print(f"  peak memory of the analysis {peak / 2**20:.0f} MiB")
    print(f"  first pass: {len(result.suspects)} suspects on {len(suspect_hosts)} hosts; after their re-test "
          f"({second:.2f} s): {len(final.findings)} findings, {found} of the {len(slow)} slow GPUs named")
    print("targets: <= 2 s and <= 1 GiB")


if __name__ == "__main__":
    main()
