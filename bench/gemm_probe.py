"""Benchmark of the GEMM probe against the best plain ``torch.matmul`` of the same shape.

Both are measured in this one process, on the same device, so the ratio holds on a noisy,
shared machine. Prints, for each device (every GPU, or the CPU without one):

- the probe's TFLOP/s (median over five probe runs) and the best plain matmul of that shape;
  target ratio >= 0.95;
- the CV of the probe's figure over the five runs; target <= 1 % on a GPU;
- wall time of one probe run, and per GPU when the GPUs are run one at a time; target <= 5 s.

With ``--sku-table`` it prints instead the probe's figure for every dtype and every square size
of the probe's ladder (probes/catalog.json), as gpudiag/data/sku.json's ``gemm_tflops`` holds them.

Usage: python bench/gemm_probe.py [--duration S] [--runs N] [--sku-table]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from probes import gemm  # noqa: E402
from probes.context import Deadline, ProbeContext  # noqa: E402
from probes.rates import tflops  # noqa: E402
from probes.records import coefficient_of_variation  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}


def probe_runs(ctx: ProbeContext, runs: int) -> tuple[dict[str, list[float]], dict[str, dict[str, Any]], list[float]]:
    """``runs`` runs of the probe: per-device TFLOP/s, per-device params, and wall seconds."""
    values: dict[str, list[float]] = {}
    params: dict[str, dict[str, Any]] = {}
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        records = list(gemm.run(ctx.with_deadline(Deadline.after(600))))
        walls.append(time.perf_counter() - started)
        for record in records:
            if record.status != "ok":
                raise SystemExit(f"gemm probe on {record.device}: {record.status}: {record.reason}")
            values.setdefault(record.device, []).append(float(record.value))
            params[record.device] = dict(record.params)
    return values, params, walls


def best_plain_matmul(device: str, size: int, dtype: str, seconds: float) -> float:
    """The best TFLOP/s of plain ``torch.matmul`` batches of this shape over ``seconds``."""
    torch_dtype = DTYPES[dtype]
    a = torch.randn(size, size, dtype=torch_dtype, device=device)
    b = torch.randn(size, size, dtype=torch_dtype, device=device)
    flops = 2 * size**3
    best = 0.0
    ends = time.perf_counter() + seconds
    if device == "cpu":
        torch.matmul(a, b)
        while time.perf_counter() < ends:
            started = time.perf_counter()
            torch.matmul(a, b)
            best = max(best, tflops(flops, time.perf_counter() - started))
        return best
    batch = 10
    for _ in range(20):
        torch.matmul(a, b)
    torch.cuda.synchronize(device)
    while time.perf_counter() < ends:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            torch.matmul(a, b)
        end.record()
        end.synchronize()
        best = max(best, tflops(flops * batch, start.elapsed_time(end) / 1000))
    return best


def sku_table(duration_s: float) -> None:
    """The probe's median TFLOP/s on each GPU for every dtype and size of its ladder, one run each."""
    if not torch.cuda.is_available():
        print("gemm sku table: skipped, no CUDA device (the ladder is the GPU path's)")
        return
    ladder = gemm.GPU_SIZES
    table: dict[str, dict[str, dict[str, float]]] = {}
    try:
        for dtype in DTYPES:
            for size in ladder:
                gemm.GPU_SIZES = (size,)  # the probe picks the largest size that fits: offer one
                for record in gemm.run(ProbeContext(duration_s=duration_s, dtype=dtype)):
                    if record.status != "ok":
                        raise SystemExit(f"gemm {dtype} {size} on {record.device}: {record.status}: {record.reason}")
                    figure = round(float(record.value), 1)
                    table.setdefault(record.device, {}).setdefault(dtype, {})[str(size)] = figure
                    print(f"{record.device:8} {dtype:>4} {size:>6}³ {figure:9.1f} TFLOP/s  cv {record.cv:.2%}")
    finally:
        gemm.GPU_SIZES = ladder
    for device, by_dtype in table.items():
        print(f"gemm sku table, {device} {torch.cuda.get_device_name(int(device.split(':')[1]))}: \"gemm_tflops\": "
              + json.dumps(by_dtype))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=1.0, help="probe --duration (s)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--smoke", action="store_true", help="two short runs: seconds")
    parser.add_argument("--sku-table", action="store_true", help="every dtype and ladder size, once each")
    arguments = parser.parse_args()
    if arguments.sku_table:
        sku_table(0.2 if arguments.smoke else arguments.duration)
        return
    if arguments.smoke:
        arguments.duration, arguments.runs = 0.2, 2
    ctx = ProbeContext(duration_s=arguments.duration, dtype=arguments.dtype)
    values, params, walls = probe_runs(ctx, arguments.runs)
    gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"gemm probe benchmark: {gpu_count or 'no'} GPU(s), torch {torch.__version__}, "
          f"{arguments.runs} probe runs of --duration {arguments.duration:g} s")
    print(f"{'device':8} {'shape':>12} {'probe TFLOP/s':>14} {'best plain':>11} {'ratio':>6} "
          f"{f'CV {arguments.runs} runs':>10}")
    for device, figures in values.items():
        p = params[device]
        plain = best_plain_matmul(device, int(p["m"]), p["dtype"], seconds=max(2.0, arguments.duration))
        median = statistics.median(figures)
        print(f"{device:8} {p['m']:>7}³ {p['dtype']:>4} {median:14.2f} {plain:11.2f} {median / plain:6.3f} "
              f"{100 * coefficient_of_variation(figures):9.2f}%")
    print(f"wall per probe run: median {statistics.median(walls):.2f} s (all devices at once)")
    if gpu_count > 1:
        started = time.perf_counter()
        list(gemm.run(ProbeContext(duration_s=arguments.duration, dtype=arguments.dtype, sequential=True)))
        print(f"wall per GPU, one at a time: {(time.perf_counter() - started) / gpu_count:.2f} s")
    print("targets: ratio >= 0.95; CV <= 1 % on a GPU; wall per GPU <= 5 s")


if __name__ == "__main__":
    main()
