"""The fleet comparison on measurement documents built here (no simulator, no transport)."""

import json
import random
from types import SimpleNamespace

import pytest

from gpudiag.analysis import analyse
from gpudiag.thresholds import default_thresholds

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
        "cuda_version": "12.4", "torch_version": "2.4.0", "gpu_count": 8}
GEMM_PARAMS = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}
LOAD = {"sm_clock_mhz_median": 1980, "sm_clock_max_mhz": 1980, "clocks_event_reasons": [],
        "pcie_width_min_loaded": 16, "pcie_width_max": 16, "pcie_generation_min_loaded": 5, "pcie_generation_max": 5}


def _gemm(gpu: int, value: float, mode: str = "concurrent", **load) -> dict:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": "tflops", "value": value,
            "unit": "TFLOP/s", "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
            "params": {**GEMM_PARAMS, "mode": mode}, "details": {**LOAD, **load}}


def _host(name: str, values: list[float], facts=H100, extra=(), **load_by_gpu) -> dict:
    results = [_gemm(i, v, **load_by_gpu.get(f"gpu{i}", {})) for i, v in enumerate(values)]
    return {"host": name, "status": "ok", "error": None, "duration_s": 1.0, "facts": dict(facts),
            "results": results + list(extra)}


def _fleet(count=16, seed=1, cv=0.01, nominal=740.0) -> list[dict]:
    rng = random.Random(seed)
    return [_host(f"node{i:03d}", [nominal * rng.gauss(1, cv) for _ in range(8)]) for i in range(count)]


def _kinds(analysis) -> list[tuple]:
    return [(f.kind, f.severity, f.host, f.gpu, f.confirmed) for f in analysis.findings]


def test_a_healthy_fleet_with_1pct_noise_has_no_finding():
    assert analyse(_fleet(64), default_thresholds()).findings == ()


def test_a_perfectly_tight_fleet_flags_no_noise():
    hosts = [_host(f"n{i}", [740.0] * 8) for i in range(16)]
    hosts[3]["results"][2]["value"] = 739.0  # 0.14 % low: noise, under the MAD floor
    assert analyse(hosts, default_thresholds()).findings == ()


def test_a_slow_gpu_is_a_suspect_then_confirmed_by_its_retest():
    hosts = _fleet()
    hosts[5]["results"][3]["value"] = 740 * 0.85
    first = analyse(hosts, default_thresholds())
    assert _kinds(first) == [("slow_gpu", "warn", "node005", 3, False)]
    (finding,) = first.findings
    assert finding.metric == "gemm.tflops" and 13 < finding.deficit_pct < 17 and finding.robust_z < -4
    assert "not re-tested" in finding.evidence
    retest = [_host("node005", [740, 740, 740, 740 * 0.86, 740, 740, 740, 740])]
    for result in retest[0]["results"]:
        result["params"]["mode"] = "sequential"
    confirmed = analyse(hosts, default_thresholds(), retest_hosts=retest)
    assert _kinds(confirmed) == [("slow_gpu", "fail", "node005", 3, True)]
    assert "no throttle reason" in confirmed.findings[0].evidence


def test_a_dip_that_does_not_repeat_is_not_reported():
    hosts = _fleet()
    hosts[5]["results"][3]["value"] = 740 * 0.85
    healthy_again = [_host("node005", [740.0] * 8)]
    assert analyse(hosts, default_thresholds(), retest_hosts=healthy_again).findings == ()


def test_a_throttled_gpu_says_why_in_plain_words():
    hosts = _fleet()
    hosts[2] = _host("node002", [740] * 8, gpu0={"clocks_event_reasons": ["hw_thermal_slowdown"],
                                                 "sm_clock_mhz_median": 1410})
    hosts[2]["results"][0]["value"] = 740 * 0.7
    (finding,) = analyse(hosts, default_thresholds()).findings
    assert (finding.kind, finding.host, finding.gpu) == ("throttled", "node002", 0)
    assert "HW thermal slowdown active; SM clock 1410 of 1980 MHz" in finding.evidence


def test_telemetry_makes_findings_even_when_the_speed_is_fine():
    telemetry = [
        {"probe": "telemetry", "device": "gpu:1", "gpu_uuid": "GPU-1", "metric": "ecc_uncorrected_volatile",
         "value": 2, "unit": "count", "status": "ok", "details": {}},
        {"probe": "telemetry", "device": "gpu:4", "gpu_uuid": "GPU-4", "metric": "nvlink_links_up", "value": 17,
         "unit": "count", "status": "ok",
         "details": {"links": [{"link": i, "state": "down" if i == 4 else "up"} for i in range(18)]}},
    ]
    hosts = _fleet()
    hosts[7] = _host("node007", [740] * 8, extra=telemetry, gpu6={"pcie_width_min_loaded": 8},
                     gpu2={"clocks_event_reasons": ["hw_power_brake_slowdown"]})
    found = {(f.kind, f.gpu): f for f in analyse(hosts, default_thresholds()).findings}
    assert set(found) == {("ecc", 1), ("nvlink_down", 4), ("degraded_pcie", 6), ("throttled", 2)}
    assert all(f.severity == "fail" and f.host == "node007" and f.confirmed for f in found.values())
    assert found[("nvlink_down", 4)].evidence == "NVLink 4 down; 17 of 18 up"
    assert found[("degraded_pcie", 6)].evidence == "PCIe link x8 of x16"


