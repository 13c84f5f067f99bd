"""The fleet comparison on measurement documents built here (no simulator, no transport)."""

import json
import random
from types import SimpleNamespace

from gpudiag.analysis import PriorCounts, analyse
from gpudiag.analysis.keys import result_key
from gpudiag.analysis.sku import floor_key, floors_for, load_skus
from gpudiag.analysis.thresholds import default_thresholds, small_fleet_thresholds
from gpudiag.records import ProbeResult

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
        "cuda_version": "12.4", "torch_version": "2.4.0", "gpu_count": 8, "cpu_count": 224,
        "cpu_count_usable": 224, "load_average_1m": 1.5, "memory_total_mib": 2063840,
        "memory_available_mib": 1900000}
# What a healthy H100 measures at bf16 8192³ by the SKU table: the reference of a fleet with no peers' level.
H100_SKU_BF16 = load_skus().skus[H100["gpu_model"]].gemm_tflops["bf16"][8192]
UNKNOWN_MODEL = {**H100, "gpu_model": "NVIDIA Future GPU 1TB"}
GEMM_PARAMS = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}
LOAD = {"sm_clock_mhz_median": 1980, "sm_clock_max_mhz": 1980, "clocks_event_reasons": [],
        "clocks_event_reason_samples": {}, "nvml_samples": 22, "nvml_samples_idle": 2,
        "pcie_width_min_loaded": 16, "pcie_width_max": 16, "pcie_generation_min_loaded": 5, "pcie_generation_max": 5}
NO_SKU = {"skus": lambda model: {}}


def _gemm(gpu: int, value: float, mode: str = "concurrent", **load) -> dict:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": "tflops", "value": value,
            "unit": "TFLOP/s", "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
            "params": {**GEMM_PARAMS, "mode": mode}, "details": {**LOAD, **load}}


def _host(name: str, values: list[float], facts=H100, extra=(), **load_by_gpu) -> dict:
    results = [_gemm(i, v, **load_by_gpu.get(f"gpu{i}", {})) for i, v in enumerate(values)]
    return {"host": name, "status": "ok", "error": None, "duration_s": 1.0, "facts": dict(facts),
            "results": results + list(extra)}


def _fleet(count=16, seed=1, cv=0.01, nominal=740.0, facts=H100) -> list[dict]:
    rng = random.Random(seed)
    return [_host(f"node{i:03d}", [nominal * rng.gauss(1, cv) for _ in range(8)], facts=facts) for i in range(count)]


def _kinds(analysis) -> list[tuple]:
    return [(f.kind, f.severity, f.host, f.gpu, f.confirmed) for f in analysis.findings]


def _retest_of(hosts: list[dict]) -> list[dict]:
    """A re-test that measures exactly what the first pass did (a persistent fault)."""
    return json.loads(json.dumps(hosts))


def _power_capped() -> dict:
    return {"clocks_event_reasons": ["sw_power_cap"], "clocks_event_reason_samples": {"sw_power_cap": 20},
            "sm_clock_mhz_median": 1395, "power_w_max": 490.0, "power_limit_w": 490.0}


def test_a_healthy_fleet_with_1pct_noise_has_no_finding():
    analysis = analyse(_fleet(64), default_thresholds())
    assert analysis.findings == ()
    assert analysis.results_compared == 512 and analysis.results_not_compared == 0


def test_a_perfectly_tight_fleet_flags_no_noise():
    hosts = [_host(f"n{i}", [740.0] * 8) for i in range(16)]
    hosts[3]["results"][2]["value"] = 739.0  # 0.14 % low: noise, under the MAD floor
    assert analyse(hosts, default_thresholds()).findings == ()


