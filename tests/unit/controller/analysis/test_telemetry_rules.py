"""Telemetry judged against peers and the SKU: error counters far above their peers' (PCIe replays,
NVLink CRC/replay/recovery errors) are warnings, and only a wired NVLink is ever ``nvlink_down``.
Sweep documents are built here; the analysis is the real one."""

import json
import random
import statistics

import pytest

from gpudiag.analysis import analyse
from gpudiag.analysis.counters import PeerCounts
from gpudiag.analysis.thresholds import default_thresholds, load_thresholds
from gpudiag.errors import InputError

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
        "cuda_version": "12.4", "torch_version": "2.4.0", "gpu_count": 8, "cpu_count": 224,
        "cpu_count_usable": 224, "load_average_1m": 1.5, "memory_total_mib": 2063840,
        "memory_available_mib": 1900000}
A100 = {**H100, "gpu_model": "NVIDIA A100-SXM4-80GB"}
L40S = {**H100, "gpu_model": "NVIDIA L40S"}
UNKNOWN_PCIE = {**H100, "gpu_model": "NVIDIA Future GPU PCIe"}
UNKNOWN_SXM = {**H100, "gpu_model": "NVIDIA Future GPU SXM"}
LOAD = {"sm_clock_mhz_median": 1980, "sm_clock_max_mhz": 1980, "clocks_event_reasons": [],
        "clocks_event_reason_samples": {}, "nvml_samples": 22, "nvml_samples_idle": 2,
        "pcie_width_min_loaded": 16, "pcie_width_max": 16, "pcie_generation_min_loaded": 5, "pcie_generation_max": 5}


def _telemetry(gpu: int, metric: str, value: float, details: dict | None = None) -> dict:
    return {"probe": "telemetry", "device": f"gpu:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": metric,
            "value": value, "unit": "count", "samples": 1, "status": "ok", "reason": None, "params": {},
            "details": {**(details or {}), "source": "nvml"}}


def _links(gpu: int, slots: int, up: int, down=(), **counters) -> dict:
    """``nvlink_links_up`` listing ``slots`` link slots: 0..up-1 up (except ``down``), the rest
    inactive; ``counters``: ``crc_errors={7: 20000}`` sets link 7's CRC errors."""
    links = []
    for link in range(slots):
        state = "up" if link < up and link not in down else "down"
        entry = {"link": link, "state": state, "crc_errors": 0, "replay_errors": 0, "recovery_errors": 0}
        for name, by_link in counters.items():
            entry[name] = by_link.get(link, 0)
        links.append(entry)
    return _telemetry(gpu, "nvlink_links_up", sum(link["state"] == "up" for link in links), {"links": links})


def _gemm(gpu: int, details: dict) -> dict:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": "tflops", "value": 740.0,
            "unit": "TFLOP/s", "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
            "params": {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}, "details": details}


def _host(name: str, facts: dict = H100, gpus: int = 8, replays=None, links=None, narrow=()) -> dict:
    """A host with GEMM at the healthy level and telemetry for each GPU: ``replays`` (GPU ->
    PCIe replay count, default 0), ``links`` (GPU -> its nvlink_links_up record, default none),
    ``narrow``: GPUs whose PCIe link trains at x8 under load."""
    results = []
    for gpu in range(gpus):
        results.append(_gemm(gpu, {**LOAD, "pcie_width_min_loaded": 8 if gpu in narrow else 16}))
        results.append(_telemetry(gpu, "pcie_replay_count", (replays or {}).get(gpu, 0)))
        if links and gpu in links:
            results.append(links[gpu])
    return {"host": name, "status": "ok", "error": None, "duration_s": 1.0, "facts": {**facts, "gpu_count": gpus},
            "results": results}


def _fleet(count: int = 12, facts: dict = H100, **by_host) -> list[dict]:
    """``count`` healthy hosts; ``by_host``: host index (as ``h3``) -> keyword arguments of _host."""
    return [_host(f"node{i:03d}", facts, **by_host.get(f"h{i}", {})) for i in range(count)]


def _findings(hosts: list[dict], **options) -> list:
    return list(analyse(hosts, default_thresholds(), **options).findings)


def _where(findings: list) -> list[tuple]:
    return [(f.kind, f.severity, f.host, f.gpu) for f in findings]