def test_a_host_whose_gpus_are_all_slow_is_one_slow_node():
    hosts = _fleet()
    hosts[9] = _host("node009", [740 * 0.8] * 8)
    (finding,) = analyse(hosts, default_thresholds()).findings
    assert (finding.kind, finding.host, finding.gpu) == ("slow_node", "node009", None)
    assert "8 of 8 GPUs" in finding.evidence


def test_different_gpu_models_are_never_pooled():
    a100 = {**H100, "gpu_model": "NVIDIA A100-SXM4-80GB"}
    hosts = _fleet(12) + [_host(f"a{i}", [280.0] * 8, facts=a100) for i in range(12)]
    assert analyse(hosts, default_thresholds()).findings == ()


def test_few_peers_fall_back_on_the_stored_baseline_then_on_the_sku_floor():
    hosts = _fleet(3)  # 24 GPUs, but only 3 hosts... per key 24 values: fleet median applies
    thresholds = default_thresholds()
    small = [_host("only", [740, 740, 600])]
    assert analyse(small, thresholds).findings == ()  # 3 peers, no baseline, no SKU figure: no reference
    key = None
    from gpudiag.keys import result_key
    key = result_key(small[0]["facts"], small[0]["results"][0])
    baseline = {key: SimpleNamespace(median=740.0, mad=3.0, count=500)}
    (finding,) = analyse(small, thresholds, baseline=baseline).findings
    assert finding.gpu == 2 and "baseline reference 740" in finding.evidence
    floors = {("gemm", "tflops", "bf16"): 760.0}
    (finding,) = analyse(small, thresholds, sku_floors=floors).findings
    assert finding.reference == pytest.approx(760.0 * thresholds.sku_floor_pct / 100)
    assert hosts  # the fleet itself is healthy
    assert analyse(hosts, thresholds).findings == ()


def test_the_same_input_gives_byte_identical_findings_in_any_host_order():
    hosts = _fleet(32, seed=4)
    hosts[1]["results"][1]["value"] = 600.0
    hosts[20] = _host("node020", [600.0] * 8)
    shuffled = list(hosts)
    random.Random(9).shuffle(shuffled)
    first = json.dumps([f.to_dict() for f in analyse(hosts, default_thresholds()).findings])
    second = json.dumps([f.to_dict() for f in analyse(shuffled, default_thresholds()).findings])
    assert first == second and "node020" in first


def test_job_impact_and_exclusions():
    hosts = _fleet()
    hosts[4]["results"][6]["value"] = 740 * 0.8
    hosts.append({"host": "node099", "status": "unreachable", "error": "refused", "duration_s": 0.1,
                  "facts": {}, "results": []})
    retest = [_host("node004", [740, 740, 740, 740, 740, 740, 740 * 0.8, 740])]
    analysis = analyse(hosts, default_thresholds(), retest_hosts=retest)
    impact = analysis.impact
    assert impact.exclude == ("node004", "node099")
    assert impact.slowest["host"] == "node004" and impact.slowest["gpu"] == 6
    assert 18 < impact.slowdown_pct < 22
    assert impact.recovered_pct > 15  # what is left is noise
    assert [f.kind for f in analysis.findings] == ["slow_gpu", "unchecked"]


def test_one_gpu_with_slow_nvlinks_is_named_not_every_pair():
    def pair(src, dst, value):
        return {"probe": "p2p", "device": f"cuda:{src}", "gpu_uuid": f"GPU-{src}", "metric": "bandwidth",
                "value": value, "unit": "GB/s", "status": "ok",
                "params": {"direction": "unidirectional", "src": f"cuda:{src}", "dst": f"cuda:{dst}",
                           "buffer_mib": 256}, "details": {}}

    hosts = []
    for h in range(12):
        rng = random.Random(h)
        pairs = [pair(s, d, 390 * rng.gauss(1, 0.005) * (0.85 if h == 3 and 2 in (s, d) else 1))
                 for s in range(8) for d in range(8) if s != d]
        hosts.append(_host(f"node{h:02d}", [740.0] * 8, extra=pairs))
    found = analyse(hosts, default_thresholds()).findings
    assert [(f.kind, f.host, f.gpu, f.metric) for f in found] == [("slow_gpu", "node03", 2, "p2p.bandwidth")]


def test_a_thresholds_file_overrides_a_subset_and_keeps_the_other_defaults(tmp_path):
    from gpudiag.thresholds import load_thresholds

    path = tmp_path / "t.json"
    path.write_text('{"schema": "gpudiag.thresholds/1", "deficit_fail": {"value": 12.5, "unit": "percent"}}')
    loaded = load_thresholds(str(path))
    assert loaded.deficit_fail_pct == 12.5
    assert loaded.min_peers == default_thresholds().min_peers
    hosts = _fleet()
    hosts[5]["results"][3]["value"] = 740 * 0.9
    retest = [_host("node005", [740, 740, 740, 740 * 0.9, 740, 740, 740, 740])]
    (finding,) = analyse(hosts, loaded, retest_hosts=retest).findings
    assert finding.severity == "warn"  # a 10 % deficit is under the 12.5 % fail threshold given
    (strict,) = analyse(hosts, default_thresholds(), retest_hosts=retest).findings
    assert strict.severity == "fail"