def test_a_slow_gpu_is_a_suspect_then_confirmed_by_its_retest():
    hosts = _fleet()
    hosts[5]["results"][3]["value"] = 740 * 0.85
    first = analyse(hosts, default_thresholds(), retested=True)
    assert _kinds(first) == [("slow_gpu", "warn", "node005", 3, False)]
    (finding,) = first.findings
    assert finding.metric == "gemm.tflops" and 13 < finding.deficit_pct < 17 and finding.robust_z < -4
    assert finding.unit == "TFLOP/s" and finding.reference_source == "fleet" and finding.gpu_uuid == "GPU-3"
    assert finding.basis == "single_run" and finding.action == "watch" and "not re-tested" in finding.evidence
    retest = [_host("node005", [740, 740, 740, 740 * 0.86, 740, 740, 740, 740])]
    confirmed = analyse(hosts, default_thresholds(), retest_hosts=retest)
    assert _kinds(confirmed) == [("slow_gpu", "fail", "node005", 3, True)]
    finding = confirmed.findings[0]
    assert finding.basis == "retest" and finding.action == "drain" and "dcgmi diag" in finding.action_detail
    assert "no throttle reason" in finding.evidence and f"also sku {H100_SKU_BF16:.4g}" in finding.evidence


def test_a_dip_that_does_not_repeat_is_not_reported():
    hosts = _fleet()
    hosts[5]["results"][3]["value"] = 740 * 0.85
    healthy_again = [_host("node005", [740.0] * 8)]
    assert analyse(hosts, default_thresholds(), retest_hosts=healthy_again).findings == ()


def test_a_suspect_whose_retest_errors_stays_unconfirmed_with_the_error():
    hosts = _fleet()
    hosts[5]["results"][3]["value"] = 740 * 0.8
    retest = [_host("node005", [740.0] * 8)]
    retest[0]["results"][3] = {**retest[0]["results"][3], "status": "error", "value": None,
                               "reason": "CUDA error: an illegal memory access was encountered (Xid 13)"}
    finding, gap = analyse(hosts, default_thresholds(), retest_hosts=retest).findings
    assert (finding.kind, finding.gpu, finding.confirmed, finding.severity) == ("slow_gpu", 3, False, "warn")
    assert "re-test failed: CUDA error" in finding.evidence
    assert (gap.kind, gap.host, gap.gpu, gap.metric) == ("unchecked", "node005", 3, "gemm.tflops")  # exit 3, not 0
    assert "neither confirmed nor cleared" in gap.evidence
    unreachable = [{"host": "node005", "status": "timeout", "error": "no answer in 60 s", "results": []}]
    finding, gap = analyse(hosts, default_thresholds(), retest_hosts=unreachable).findings
    assert "re-test timeout: no answer in 60 s" in finding.evidence and not finding.confirmed
    assert gap.kind == "unchecked"


def test_error_records_are_unchecked_findings_naming_host_gpu_and_reason():
    hosts = _fleet()
    for result in hosts[2]["results"]:
        result.update(status="error", value=None, reason="refused: gemm needs at least 448 MiB of GPU memory")
    analysis = analyse(hosts, default_thresholds())
    unchecked = [f for f in analysis.findings if f.kind == "unchecked"]
    assert [(f.host, f.gpu, f.metric, f.severity, f.basis) for f in unchecked] == [
        ("node002", gpu, "gemm.tflops", "warn", "error_record") for gpu in range(8)]
    assert "gemm failed on cuda:0: refused: gemm needs at least 448 MiB" in unchecked[0].evidence
    assert "node002" in analysis.impact.exclude


def test_skipped_measurements_on_a_gpu_host_are_unchecked_but_na_readings_are_not():
    hosts = _fleet()
    hosts[1]["results"] += [
        {"probe": "smclock", "device": "cuda:0", "metric": "sm_clock", "status": "skipped", "value": None,
         "reason": "no CUDA compiler (NVRTC or nvcc) found"},
        {"probe": "telemetry", "device": "gpu:0", "gpu_uuid": "GPU-0", "metric": "remapped_rows_pending",
         "status": "skipped", "value": None, "reason": "n/a: NVML_ERROR_NOT_SUPPORTED"}]
    (finding,) = analyse(hosts, default_thresholds()).findings
    assert (finding.kind, finding.host, finding.gpu) == ("unchecked", "node001", 0)
    assert "smclock was not measured on cuda:0: no CUDA compiler" in finding.evidence