def _all_links(slots: int, up: int, **per_gpu) -> dict:
    return {gpu: _links(gpu, slots, up, **per_gpu.get(f"g{gpu}", {})) for gpu in range(8)}


# ---------------------------------------------------------------------------------- wired NVLinks


def test_link_slots_an_sxm_does_not_wire_are_not_down_but_a_wired_one_is():
    hosts = _fleet(12, h2={"links": _all_links(24, 18, g4={"down": (4,)})},
                   h5={"links": _all_links(24, 18)})  # NVML lists 24 slots; the H100 SXM wires 18
    (finding,) = _findings(hosts)
    assert _where([finding]) == [("nvlink_down", "fail", "node002", 4)]
    assert finding.evidence == "NVLink 4 down; 17 of 18 up" and finding.action == "reset_gpu"


def test_an_a100_sxm_is_judged_on_its_12_links_only():
    hosts = _fleet(10, facts=A100, h0={"links": _all_links(18, 12)},
                   h1={"links": _all_links(18, 12, g0={"down": (11,)})})
    assert [(f.kind, f.host, f.gpu, f.evidence) for f in _findings(hosts)] == [
        ("nvlink_down", "node001", 0, "NVLink 11 down; 11 of 12 up")]


def test_a_model_without_nvlink_reading_every_slot_inactive_is_not_nvlink_down():
    l40s = _fleet(10, facts=L40S, h3={"links": _all_links(18, 0)})
    assert _findings(l40s) == []
    every_host = [_host(f"node{i:03d}", UNKNOWN_PCIE, links=_all_links(12, 0)) for i in range(10)]
    assert _findings(every_host) == []  # a model the SKU table lacks: no peer has any link up
    lone = [_host("node000", UNKNOWN_PCIE, gpus=1, links={0: _links(0, 12, 0)})]
    assert [f.kind for f in _findings(lone)] == ["unchecked"]  # its GEMM has nothing to compare with; no link down


def test_a_model_the_sku_table_lacks_is_judged_against_its_peers():
    hosts = [_host(f"node{i:03d}", UNKNOWN_SXM, links=_all_links(18, 18, g6={"down": (3,)} if i == 4 else {}))
             for i in range(10)]
    (finding,) = [f for f in _findings(hosts) if f.kind == "nvlink_down"]
    assert (finding.host, finding.gpu, finding.severity) == ("node004", 6, "fail")
    assert finding.evidence == ("NVLink 3 down; 17 of 18 up; the SKU table does not list NVIDIA Future GPU SXM: "
                                "up on 79 of 79 other GPUs of this model")


def test_an_unknown_model_with_bridges_on_some_links_judges_only_the_links_most_peers_have_up():
    # Every GPU has links 0-3 up (a bridge); link 2 of one GPU is down; slots 4-11 are never up.
    hosts = [_host(f"node{i:03d}", UNKNOWN_PCIE, links=_all_links(12, 4, g1={"down": (2,)} if i == 7 else {}))
             for i in range(4)] + [_host("node007", UNKNOWN_PCIE, links=_all_links(12, 4, g1={"down": (2,)}))]
    assert _where([f for f in _findings(hosts) if f.kind == "nvlink_down"]) == [("nvlink_down", "fail", "node007", 1)]


# ---------------------------------------------------------------------------------- error counters


def test_pcie_replays_far_above_the_peers_are_a_degraded_pcie_warning():
    (finding,) = _findings(_fleet(12, h3={"replays": {5: 5000}}))
    assert _where([finding]) == [("degraded_pcie", "warn", "node003", 5)]
    assert (finding.metric, finding.value, finding.reference, finding.unit) == (
        "telemetry.pcie_replay_count", 5000, 0, "count")
    assert finding.basis == "telemetry" and finding.action == "inspect" and "AER" in finding.action_detail
    assert finding.evidence == ("PCIe replay counter 5000 since the driver loaded; peers' median 0 "
                                "(95 GPUs of this model and driver)")
    assert finding.gpu_uuid == "GPU-5" and finding.reference_source == "fleet"


