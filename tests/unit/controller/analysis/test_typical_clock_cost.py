"""A key's typical clock cost (gpudiag.analysis.clocks): the median of its GPUs' clock costs under
load, from every n-th GPU of a large key (clocks.TYPICAL_COST_GPUS at most), every GPU of a
smaller one."""

from __future__ import annotations

import random
import statistics

import pytest

from gpudiag.analysis.clocks import typical_clock_costs
from gpudiag.analysis.measurements import KeyInfo, Measurement

KEY = "gemm.tflops bf16"
INFO = KeyInfo(KEY, "gemm", "tflops", {"dtype": "bf16"}, "TFLOP/s", "NVIDIA H100 80GB HBM3")


def _fleet(hosts: int, rng: random.Random) -> tuple[list[Measurement], dict[str, dict[str, float | None]]]:
    measurements, costs = [], {}
    for host in range(hosts):
        name = f"node{host:05d}"
        costs[name] = {}
        for gpu in range(8):
            uuid = f"GPU-{host}-{gpu}"
            measurements.append(Measurement(name, f"cuda:{gpu}", uuid, INFO, 700.0))
            # a power-capped fleet: 3 % below the maximum clock, 1 % apart; a few with no clocks
            costs[name][uuid] = None if gpu == 7 and host % 5 == 0 else max(0.0, rng.gauss(3.0, 1.0))
    return measurements, costs


def test_a_small_key_takes_every_gpu_and_a_large_one_every_nth():
    rng = random.Random(1)
    small, small_costs = _fleet(64, rng)
    every = [cost for host in small_costs.values() for cost in host.values() if cost is not None]
    assert typical_clock_costs({KEY: small}, small_costs)[KEY] == statistics.median(every)
    large, large_costs = _fleet(10_000, rng)
    whole = statistics.median(cost for host in large_costs.values() for cost in host.values() if cost is not None)
    typical = typical_clock_costs({KEY: large}, large_costs)[KEY]
    assert typical == pytest.approx(whole, abs=0.05)  # the costs spread 1 %: a 20th of it
    assert KEY not in typical_clock_costs({KEY: large}, {})  # no clocks anywhere: no typical cost