def test_a_throttled_gpu_says_why_in_plain_words():
    hosts = _fleet()
    hosts[2] = _host("node002", [740] * 8, gpu0={"clocks_event_reasons": ["hw_thermal_slowdown"],
                                                 "clocks_event_reason_samples": {"hw_thermal_slowdown": 19},
                                                 "sm_clock_mhz_median": 1410})
    hosts[2]["results"][0]["value"] = 740 * 0.7
    (finding,) = analyse(hosts, default_thresholds(), retest_hosts=_retest_of([hosts[2]])).findings
    assert (finding.kind, finding.host, finding.gpu, finding.severity) == ("throttled", "node002", 0, "fail")
    assert "HW thermal slowdown active in 95 % of 20 loaded samples; SM clock 1410 of 1980 MHz" in finding.evidence


def test_one_throttle_sample_is_not_a_finding_a_share_of_them_is():
    blip = {"clocks_event_reasons": ["hw_slowdown"], "clocks_event_reason_samples": {"hw_slowdown": 1}}
    hosts = _fleet()
    hosts[4] = _host("node004", [740] * 8, gpu5=blip)
    assert analyse(hosts, default_thresholds()).findings == ()
    hosts[4] = _host("node004", [740] * 8, gpu5={**blip, "clocks_event_reason_samples": {"hw_slowdown": 6}})
    (finding,) = analyse(hosts, default_thresholds()).findings
    assert (finding.kind, finding.gpu, finding.severity, finding.basis) == ("throttled", 5, "fail", "telemetry")
    assert not finding.confirmed  # telemetry rests on NVML readings, not on a re-test


def test_telemetry_findings_rest_on_telemetry_with_a_fixed_action_verb():
    telemetry = [
        {"probe": "telemetry", "device": "gpu:1", "gpu_uuid": "GPU-1", "metric": "ecc_uncorrected_volatile",
         "value": 2, "unit": "count", "status": "ok", "details": {}},
        {"probe": "telemetry", "device": "gpu:1", "gpu_uuid": "GPU-1", "metric": "identity", "value": 1,
         "status": "ok", "details": {"pci_bus_id": "00000000:2A:00.0"}},
        {"probe": "telemetry", "device": "gpu:4", "gpu_uuid": "GPU-4", "metric": "nvlink_links_up", "value": 17,
         "unit": "count", "status": "ok",
         "details": {"links": [{"link": i, "state": "down" if i == 4 else "up"} for i in range(18)]}},
    ]
    hosts = _fleet()
    hosts[7] = _host("node007", [740] * 8, extra=telemetry, gpu6={"pcie_width_min_loaded": 8},
                     gpu2={"clocks_event_reasons": ["hw_power_brake_slowdown"],
                           "clocks_event_reason_samples": {"hw_power_brake_slowdown": 20}})
    found = {(f.kind, f.gpu): f for f in analyse(hosts, default_thresholds()).findings}
    assert set(found) == {("ecc", 1), ("nvlink_down", 4), ("degraded_pcie", 6), ("throttled", 2)}
    assert all(f.severity == "fail" and f.host == "node007" and not f.confirmed and f.basis == "telemetry"
               for f in found.values())
    assert {k: f.action for k, f in found.items()} == {("ecc", 1): "reset_gpu", ("nvlink_down", 4): "reset_gpu",
                                                       ("degraded_pcie", 6): "drain", ("throttled", 2): "drain"}
    assert found[("ecc", 1)].pci_bus_id == "00000000:2A:00.0" and found[("ecc", 1)].gpu_uuid == "GPU-1"
    assert found[("nvlink_down", 4)].evidence == "NVLink 4 down; 17 of 18 up"
    assert found[("degraded_pcie", 6)].evidence == "PCIe link x8 of x16"