def test_replays_below_the_floor_or_near_a_busy_fleets_median_are_not_findings():
    assert _findings(_fleet(12, h3={"replays": {5: 99}})) == []
    busy = {gpu: 600 + 10 * gpu for gpu in range(8)}  # a platform where every link replays a little
    hosts = _fleet(12, **{f"h{i}": {"replays": busy} for i in range(12)})
    hosts[4] = _host("node004", replays={**busy, 2: 5000})  # 7.8 times the peers' median (640): not far enough
    assert _findings(hosts) == []
    hosts[4] = _host("node004", replays={**busy, 2: 7000})
    (finding,) = _findings(hosts)
    assert (finding.kind, finding.host, finding.gpu, finding.reference) == ("degraded_pcie", "node004", 2, 640)


def test_counters_of_another_driver_are_not_peers():
    old = {**H100, "driver_version": "535.104.05"}  # its GPUs all count replays: no GPU stands out among them
    hosts = _fleet(10) + [_host(f"old{i}", old, replays=dict.fromkeys(range(8), 2000)) for i in range(6)]
    assert _findings(hosts) == []


def test_nvlink_error_counters_far_above_the_peers_name_the_link_and_counter():
    links = _all_links(18, 18, g2={"crc_errors": {7: 20000}, "recovery_errors": {11: 6}})
    hosts = _fleet(12, **{f"h{i}": {"links": _all_links(18, 18)} for i in range(12)})
    hosts[8] = _host("node008", links=links)
    (finding,) = _findings(hosts)
    assert _where([finding]) == [("nvlink_errors", "warn", "node008", 2)]
    assert finding.evidence == ("NVLink 7 CRC errors 20000 since the driver loaded; peers' median 0 (1727 links of "
                                "this model and driver); NVLink 11 recovery errors 6 since the driver loaded; peers' "
                                "median 0 (1727 links of this model and driver)")
    assert (finding.metric, finding.value, finding.action) == ("telemetry.nvlink_crc_errors", 20000, "inspect")


def test_links_counted_clean_as_each_host_was_read_are_counted_again_under_the_wiring_the_analysis_is_given():
    # A host's clean links are counted as it is read, under the SKU table's wiring (18 on an H100);
    # wired another way by the analysis (12), its peers are the 12 wired links of each GPU.
    hosts = _fleet(12, **{f"h{i}": {"links": _all_links(18, 18)} for i in range(12)})
    hosts[8] = _host("node008", links=_all_links(18, 18, g2={"crc_errors": {7: 20000}}))
    (by_sku,) = _findings(hosts)
    (by_twelve,) = _findings(hosts, wired=lambda model: 12)
    assert "(1727 links of this model and driver)" in by_sku.evidence  # 12 hosts x 8 GPUs x 18, less its own
    assert "(1151 links of this model and driver)" in by_twelve.evidence  # x 12
    hosts[8] = _host("node008", links=_all_links(18, 18, g2={"crc_errors": {15: 20000}}))
    assert _findings(hosts, wired=lambda model: 12) == []  # link 15 is not wired there


def test_counters_of_link_slots_the_sku_does_not_wire_are_not_judged():
    links = {0: _links(0, 24, 18, crc_errors={20: 10**6})}
    assert _findings(_fleet(12, h1={"links": links})) == []


def test_a_narrow_link_that_also_replays_is_one_degraded_pcie_fail_with_both_evidences():
    (finding,) = _findings(_fleet(12, h6={"replays": {3: 900}, "narrow": (3,)}))
    assert _where([finding]) == [("degraded_pcie", "fail", "node006", 3)]
    assert finding.evidence.startswith("PCIe link x8 of x16; PCIe replay counter 900 since the driver loaded")
    assert finding.action == "drain"


def test_a_gpu_without_peers_is_judged_by_the_floor_alone():
    (finding,) = _findings([_host("solo", gpus=1, replays={0: 400})])
    assert finding.evidence == ("PCIe replay counter 400 since the driver loaded; no peer of this model and driver "
                                "to compare with")
    assert finding.reference is None and finding.reference_source is None


