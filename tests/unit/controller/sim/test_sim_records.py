"""The records each simulated node prints (read back with the controller's own parser), shaped as
the real probes print them, and the planted faults as the records show them: slow, throttled and
lost GPUs, degraded links, slow hosts, probe errors."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from typing import Any

import pytest
from simfleet import GPUS, one, ratio, run_node, small_fleet

from gpudiag.hosts import HostSpec
from gpudiag.records import ProbeResult, parse_probe_output
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.sim import SimulatedConnector, SimulatedFleet, demo_fleet_path, load_fleet, load_skus, parse_fleet
from probes import telemetry as telemetry_probe
from probes.context import ProbeContext
from probes.records import Record
from probes.telemetry import METRICS


@pytest.fixture(scope="module")
def demo() -> SimulatedFleet:
    return SimulatedFleet(load_fleet(demo_fleet_path()))


# ------------------------------------------------------------------------------ the records


def test_a_node_prints_the_real_bundles_records(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    result = connector.connect(HostSpec("node002")).run(ProbeOptions().bundle_argv(), 600.0)
    lines = result.stdout.splitlines()
    # Field names and order of probes/records.py, on every line.
    record_keys = list(Record("p", "d", "m", 1, "u").to_dict())
    assert all(list(json.loads(line)) == record_keys for line in lines)
    results = parse_probe_output(result.stdout, "node002")
    assert [r.probe for r in results][:1] == ["facts"]
    assert [p for p in dict.fromkeys(r.probe for r in results)] == [
        "facts", "telemetry", "gemm", "membw", "p2p", "pcie", "smclock"]
    assert all(r.status == "ok" for r in results)
    facts = one(results, "facts", "gpu_count", "host")
    assert facts.value == GPUS and facts.details["hostname"] == "node002"
    assert facts.details["gpu_model"] == "NVIDIA H100 80GB HBM3" and len(facts.details["gpu_uuids"]) == GPUS

    def count(probe: str, metric: str | None = None) -> int:
        return sum(1 for r in results if r.probe == probe and metric in (None, r.metric))

    assert count("gemm") == count("membw") == GPUS
    assert count("p2p") == GPUS * (GPUS - 1) + GPUS * (GPUS - 1) // 2
    assert count("pcie") == 2 * GPUS and count("smclock") == 2 * GPUS
    assert count("telemetry") == GPUS * (1 + len(METRICS)) + 8  # and one NIC port per rail
    telemetry_metrics = [r.metric for r in results if r.probe == "telemetry" and r.device == "gpu:0"]
    assert telemetry_metrics == ["identity", *(metric for metric, _ in METRICS)]
    assert all(r.unit == dict(METRICS)[r.metric] for r in results
               if r.probe == "telemetry" and r.metric not in ("identity", "nic_port"))
    gemm = one(results, "gemm", "tflops", "cuda:0")
    assert gemm.params == {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}
    assert 650 < gemm.value < 830 and gemm.cv < 0.01 and gemm.samples >= 5
    assert gemm.details["clocks_event_reasons"] == [] and gemm.details["sm_clock_max_mhz"] == 1980
    uuids = {r.gpu_uuid for r in results if r.probe == "telemetry" and r.metric != "nic_port"}
    assert uuids == set(facts.details["gpu_uuids"]) == {r.gpu_uuid for r in results if r.probe == "gemm"}


def test_the_bundle_options_shape_the_records(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    results = run_node(connector, "node002", ProbeOptions(names=("gemm", "membw"), dtype="fp16", sequential=True))
    assert {r.probe for r in results} == {"gemm", "membw"}
    gemm = one(results, "gemm", "tflops", "cuda:4")
    assert gemm.params["dtype"] == "fp16" and gemm.params["mode"] == "sequential"
    capped = run_node(connector, "node002", ProbeOptions(names=("gemm", "p2p"), max_gpu_mem_mib=20))
    assert all(r.status == "error" and r.reason.startswith("refused: ") for r in capped)
    assert "capped at 20 MiB by --max-gpu-mem" in capped[0].reason
    small = run_node(connector, "node002", ProbeOptions(names=("gemm",), max_gpu_mem_mib=300))
    assert all(r.ok and r.params["m"] == 6144 for r in small)


def test_a_short_deadline_skips_the_probes_it_leaves_no_time_for(demo: SimulatedFleet) -> None:
    results = run_node(SimulatedConnector(demo), "node002", ProbeOptions(deadline_s=1.0))
    skipped = [r for r in results if r.status == "skipped"]
    assert [r.probe for r in skipped] == ["gemm", "membw", "p2p", "pcie", "smclock"]
    assert all("deadline passed before this probe started" in r.reason for r in skipped)


def test_past_the_command_timeout_only_the_lines_printed_so_far_come_back(demo: SimulatedFleet) -> None:
    result = SimulatedConnector(demo).connect(HostSpec("node002")).run(ProbeOptions().bundle_argv(), 5.0)
    assert result.timed_out and result.exit_status is None and result.duration_s == 5.0
    assert [r.probe for r in parse_probe_output(result.stdout, "node002")] == ["facts"]


def test_a_command_line_the_bundle_rejects_exits_2(demo: SimulatedFleet) -> None:
    session = SimulatedConnector(demo).connect(HostSpec("node002"))
    result = session.run(["python3", "-m", "probes", "nccl"], 60.0)
    assert result.exit_status == 2 and "unknown probe 'nccl'" in result.stderr and result.stdout == ""


# ------------------------------------------------------------------------------ the faults


def test_a_slow_gpu_is_slow_and_nothing_in_telemetry_says_why(demo: SimulatedFleet) -> None:
    results = run_node(SimulatedConnector(demo), "node017")
    assert ratio(results, "gemm", "cuda:3") == pytest.approx(0.85, abs=0.03)
    gemm = one(results, "gemm", "tflops", "cuda:3")
    assert gemm.details["clocks_event_reasons"] == [] and gemm.details["sm_clock_mhz_median"] == 1980
    assert one(results, "telemetry", "clocks_event_reasons", "gpu:3").details["active"] == ["gpu_idle"]
    assert ratio(results, "membw", "cuda:3") == pytest.approx(1.0, abs=0.04)


def test_a_throttled_gpu_shows_its_reason_and_a_low_clock(demo: SimulatedFleet) -> None:
    results = run_node(SimulatedConnector(demo), "node012")
    assert ratio(results, "gemm", "cuda:0") == pytest.approx(0.7, abs=0.03)
    evidence = one(results, "gemm", "tflops", "cuda:0").details
    assert evidence["clocks_event_reasons"] == ["hw_thermal_slowdown"]
    assert evidence["sm_clock_mhz_median"] < 0.72 * evidence["sm_clock_max_mhz"]
    idle = one(results, "telemetry", "clocks_event_reasons", "gpu:0")
    assert idle.value == 0x41 and idle.details["active"] == ["gpu_idle", "hw_thermal_slowdown"]
    assert one(results, "smclock", "sm_clock", "cuda:0").value == pytest.approx(0.7 * 1980, rel=0.02)
    assert one(results, "gemm", "tflops", "cuda:1").details["clocks_event_reasons"] == []


def test_a_degraded_pcie_link_shows_its_width_and_half_the_bandwidth(demo: SimulatedFleet) -> None:
    results = run_node(SimulatedConnector(demo), "node021")
    assert one(results, "telemetry", "pcie_width", "gpu:5").value == 8
    assert one(results, "telemetry", "pcie_width_max", "gpu:5").value == 16
    assert one(results, "telemetry", "pcie_width", "gpu:4").value == 16
    for direction in ("h2d", "d2h"):
        assert ratio(results, "pcie", "cuda:5", direction=direction) == pytest.approx(0.5, abs=0.03)
        record = one(results, "pcie", "bandwidth", "cuda:5", direction=direction)
        assert record.details["pcie_width_min_loaded"] == 8 and record.details["pcie_width_max"] == 16


def test_an_nvlink_down_shows_in_telemetry_and_slows_that_gpus_pairs(demo: SimulatedFleet) -> None:
    results = run_node(SimulatedConnector(demo), "node033")
    links = one(results, "telemetry", "nvlink_links_up", "gpu:2")
    assert links.value == 17 and len(links.details["links"]) == 18
    assert [link["link"] for link in links.details["links"] if link["state"] == "down"] == [4]
    assert one(results, "telemetry", "nvlink_links_up", "gpu:3").value == 18
    uni = [r for r in results if r.probe == "p2p" and r.params["direction"] == "unidirectional"]
    with_two = [r.value for r in uni if "cuda:2" in (r.params["src"], r.params["dst"])]
    without = [r.value for r in uni if "cuda:2" not in (r.params["src"], r.params["dst"])]
    assert statistics.median(with_two) / statistics.median(without) == pytest.approx(17 / 18, abs=0.01)


def test_error_counter_faults_show_only_in_their_counters() -> None:
    fleet = parse_fleet(small_fleet({"kind": "pcie_replays", "host": "node002", "gpu": 6, "count": 4000},
                                    {"kind": "nvlink_errors", "host": "node002", "gpu": 1, "link": 9,
                                     "counter": "crc", "count": 25000},
                                    {"kind": "nvlink_errors", "host": "node002", "gpu": 1, "link": 9,
                                     "counter": "recovery", "count": 7}), "x")
    results = run_node(SimulatedConnector(SimulatedFleet(fleet)), "node002")
    assert [one(results, "telemetry", "pcie_replay_count", f"gpu:{gpu}").value for gpu in range(GPUS)] == [
        0, 0, 0, 0, 0, 0, 4000, 0]
    links = one(results, "telemetry", "nvlink_links_up", "gpu:1")
    assert links.value == 18
    counted = {(link["link"], key): link[key] for link in links.details["links"]
               for key in ("crc_errors", "replay_errors", "recovery_errors") if link[key]}
    assert counted == {(9, "crc_errors"): 25000, (9, "recovery_errors"): 7}
    assert ratio(results, "pcie", "cuda:6", direction="h2d") == pytest.approx(1.0, abs=0.05)


def test_nvml_may_list_link_slots_the_model_does_not_wire_as_inactive() -> None:
    fleet = parse_fleet({"nodes": 2, "gpu_model": "NVIDIA A100-SXM4-80GB", "nvml_link_slots": 18,
                         "overrides": [{"hosts": "node002", "nvml_link_slots": 0}]}, "x")
    connector = SimulatedConnector(SimulatedFleet(fleet))
    links = one(run_node(connector, "node001"), "telemetry", "nvlink_links_up", "gpu:0")
    assert links.value == 12 and len(links.details["links"]) == 18
    assert [link["state"] for link in links.details["links"]] == ["up"] * 12 + ["down"] * 6
    assert len(one(run_node(connector, "node002"), "telemetry", "nvlink_links_up", "gpu:0").details["links"]) == 12


def test_a_slow_node_shows_on_the_host_side(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    slow, healthy = run_node(connector, "node040"), run_node(connector, "node041")

    def median(results: list[ProbeResult], probe: str) -> float:
        return statistics.median(r.value for r in results if r.probe == probe)

    assert median(slow, "pcie") / median(healthy, "pcie") == pytest.approx(0.5, abs=0.03)
    assert median(slow, "gemm") / median(healthy, "gemm") == pytest.approx(0.5 ** 0.25, abs=0.03)
    assert median(slow, "membw") / median(healthy, "membw") == pytest.approx(1.0, abs=0.03)
    facts = one(slow, "facts", "gpu_count", "host").details
    assert facts["cpu_count_usable"] < facts["cpu_count"] and facts["load_average_1m"] > facts["cpu_count_usable"]
    assert one(healthy, "facts", "gpu_count", "host").details["load_average_1m"] < 3


# ------------------------------------------------------------------------------ per-size GEMM figures


def test_a_smaller_gemm_runs_at_its_own_table_figure() -> None:
    table = load_skus()
    h100 = table.skus["NVIDIA H100 80GB HBM3"]
    odd = replace(h100, gemm_tflops={**h100.gemm_tflops, "bf16": {**h100.gemm_tflops["bf16"], 6144: 100.0}})
    skus = replace(table, skus={**table.skus, h100.gpu_model: odd})
    connector = SimulatedConnector(SimulatedFleet(parse_fleet({"nodes": 2}, "x", skus), skus))
    small = run_node(connector, "node001", ProbeOptions(names=("gemm",), max_gpu_mem_mib=300))
    assert {r.params["m"] for r in small} == {6144}
    assert statistics.median(r.value for r in small) == pytest.approx(100.0, rel=0.03)
    large = run_node(connector, "node001", ProbeOptions(names=("gemm",)))
    assert statistics.median(r.value for r in large) == pytest.approx(h100.gemm_tflops["bf16"][8192], rel=0.03)


# ------------------------------------------------------------------------------ lost and missing GPUs


def _lost_gpu_as_the_real_telemetry_probe_prints_it() -> dict[str, Any]:
    """probes/telemetry.py on one GPU whose NVML handle fails with NVML_ERROR_GPU_IS_LOST."""
    pynvml = pytest.importorskip("pynvml")

    class LostGpuNvml:
        NVMLError = pynvml.NVMLError

        def __init__(self) -> None:
            for name in dir(pynvml):
                if name.startswith("NVML_ERROR_"):
                    setattr(self, name, getattr(pynvml, name))

        def nvmlInit(self) -> None:
            return None

        def nvmlShutdown(self) -> None:
            return None

        def nvmlDeviceGetCount(self) -> int:
            return 1

        def nvmlSystemGetDriverVersion(self) -> str:
            return "550.54.15"

        def nvmlSystemGetCudaDriverVersion(self) -> int:
            return 12040

        def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
            raise pynvml.NVMLError_GpuIsLost()

    (lost,) = telemetry_probe.run(ProbeContext(), nvml_module=LostGpuNvml())
    return lost.to_dict()


def test_a_lost_gpu_is_in_nvml_as_the_real_probe_prints_it_and_gone_from_torch() -> None:
    fleet = parse_fleet(small_fleet({"kind": "gpu_lost", "host": "node002", "gpu": 2}), "x")
    state = SimulatedFleet(fleet).node_state("node002")
    slot_uuids = [gpu.gpu_uuid for gpu in state.gpus]
    stdout = SimulatedConnector(fleet).connect(HostSpec("node002")).run(ProbeOptions().bundle_argv(), 600.0).stdout
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert [line for line in lines if line["probe"] == "telemetry" and line["device"] == "gpu:2"] == [
        {**_lost_gpu_as_the_real_telemetry_probe_prints_it(), "device": "gpu:2"}]
    results = parse_probe_output(stdout, "node002")
    lost = [r for r in results if r.probe == "telemetry" and r.device == "gpu:2"]
    assert (lost[0].status, lost[0].metric, lost[0].gpu_uuid, lost[0].reason) == (
        "error", "identity", None, "NVML_ERROR_GPU_IS_LOST: GPU is lost")
    assert one(results, "telemetry", "identity", "gpu:3").gpu_uuid == slot_uuids[3]  # NVML keeps its numbers
    facts = one(results, "facts", "gpu_count", "host")
    assert facts.value == facts.details["gpu_count"] == GPUS - 1
    assert facts.details["gpu_uuids"] == [uuid for slot, uuid in enumerate(slot_uuids) if slot != 2]
    assert (facts.details["pci_gpu_count"], facts.details["nvml_gpu_count"]) == (GPUS, GPUS)
    gemm = [r for r in results if r.probe == "gemm"]
    assert [r.device for r in gemm] == [f"cuda:{n}" for n in range(GPUS - 1)]  # CUDA renumbers
    assert [r.gpu_uuid for r in gemm] == facts.details["gpu_uuids"]
    assert one(results, "smclock", "sm_clock", "cuda:2").gpu_uuid == slot_uuids[3]
    assert sum(1 for r in results if r.probe == "p2p") == 7 * 6 + 7 * 6 // 2
    assert sum(1 for r in results if r.probe == "pcie") == 2 * 7 and all(r.ok for r in gemm)


def test_a_missing_gpu_is_gone_from_the_bus_nvml_and_torch() -> None:
    fleet = parse_fleet(small_fleet({"kind": "gpu_missing", "host": "node002", "gpu": 5}), "x")
    slot_uuids = [gpu.gpu_uuid for gpu in SimulatedFleet(parse_fleet(small_fleet(), "x")).node_state("node002").gpus]
    results = run_node(SimulatedConnector(fleet), "node002")
    identities = [r for r in results if r.probe == "telemetry" and r.metric == "identity"]
    assert [r.device for r in identities] == [f"gpu:{n}" for n in range(GPUS - 1)]
    assert [r.gpu_uuid for r in identities] == [uuid for slot, uuid in enumerate(slot_uuids) if slot != 5]
    assert [r.details["nvml_index"] for r in identities] == list(range(GPUS - 1))
    assert "00000000:AB:00.0" not in {r.details["pci_bus_id"] for r in identities}  # slot 5's bus
    facts = one(results, "facts", "gpu_count", "host").details
    assert (facts["gpu_count"], facts["pci_gpu_count"], facts["nvml_gpu_count"]) == (7, 7, 7)
    assert all(r.ok for r in results) and sum(1 for r in results if r.probe == "gemm") == 7


# ------------------------------------------------------------------------------ probe errors


ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered (Xid 13)"


def test_a_probe_error_from_the_retest_on() -> None:
    fleet = parse_fleet(small_fleet({"kind": "probe_error", "host": "node002", "probe": "gemm", "gpu": 1,
                                "from_call": 1}), "x")
    connector = SimulatedConnector(fleet)
    first, retest = run_node(connector, "node002"), run_node(connector, "node002")
    assert all(r.ok for r in first)
    failed = one(retest, "gemm", "tflops", "cuda:1")
    assert (failed.status, failed.value, failed.unit, failed.reason, failed.params) == (
        "error", None, None, ILLEGAL_ACCESS, {})
    assert failed.gpu_uuid == one(first, "gemm", "tflops", "cuda:1").gpu_uuid
    assert failed.details["clocks_event_reasons"] == [] and "nvml_samples" in failed.details  # the sampler ran
    assert [r.device for r in retest if r.probe == "gemm" and not r.ok] == ["cuda:1"]
    assert all(r.ok for r in retest if r.probe != "gemm")


def test_probe_errors_take_each_probes_failure_shape() -> None:
    fleet = parse_fleet(small_fleet({"kind": "probe_error", "host": "node002", "probe": "p2p", "gpu": 3},
                               {"kind": "probe_error", "host": "node002", "probe": "smclock", "gpu": 0,
                                "reason": "CUDA error: unspecified launch failure"},
                               {"kind": "probe_error", "host": "node002", "probe": "membw"},
                               {"kind": "probe_error", "host": "node003", "probe": "p2p"},
                               {"kind": "probe_error", "host": "node003", "probe": "facts", "reason": "boom"}), "x")
    connector = SimulatedConnector(fleet)
    results = run_node(connector, "node002")
    broken_pairs = [r for r in results if r.probe == "p2p" and not r.ok]
    assert len(broken_pairs) == 7 + 7 + 7
    assert all("cuda:3" in (r.params["src"], r.params["dst"]) and r.reason == ILLEGAL_ACCESS for r in broken_pairs)
    assert broken_pairs[0].details["peer_access"] is True and broken_pairs[0].params["buffer_mib"] == 256
    assert all(r.ok for r in results if r.probe == "p2p" and "cuda:3" not in (r.params["src"], r.params["dst"]))
    smclock = [r for r in results if r.probe == "smclock" and r.device == "cuda:0"]
    assert [(r.metric, r.status, r.reason) for r in smclock] == [
        ("sm_clock", "error", "RuntimeError: CUDA error: unspecified launch failure"),
        ("sm_fma_rate_min_ratio", "error", "RuntimeError: CUDA error: unspecified launch failure")]
    membw = [r for r in results if r.probe == "membw"]
    assert len(membw) == GPUS and all(r.status == "error" and r.params == {} and r.details == {} for r in membw)
    other = run_node(connector, "node003")
    p2p = [r for r in other if r.probe == "p2p"]
    assert [(r.device, r.metric, r.status, r.reason) for r in p2p] == [("host", "bandwidth", "error", ILLEGAL_ACCESS)]
    facts = [r for r in other if r.probe == "facts"]
    assert [(r.device, r.metric, r.status, r.reason) for r in facts] == [("host", "gpu_count", "error", "boom")]


def test_a_probe_error_follows_its_gpu_when_cuda_renumbers() -> None:
    fleet = parse_fleet(small_fleet({"kind": "gpu_lost", "host": "node002", "gpu": 2},
                               {"kind": "probe_error", "host": "node002", "probe": "pcie", "gpu": 3}), "x")
    slot3 = SimulatedFleet(fleet).node_state("node002").gpus[3]
    results = run_node(SimulatedConnector(fleet), "node002")
    failed = [r for r in results if r.probe == "pcie" and not r.ok]
    assert [(r.device, r.gpu_uuid) for r in failed] == [("cuda:2", slot3.gpu_uuid)] * 2  # h2d and d2h
    assert failed[0].params == {} and failed[0].details["nvml_samples"] > 2


# ------------------------------------------------------------------------------ throttle share and full load


def test_a_brief_throttle_blip_is_counted_in_a_few_loaded_samples() -> None:
    fleet = parse_fleet(small_fleet({"kind": "throttled", "host": "node002", "gpu": 4, "reason": "hw_slowdown",
                                "factor": 1.0, "share": 0.07}), "x")
    results = run_node(SimulatedConnector(fleet), "node002")
    evidence = one(results, "gemm", "tflops", "cuda:4").details
    loaded = evidence["nvml_samples"] - evidence["nvml_samples_idle"]
    assert evidence["clocks_event_reasons"] == ["hw_slowdown"]
    assert evidence["clocks_event_reason_samples"] == {"hw_slowdown": max(1, round(0.07 * loaded))} and loaded >= 10
    assert evidence["sm_clock_mhz_median"] == 1980
    assert one(results, "telemetry", "clocks_event_reasons", "gpu:4").details["active"] == ["gpu_idle"]
    assert ratio(results, "gemm", "cuda:4") == pytest.approx(1.0, abs=0.03)
    assert one(results, "gemm", "tflops", "cuda:3").details["clocks_event_reason_samples"] == {}


def test_a_partial_throttle_slows_by_its_share() -> None:
    fleet = parse_fleet(small_fleet({"kind": "throttled", "host": "node002", "gpu": 4, "reason": "sw_power_cap",
                                "factor": 0.6, "share": 0.5}), "x")
    results = run_node(SimulatedConnector(fleet), "node002")
    assert ratio(results, "gemm", "cuda:4") == pytest.approx(1 - 0.5 * 0.4, abs=0.03)
    evidence = one(results, "gemm", "tflops", "cuda:4").details
    loaded = evidence["nvml_samples"] - evidence["nvml_samples_idle"]
    assert evidence["clocks_event_reason_samples"] == {"sw_power_cap": round(0.5 * loaded)}
    assert evidence["sm_clock_mhz_min"] <= 0.6 * 1980 + 15 and evidence["sm_clock_mhz_max_seen"] == 1980


def test_a_full_load_only_throttle_acts_only_with_every_gpu_loaded() -> None:
    fleet = parse_fleet(small_fleet({"kind": "throttled", "host": "node002", "gpu": 6, "reason": "hw_power_brake",
                                "factor": 0.6, "full_load_only": True}), "x")
    connector = SimulatedConnector(fleet)
    concurrent = run_node(connector, "node002")
    assert ratio(concurrent, "gemm", "cuda:6") == pytest.approx(0.6, abs=0.03)
    loaded = one(concurrent, "gemm", "tflops", "cuda:6").details
    assert loaded["clocks_event_reasons"] == ["hw_power_brake_slowdown"]
    assert loaded["clocks_event_reason_samples"] == {"hw_power_brake_slowdown": loaded["nvml_samples"] - 2}
    assert one(concurrent, "telemetry", "clocks_event_reasons", "gpu:6").value == 0x1
    assert one(concurrent, "pcie", "bandwidth", "cuda:6", direction="h2d").details["clocks_event_reasons"] == []
    assert one(concurrent, "smclock", "sm_clock", "cuda:6").value == pytest.approx(1980, rel=0.01)
    sequential = run_node(connector, "node002", ProbeOptions(names=("gemm",), sequential=True))
    assert ratio(sequential, "gemm", "cuda:6") == pytest.approx(1.0, abs=0.03)
    assert one(sequential, "gemm", "tflops", "cuda:6").details["clocks_event_reason_samples"] == {}


def test_a_constant_throttle_is_active_in_every_loaded_sample(demo: SimulatedFleet) -> None:
    evidence = one(run_node(SimulatedConnector(demo), "node012"), "gemm", "tflops", "cuda:0").details
    assert evidence["clocks_event_reason_samples"] == {"hw_thermal_slowdown": evidence["nvml_samples"] - 2}