def test_a_host_whose_gpus_are_all_slow_is_one_slow_node():
    hosts = _fleet()
    hosts[9] = _host("node009", [740 * 0.8] * 8)
    (finding,) = analyse(hosts, default_thresholds()).findings
    assert (finding.kind, finding.host, finding.gpu) == ("slow_node", "node009", None)
    # unconfirmed (no re-test here), so a warning, which never takes a node out of service
    assert "8 of 8 GPUs" in finding.evidence and (finding.severity, finding.action) == ("warn", "watch")


def test_a_node_below_the_sku_on_every_gpu_with_one_past_the_bar_is_the_nodes_finding_not_that_gpus():
    # A 1-node job 8 % below the SKU figure on every GPU (2.7 of its 3 % spreads): noise pushed one
    # GPU to 9.6 %, past the bar. It is no slower than its siblings: the deficit is the node's.
    figure = floors_for(H100["gpu_model"])[floor_key("gemm", "tflops", GEMM_PARAMS)]
    values = [figure * f for f in (0.92, 0.921, 0.919, 0.904, 0.92, 0.918, 0.922, 0.92)]
    hosts = [_host("node001", values)]
    (finding,) = analyse(hosts, default_thresholds(), retest_hosts=_retest_of(hosts)).findings
    assert (finding.kind, finding.host, finding.gpu, finding.reference_source) == ("slow_node", "node001", None, "sku")
    # one GPU far below healthy siblings is still that GPU's
    values = [figure * f for f in (1.0, 1.001, 0.999, 0.904, 1.0, 0.998, 1.002, 1.0)]
    hosts = [_host("node001", values)]
    (finding,) = analyse(hosts, default_thresholds(), retest_hosts=_retest_of(hosts)).findings
    assert (finding.kind, finding.gpu) == ("slow_gpu", 3)


def _pcie(gpu: int, direction: str, value: float, width: int = 16) -> dict:
    return {"probe": "pcie", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": "bandwidth",
            "value": value, "unit": "GB/s", "status": "ok",
            "params": {"direction": direction, "buffer_mib": 256, "host_memory": "pinned"},
            "details": {**LOAD, "pcie_width_min_loaded": width}}


def test_a_starved_host_is_a_slow_node_not_degraded_pcie_and_a_narrow_link_is_degraded_pcie():
    rng = random.Random(3)
    hosts = []
    for h in range(16):
        pcie = [_pcie(g, d, 55 * rng.gauss(1, 0.01)) for g in range(8) for d in ("h2d", "d2h")]
        hosts.append(_host(f"node{h:03d}", [740 * rng.gauss(1, 0.01) for _ in range(8)], extra=pcie))
    starved = {**H100, "cpu_count_usable": 134, "load_average_1m": 140.0, "memory_available_mib": 60000}
    hosts[6]["facts"] = starved
    for result in hosts[6]["results"][8:8 + 6]:  # three GPUs' copies slow: fewer than most of the host
        result["value"] *= 0.6
    hosts[11]["results"][8 + 4] = _pcie(2, "h2d", 27.0, width=8)
    findings = {(f.kind, f.host, f.gpu): f for f in analyse(hosts, default_thresholds()).findings
                if f.host in ("node006", "node011")}
    assert set(findings) == {("slow_node", "node006", None), ("degraded_pcie", "node011", 2)}
    starved_node = findings[("slow_node", "node006", None)]
    assert "host starved: load 140.0 on 134 usable CPUs, 134 of 224 CPUs usable" in starved_node.evidence
    assert (starved_node.severity, starved_node.action) == ("warn", "watch") and "starved" in starved_node.action_detail
    assert "PCIe link x8 of x16" in findings[("degraded_pcie", "node011", 2)].evidence


def test_different_gpu_models_are_never_pooled():
    a100 = {**H100, "gpu_model": "NVIDIA A100-SXM4-80GB"}
    hosts = _fleet(12) + [_host(f"a{i}", [280.0] * 8, facts=a100) for i in range(12)]
    assert analyse(hosts, default_thresholds()).findings == ()


