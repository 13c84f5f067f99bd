"""What a sweep re-tests for its trends (gpudiag.run.trendretest): the steepest slides first,
within a bound the sweep states, and each figure as the mean of the runs that measured it."""

from __future__ import annotations

import random

from gpudiag.analysis.keys import result_key
from gpudiag.analysis.thresholds import default_thresholds
from gpudiag.records import ProbeResult
from gpudiag.run.trendretest import TREND_RETEST_HOSTS, TREND_RETEST_RUNS, plan_trend_retest, retest_means
from gpudiag.store.sweeptrends import RETEST_SLIDE_Z, SlideToRetest, trend_candidates
from gpudiag.store.trend import fleet_trends

FACTS = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
         "cuda_version": "12.4", "torch_version": "2.4.0", "gpu_count": 2}


def _slide(host: str, z: float, probe: str = "gemm", gpu: int | None = 0) -> SlideToRetest:
    return SlideToRetest(host, probe, gpu, f"{probe}.x", z)


def test_the_steepest_slides_are_re_tested_within_the_bound_and_the_rest_are_said():
    slides = sorted([_slide(f"node{index:03d}", -2.0 - index / 10) for index in range(20)]
                    + [_slide("node019", -2.1, "membw", 1)], key=lambda slide: slide.z)
    plan = plan_trend_retest(slides, hosts=100)
    assert len(plan.probes) == TREND_RETEST_HOSTS == 8
    assert sorted(plan.probes) == [f"node{index:03d}" for index in range(12, 20)]  # the steepest hosts
    assert plan.probes["node019"] == ("gemm", "membw")  # a host's every sliding figure, once taken
    assert len(plan.slides) == 9 and len(plan.left) == 12
    assert plan.note() == ("the trend re-test took the steepest slides, on 8 hosts (its most in this sweep); 12 GPUs "
                           "against their siblings more, each slope at least 1 standard error down, on 12 hosts were "
                           "judged on their first run alone")
    assert plan.describe() == (f"re-testing what may slide, 9 GPUs against their siblings, on 8 hosts, "
                               f"{TREND_RETEST_RUNS} runs")
    medians = plan_trend_retest([_slide("node001", -3.0, gpu=None), _slide("node002", -2.0)], hosts=10)
    assert medians.describe() == (f"re-testing what may slide, 1 GPU against its siblings and 1 node median, on "
                                  f"2 hosts, {TREND_RETEST_RUNS} runs")
    # 2 % of a 1,000-host sweep's hosts; nothing left out, nothing said
    assert len(plan_trend_retest(slides, hosts=1000).probes) == 20
    assert plan_trend_retest(slides[:3], hosts=10).note() is None


def _gemm(gpu: int, value: float, status: str = "ok") -> dict:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": None, "metric": "tflops", "value": value,
            "unit": "TFLOP/s", "status": status, "params": {"dtype": "bf16"}}


def test_each_figure_is_the_mean_of_the_runs_that_measured_it():
    runs = [{"host": "node001", "status": "ok", "facts": FACTS, "results": [_gemm(0, 700.0), _gemm(1, 650.0)]},
            {"host": "node001", "status": "ok", "facts": FACTS, "results": [_gemm(0, 706.0), _gemm(1, 0, "error")]},
            {"host": "node001", "status": "timeout", "facts": FACTS, "results": [_gemm(0, 1.0)]},
            {"host": "node002", "status": "ok", "facts": FACTS, "results": [_gemm(0, 690.0)]}]
    means = retest_means(runs, {"node001": ("gemm",), "node002": ("membw",)})
    key = result_key(FACTS, ProbeResult.from_dict(_gemm(0, 1.0)))
    assert key is not None and list(means) == ["node001"]  # node002's GEMM was not what it re-tested
    assert [(f.key, f.gpu, f.value, f.runs) for f in means["node001"]] == [(key, 0, 703.0, 2), (key, 1, 650.0, 1)]


def _history(factors: dict[int, list[float]]) -> list[dict]:
    """Store.host_history rows (newest first) of one GEMM figure, each GPU's level a sweep."""
    sweeps = len(next(iter(factors.values())))
    rows = [{"sweep_id": f"2026010{index}T000000Z-{index:04x}", "started_at": f"2026-01-0{index + 1}T00:00:00Z",
             "status": "ok", "error": None,
             "figures": [{"metric": "gemm.tflops", "params": {"dtype": "bf16"}, "unit": "TFLOP/s",
                          "per_gpu": [[gpu, 700.0 * levels[index]] for gpu, levels in sorted(factors.items())]}]}
            for index in range(sweeps)]
    return list(reversed(rows))


def test_a_gpu_sliding_from_its_siblings_and_a_node_whose_median_slides_are_both_re_tested():
    rng = random.Random(5)

    def flat() -> list[float]:
        return [rng.gauss(1.0, 0.01) for _ in range(4)]

    histories = {f"node{host:03d}": _history({gpu: flat() for gpu in range(8)}) for host in range(1, 7)}
    # node007's GPU 3 falls from its siblings; every GPU of node008 falls together (its median).
    histories["node007"] = _history({gpu: [1.0, 0.98, 0.96, 0.94] if gpu == 3 else flat() for gpu in range(8)})
    histories["node008"] = _history({gpu: [f * rng.gauss(1.0, 0.01) for f in (1.0, 0.98, 0.96, 0.94)]
                                     for gpu in range(8)})
    found = trend_candidates(fleet_trends(histories, {}, 5.0, 3, 3.0, warn_pct=3.0), default_thresholds())
    parts = {(slide.host, slide.gpu) for slide in found}
    assert ("node007", 3) in parts and ("node008", None) in parts
    assert all(slide.probe == "gemm" and slide.z <= -RETEST_SLIDE_Z for slide in found)
    assert not {host for host, gpu in parts if gpu is None} - {"node008"}  # no flat node's median