def test_with_the_previous_sweep_growth_decides_not_the_count_since_boot():
    previous = _fleet(12, h3={"replays": {5: 5000}}, h9={"replays": {1: 300}})
    # node003 GPU 5 had an old burst that stopped; node009 GPU 1 keeps replaying; node010 GPU 0 was
    # reset (a reboot) since and counted 250 replays.
    now = _fleet(12, h3={"replays": {5: 5000}}, h9={"replays": {1: 800}}, h10={"replays": {0: 250}})
    found = _findings(now, previous_hosts=previous)
    assert _where(found) == [("degraded_pcie", "warn", "node009", 1), ("degraded_pcie", "warn", "node010", 0)]
    grew = found[0]
    assert (grew.metric, grew.value, grew.reference) == ("telemetry.pcie_replay_count_growth", 500, 0)
    assert grew.evidence == ("PCIe replay counter grew by 500 since the previous sweep (now 800); peers' median "
                             "growth 0 (95 GPUs of this model and driver)")
    assert _where(_findings(now)) == [("degraded_pcie", "warn", "node003", 5), ("degraded_pcie", "warn", "node009", 1),
                                      ("degraded_pcie", "warn", "node010", 0)]  # without it, the counts since boot


def test_previous_values_of_a_reset_counter_are_replaced_by_what_it_counted_since():
    previous = _fleet(12, h10={"replays": {0: 9000}})
    now = _fleet(12, h10={"replays": {0: 120}})  # lower than before: reset, so 120 counted since
    assert [(f.host, f.value) for f in _findings(now, previous_hosts=previous)] == [("node010", 120)]


def test_counter_findings_are_byte_identical_in_any_host_order():
    links = _all_links(18, 18, g1={"replay_errors": {4: 700}})
    hosts = _fleet(16, h2={"replays": {1: 3000}}, h11={"links": links}, h12={"replays": {6: 800, 7: 900}})
    shuffled = list(hosts)
    random.Random(5).shuffle(shuffled)
    first = json.dumps([f.to_dict() for f in _findings(hosts)])
    assert first == json.dumps([f.to_dict() for f in _findings(shuffled)])
    assert first.count('"warn"') == 4


def test_the_median_of_the_peers_leaves_the_counted_value_out():
    rng = random.Random(1)
    for size in range(1, 30):
        values = [rng.choice((0, 0, 0, 1, 5, 5, 80, 900)) for _ in range(size)]
        peers = PeerCounts()
        for value in values:
            peers.add(value)
        peers.sort()
        for value in set(values):
            others = list(values)
            others.remove(value)
            expected = statistics.median(others) if others else None
            assert peers.median_without(value) == expected, (values, value)


def test_counter_thresholds_are_data_with_units(tmp_path):
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"schema": "gpudiag.thresholds/1", "pcie_replay_floor": {"value": 10, "unit": "count"}}))
    assert load_thresholds(str(path)).pcie_replay_floor == 10
    assert [f.host for f in analyse(_fleet(12, h3={"replays": {5: 20}}), load_thresholds(str(path))).findings] == [
        "node003"]
    path.write_text(json.dumps({"schema": "gpudiag.thresholds/1", "nvlink_crc_floor": {"value": 10, "unit": "ratio"}}))
    with pytest.raises(InputError, match="nvlink_crc_floor: unit must be 'count'"):
        load_thresholds(str(path))
    path.write_text(json.dumps({"schema": "gpudiag.thresholds/1", "counter_peer_ratio": {"value": 0.5,
                                                                                         "unit": "ratio"}}))
    with pytest.raises(InputError, match="counter_peer_ratio must be at least 1"):
        load_thresholds(str(path))


def test_the_collector_keeps_every_nvlink_as_nvml_listed_it_whatever_the_mix_of_states() -> None:
    from gpudiag.analysis.rules import TelemetryCollector
    from gpudiag.records import ProbeResult

    links = [{"link": index, "state": "up", "nvml_version_code": 4, "speed_mbyte_per_s": 26562, "crc_errors": 0,
              "replay_errors": 0, "recovery_errors": None} for index in range(18)]
    links[5] = {**links[5], "state": "down", "speed_mbyte_per_s": 0, "crc_errors": 30000}
    links[11] = {"link": 11, "state": "inactive"}  # another shape: kept as it was
    collector = TelemetryCollector("node001", "NVIDIA H100 80GB HBM3", "550.54.15")
    collector.add(ProbeResult(probe="telemetry", device="gpu:0", gpu_uuid="GPU-a", metric="nvlink_links_up",
                              value=16, unit="count", status="ok", details={"links": links, "source": "nvml"}))
    (gpu,) = collector.gpus().values()
    assert sorted(gpu.nvlinks(), key=lambda link: link["link"]) == links
    assert gpu.value("nvlink_links_up") == 16