def test_a_two_node_job_with_one_slow_node_is_judged_by_the_baseline_then_the_sku():
    hosts = [_host("node001", [740.0] * 8), _host("node002", [740 * 0.6] * 8)]
    thresholds = default_thresholds()
    (finding,) = analyse(hosts, thresholds, retest_hosts=_retest_of(hosts)).findings
    assert (finding.kind, finding.host, finding.severity, finding.reference_source) == \
        ("slow_node", "node002", "fail", "sku")
    key = result_key(hosts[0]["facts"], ProbeResult.from_dict(hosts[0]["results"][0]))
    baseline = {key: SimpleNamespace(median=745.0, mad=3.0, count=500)}
    (finding,) = analyse(hosts, thresholds, baseline=baseline, retest_hosts=_retest_of(hosts)).findings
    assert (finding.host, finding.reference_source, finding.reference) == ("node002", "baseline", 745.0)


def test_a_small_job_of_an_unknown_model_without_a_baseline_is_not_a_pass():
    hosts = [_host("node001", [740.0] * 8, facts=UNKNOWN_MODEL), _host("node002", [444.0] * 8, facts=UNKNOWN_MODEL)]
    analysis = analyse(hosts, default_thresholds())
    (finding,) = analysis.findings
    assert (finding.kind, finding.host, finding.metric, finding.basis) == \
        ("unchecked", "node[001-002]", "gemm.tflops", "comparison")
    assert "not compared, not passed" in finding.evidence
    assert analysis.results_compared == 0 and analysis.results_not_compared == 16
    assert analysis.impact.exclude == ()  # nothing to compare with is no reason to exclude a node


def test_a_small_fleets_key_with_too_few_values_says_what_its_level_needs():
    # Three hosts of an unknown model, two GPUs each: a small fleet (min_peers 3), but six values
    # are too few for a level; nothing else judges them.
    thresholds = small_fleet_thresholds(default_thresholds(), 3)
    hosts = [_host(f"node00{i}", [740.0, 741.0], facts=UNKNOWN_MODEL) for i in (1, 2, 3)]
    (finding,) = analyse(hosts, thresholds).findings
    assert (finding.kind, finding.host) == ("unchecked", "node[001-003]")
    assert "from fewer than 8 hosts a key needs 12 values" in finding.evidence
    # twelve values are enough: one GPU 10 % slow is named against the other hosts' level
    hosts = [_host(f"node00{i}", [740.0, 741.0, 739.0, 666.0 if i == 2 else 740.5], facts=UNKNOWN_MODEL)
             for i in (1, 2, 3)]
    (finding,) = analyse(hosts, thresholds, retest_hosts=_retest_of(hosts)).findings
    assert (finding.kind, finding.host, finding.gpu, finding.reference_source) == ("slow_gpu", "node002", 3, "fleet")


def test_results_without_facts_are_never_pooled_or_compared():
    hosts = _fleet()
    hosts[3]["facts"] = {}
    hosts[3]["results"][0]["value"] = 300.0
    analysis = analyse(hosts, default_thresholds())
    (finding,) = analysis.findings
    assert (finding.kind, finding.host) == ("unchecked", "node003")
    assert "no host facts" in finding.evidence and analysis.results_not_compared == 8


def test_half_the_fleet_slow_is_found_and_reported_as_a_fleet_shift():
    hosts = _fleet(64, seed=5)
    for host in hosts[:32]:
        for result in host["results"]:
            result["value"] *= 0.6 ** 0.25  # a starved host's launches: GEMM 12 % slow
    findings = analyse(hosts, default_thresholds(), retest_hosts=_retest_of(hosts[:32])).findings
    slow = {f.host for f in findings if f.kind == "slow_node"}
    assert slow == {h["host"] for h in hosts[:32]}
    (shift,) = [f for f in findings if f.kind == "fleet_shift"]
    assert shift.share_pct == 50.0 and shift.host == "node[000-031]" and shift.action == "inspect"


def test_half_the_fleet_slow_without_any_sku_figure_is_still_found_by_the_fleet():
    hosts = _fleet(64, seed=6)
    for host in hosts[32:]:
        for result in host["results"]:
            result["value"] *= 0.88
    findings = analyse(hosts, default_thresholds(), retest_hosts=_retest_of(hosts[32:]), **NO_SKU).findings
    assert {f.host for f in findings if f.kind == "slow_node"} == {h["host"] for h in hosts[32:]}


def test_forty_percent_of_nodes_eight_percent_slow_are_all_found():
    hosts = _fleet(64, seed=7)
    slow = hosts[10:36]
    for host in slow:
        for result in host["results"]:
            result["value"] *= 0.92
    findings = analyse(hosts, default_thresholds(), retest_hosts=_retest_of(slow), **NO_SKU).findings
    assert {f.host for f in findings if f.kind == "slow_node"} == {h["host"] for h in slow}
    assert [f.kind for f in findings].count("fleet_shift") == 1


def test_a_whole_power_capped_fleet_is_one_power_policy_shift_against_the_sku_with_the_impact():
    hosts = [_host(f"node{i:03d}", [H100_SKU_BF16 * 0.7] * 8, **{f"gpu{g}": _power_capped() for g in range(8)})
             for i in range(32)]
    analysis = analyse(hosts, default_thresholds(), retest_hosts=_retest_of(hosts))
    (shift,) = analysis.findings  # a cause every node shares: one finding, no GPU throttled or drained
    assert (shift.kind, shift.host, shift.severity, shift.action) == ("fleet_shift", "node[000-031]", "fail", "inspect")
    assert shift.reference_source == "sku" and shift.share_pct == 100.0 and 29 < shift.deficit_pct < 31
    assert "power limit" in shift.action_detail and "SW power cap active on 256 of 256 GPUs" in shift.evidence
    assert 29 < analysis.impact.slowdown_pct < 31 and analysis.impact.slowest["reference_source"] == "sku"
    assert analysis.impact.exclude == ()


def test_a_small_power_cap_is_a_warning():
    hosts = _fleet(16)
    hosts[3] = _host("node003", [740] * 8, gpu4=_power_capped())
    hosts[3]["results"][4]["value"] = 740 * 0.95
    (finding,) = analyse(hosts, default_thresholds(), retest_hosts=_retest_of([hosts[3]])).findings
    assert (finding.kind, finding.gpu, finding.severity, finding.action) == ("throttled", 4, "warn", "inspect")


def _lost(gpu: int) -> dict:
    return {"probe": "telemetry", "device": f"gpu:{gpu}", "gpu_uuid": None, "metric": "identity", "value": None,
            "status": "error", "reason": "NVML_ERROR_GPU_IS_LOST: GPU is lost", "details": {"source": "nvml"}}


def test_missing_gpus_are_fail_findings():
    hosts = _fleet(16)
    hosts[4] = _host("node004", [740] * 7, facts={**H100, "gpu_count": 7})  # fewer GPUs than its peers
    hosts[8] = _host("node008", [740] * 7, facts={**H100, "gpu_count": 7, "pci_gpu_count": 8}, extra=[_lost(3)])
    lone = [_host("solo", [740] * 7, facts={**H100, "gpu_count": 7, "pci_gpu_count": 8, "nvml_gpu_count": 8})]
    findings = analyse(hosts, default_thresholds()).findings
    assert [(f.kind, f.severity, f.host, f.gpu, f.action) for f in findings] == [
        ("missing_gpu", "fail", "node004", None, "reboot"), ("missing_gpu", "fail", "node008", 3, "reboot")]
    assert "7 GPUs usable (torch), expected 8: peers of the same model and platform have 8" in findings[0].evidence
    (alone,) = analyse(lone, default_thresholds()).findings
    assert alone.kind == "missing_gpu" and "on the PCI bus 8" in alone.evidence


def test_a_gpu_gone_from_the_bus_of_a_lone_node_is_missing_by_the_gpus_slurm_gives_it():
    # No peer, no stored sweep, and its PCI bus and NVML count 7 too: only Slurm's Gres says 8.
    gone = {**H100, "gpu_count": 7, "pci_gpu_count": 7, "nvml_gpu_count": 7}
    lone = [_host("solo", [740] * 7, facts=gone)]
    assert not analyse(lone, default_thresholds()).findings  # nothing to count it against
    (finding,) = analyse(lone, default_thresholds(), previous_hosts=PriorCounts(slurm_gpus={"solo": 8})).findings
    assert (finding.kind, finding.severity, finding.host, finding.action) == ("missing_gpu", "fail", "solo", "reboot")
    assert finding.evidence.endswith("expected 8: on the PCI bus 7; counted by NVML 7; "
                                     "Slurm's configuration (Gres) gives it 8")
    for configured in ({"solo": 7}, {"solo": 4}, {"other": 8}):  # as many, fewer, or another node's
        assert not analyse(lone, default_thresholds(), previous_hosts=PriorCounts(slurm_gpus=configured)).findings
    # Of unknown boards, where only peers expect more the host is unchecked; Slurm's 8 makes it missing.
    small = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 4, "pci_gpu_count": 4, "nvml_gpu_count": 4}
    pair = [_host("big1", [740] * 8), _host("big2", [740] * 8), _host("small", [740] * 4, facts=small)]
    assert [(f.kind, f.host) for f in analyse(pair, default_thresholds()).findings] == [("unchecked", "small")]
    told = analyse(pair, default_thresholds(), previous_hosts=PriorCounts(slurm_gpus={"small": 8})).findings
    assert [(f.kind, f.severity, f.host) for f in told] == [("missing_gpu", "fail", "small")]


def _pair(src: int, dst: int, value: float) -> dict:
    return {"probe": "p2p", "device": f"cuda:{src}", "gpu_uuid": f"GPU-{src}", "metric": "bandwidth", "value": value,
            "unit": "GB/s", "status": "ok", "details": {},
            "params": {"direction": "unidirectional", "src": f"cuda:{src}", "dst": f"cuda:{dst}", "buffer_mib": 256}}


def _p2p_fleet(slow) -> list[dict]:
    hosts = []
    for h in range(12):
        rng = random.Random(h)
        pairs = [_pair(s, d, 370 * rng.gauss(1, 0.005) * (slow(h, s, d) or 1))
                 for s in range(8) for d in range(8) if s != d]
        hosts.append(_host(f"node{h:02d}", [740.0] * 8, extra=pairs))
    return hosts


def test_a_gpu_slow_with_every_partner_is_named_its_partners_are_not():
    hosts = _p2p_fleet(lambda h, s, d: 0.85 if h == 3 and 2 in (s, d) else None)
    found = analyse(hosts, default_thresholds(), retest_hosts=_retest_of([hosts[3]])).findings
    assert [(f.kind, f.host, f.gpu, f.metric, f.severity) for f in found] == [
        ("slow_gpu", "node03", 2, "p2p.bandwidth", "fail")]
    assert "slow with 7 of 7 NVLink partners" in found[0].evidence


def test_a_gpu_with_an_nvlink_down_gets_one_finding_and_a_slow_pair_is_a_link():
    states = [{"link": i, "state": "down" if i == 0 else "up"} for i in range(18)]
    links = {"probe": "telemetry", "device": "gpu:5", "gpu_uuid": "GPU-5", "metric": "nvlink_links_up", "value": 17,
             "status": "ok", "details": {"links": states}}
    hosts = _p2p_fleet(lambda h, s, d: 0.9 if (h == 1 and 5 in (s, d)) or (h == 2 and {s, d} == {0, 6}) else None)
    hosts[1]["results"].append(links)
    found = analyse(hosts, default_thresholds(), retest_hosts=_retest_of(hosts[1:3])).findings
    assert sorted((f.kind, f.host, f.gpu, f.peer, f.peer_gpu) for f in found) == [
        ("nvlink_down", "node01", 5, None, None), ("slow_link", "node02", 0, "node02", 6)]
    down = next(f for f in found if f.kind == "nvlink_down")
    assert down.metric == "p2p.bandwidth" and down.action == "reset_gpu" and "NVLink 0 down" in down.evidence


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


def test_the_slowest_gpu_of_a_job_is_the_first_host_and_device_among_those_equally_slow():
    hosts = _fleet()
    for host, gpu in (("node009", 5), ("node002", 7), ("node009", 1)):
        hosts[int(host[4:])]["results"][gpu]["value"] = 500.0
    slowest = analyse(hosts, default_thresholds()).impact.slowest
    assert (slowest["host"], slowest["gpu"], slowest["value"]) == ("node002", 7, 500.0)
    hosts[2]["results"][7]["value"] = 500.5
    slowest = analyse(hosts, default_thresholds()).impact.slowest
    assert (slowest["host"], slowest["gpu"]) == ("node009", 1)  # cuda:1 before cuda:5


def test_a_thresholds_file_overrides_a_subset_and_keeps_the_other_defaults(tmp_path):
    from gpudiag.analysis.thresholds import load_thresholds

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


def test_a_shift_the_whole_fleet_shares_is_one_finding_against_the_baseline_but_a_small_offset_is_none():
    hosts = _fleet(32, seed=8, nominal=740 * 0.92)  # 8 % below the baseline on every GPU
    key = result_key(hosts[0]["facts"], ProbeResult.from_dict(hosts[0]["results"][0]))
    baseline = {key: SimpleNamespace(median=740.0, mad=3.0, count=500)}
    analysis = analyse(hosts, default_thresholds(), baseline=baseline, retest_hosts=_retest_of(hosts), **NO_SKU)
    (shift,) = analysis.findings  # not 32 slow nodes: their own level judges them, and none falls below it
    assert (shift.kind, shift.reference_source, shift.severity, shift.share_pct) == ("fleet_shift", "baseline",
                                                                                     "fail", 100.0)
    assert 7 < shift.deficit_pct < 9 and "no throttle reason" in shift.evidence
    assert analysis.impact.slowest["reference_source"] == "baseline" and 6 < analysis.impact.slowdown_pct < 12
    offset = _fleet(32, seed=8, nominal=740 * 0.98)  # 2 % under a published figure: not a shift
    findings = analyse(offset, default_thresholds()).findings
    assert not [f for f in findings if f.reference_source == "sku" or f.kind == "fleet_shift" or f.severity == "fail"]


def test_a_node_whose_python_has_no_torch_is_unchecked_not_passed_and_not_missing_gpus():
    no_torch = "torch is not importable by this Python (No module named 'torch')"
    skipped = [{"probe": probe, "device": "host", "metric": metric, "status": "skipped", "value": None,
                "reason": no_torch} for probe, metric in (("gemm", "tflops"), ("membw", "bandwidth"),
                                                          ("pcie", "bandwidth"), ("smclock", "sm_clock"))]
    cpu_only = {"host": "login1", "status": "ok", "results": skipped,
                "facts": {"gpu_count": 0, "pci_gpu_count": 0, "torch_unavailable": no_torch, "cpu_model": "EPYC"}}
    gpu_node = {**cpu_only, "host": "node001", "facts": {**cpu_only["facts"], "pci_gpu_count": 8}}
    findings = analyse([cpu_only, gpu_node], default_thresholds()).findings
    by_host = {(f.host, f.metric) for f in findings if f.kind == "unchecked"}
    assert {("login1", "gemm.tflops"), ("login1", "membw.bandwidth")} <= by_host  # CPU probes skipped: gaps
    assert ("login1", "pcie.bandwidth") not in by_host  # a GPU probe on a host without GPUs: by nature
    assert ("node001", "pcie.bandwidth") in by_host and "torch is not importable" in findings[0].evidence
    assert not [f for f in findings if f.kind == "missing_gpu"]  # no torch is not a GPU off the bus
