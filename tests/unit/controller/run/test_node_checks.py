"""A node's records checked against its own facts (gpudiag.run.nodecheck), and each host weighing
once in a fleet level (gpudiag.analysis.reference): what one node prints changes only its own
verdict — the issue's 8-node pre-flight, end to end through the controller's path."""

from __future__ import annotations

import copy
import random
import statistics
from collections import Counter
from typing import Any

import hostilefleet as fleet
import pytest

from gpudiag.analysis.reference import fleet_reference, weighted_median
from gpudiag.analysis.sku import load_skus
from gpudiag.hosts import HostSpec
from gpudiag.records import ProbeResult, read_probe_output
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.nodecheck import check_host_records
from gpudiag.sim import SimulatedConnector, parse_fleet

ALL_PROBES = ("facts", "telemetry", "xid", "gemm", "membw", "p2p", "pcie", "smclock")


def node_output(fleet_file: dict[str, Any], host: str, options: ProbeOptions) -> list[ProbeResult]:
    connector = SimulatedConnector(parse_fleet(fleet_file, "test-fleet"))
    ran = connector.connect(HostSpec(host)).run(options.bundle_argv(), 600.0)
    return list(read_probe_output(ran.stdout, host).results)


def measurement(result: ProbeResult) -> tuple[Any, ...]:
    return result.probe, result.device, result.metric, tuple(sorted(result.params.items()))


FAULTS = [{"kind": "gpu_missing", "host": "node002", "gpu": 5}, {"kind": "gpu_lost", "host": "node003", "gpu": 1},
          {"kind": "probe_error", "host": "node004", "probe": "pcie", "gpu": 2},
          {"kind": "xid", "host": "node001", "gpu": 0, "code": 79},
          {"kind": "paused_job", "host": "node002", "used_mib": 80000, "gpu": 3}]


@pytest.mark.parametrize("pause", [False, True])
def test_the_bundle_never_repeats_an_ok_measurement_and_its_records_pass_the_node_checks_unchanged(pause):
    """What the simulator prints (the real bundle's records, every probe, with faults that drop,
    lose and fail GPUs, and --pause with a job holding a GPU) is left as it is. Only a failure
    repeats: a GPU whose PCIe copies fail prints an error record per direction, both without it."""
    fleet_file = {"nodes": 4, "faults": FAULTS}
    for host in ("node001", "node002", "node003", "node004"):
        results = node_output(fleet_file, host, ProbeOptions(names=ALL_PROBES, pause=pause))
        counts = Counter(map(measurement, results))
        repeated = [r for r in results if counts[measurement(r)] > 1]
        assert all(not r.ok for r in repeated)
        assert {measurement(r) for r in repeated} == ({("pcie", "cuda:2", "bandwidth", ())} if host == "node004"
                                                      else set())
        assert check_host_records(results, host) == results


def hostile_lines(host: str = "node005") -> list[dict[str, Any]]:
    return fleet.records_of(fleet.OutputCache().first_pass_text(host))


def checked(records: list[dict[str, Any]], host: str = "node005") -> list[ProbeResult]:
    return check_host_records(list(read_probe_output(fleet.lines_of(records), host).results), host)


def test_copies_of_a_measurement_are_replaced_by_one_error_record_naming_the_duplication():
    records = hostile_lines()
    gemm = next(r for r in records if r["probe"] == "gemm" and r["device"] == "cuda:4")
    faster = dict(gemm, value=gemm["value"] * 1.3)
    results = checked(records + [copy.deepcopy(gemm), faster])
    mine = [r for r in results if (r.probe, r.device) == ("gemm", "cuda:4")]
    assert len(mine) == 1 and mine[0].status == "error" and mine[0].value is None
    assert "printed 3 records of gemm.tflops on cuda:4" in mine[0].reason and "none is used" in mine[0].reason
    others = [r for r in results if r.probe == "gemm" and r.device != "cuda:4"]
    assert len(others) == 7 and all(r.ok for r in others)


def test_records_of_gpus_the_node_does_not_have_are_dropped_and_reported():
    records = hostile_lines()
    gemm = next(r for r in records if r["probe"] == "gemm")
    ghosts = [dict(copy.deepcopy(gemm), device=f"cuda:{n}", gpu_uuid=f"GPU-ghost-{n}", value=700.0)
              for n in range(8, 108)]
    telemetry = next(r for r in records if r["probe"] == "telemetry" and r["metric"] == "identity")
    results = checked(records + ghosts + [dict(copy.deepcopy(telemetry), device="gpu:9")])
    assert not [r for r in results if r.device in {f"cuda:{n}" for n in range(8, 108)} | {"gpu:9"}]
    [gemm_note] = [r for r in results if r.probe == "gemm" and r.device == "host"]
    assert gemm_note.status == "error" and gemm_note.reason == (
        "node005: the node printed gemm records for 100 GPUs it does not have (cuda:8..cuda:107; it has 8 by "
        "torch's count): dropped, not compared")
    [telemetry_note] = [r for r in results if r.probe == "telemetry" and r.device == "host"]
    assert "(gpu:9; it has 8 by NVML's count)" in telemetry_note.reason


def test_a_gpu_a_per_gpu_probe_left_out_is_an_error_record_never_a_silent_pass():
    records = [r for r in hostile_lines()
               if not ((r["probe"], r["device"]) == ("gemm", "cuda:6")
                       or (r["probe"], r["device"], r["params"].get("direction")) == ("pcie", "cuda:2", "d2h")
                       or (r["probe"], r["device"]) == ("telemetry", "gpu:7"))]
    results = checked(records)
    added = {(r.probe, r.device, r.metric, r.params.get("direction")): r for r in results if r.status == "error"}
    assert set(added) == {("gemm", "cuda:6", "tflops", None), ("pcie", "cuda:2", "bandwidth", "d2h"),
                          ("telemetry", "gpu:7", "identity", None)}
    assert added[("gemm", "cuda:6", "tflops", None)].reason == (
        "node005: gemm printed no tflops record for cuda:6, one of the node's 8 GPUs (torch counts them): "
        "not measured")


def test_a_value_above_the_ceiling_of_the_nodes_gpu_model_is_an_error_record_on_that_gpu():
    records = hostile_lines()
    for r in records:
        if (r["probe"], r["device"]) == ("gemm", "cuda:1"):
            r["value"] = 1500.0  # well above 1.5 x an H100's bf16 figure (under 700 TFLOP/s)
        if (r["probe"], r["device"], r["metric"]) == ("smclock", "cuda:2", "sm_clock"):
            r["value"] = 9000.0
    results = {(r.probe, r.device, r.metric): r for r in checked(records)}
    gemm = results[("gemm", "cuda:1", "tflops")]
    figure = load_skus().skus["NVIDIA H100 80GB HBM3"].gemm_tflops["bf16"][8192]
    assert gemm.status == "error" and gemm.reason == (
        f"node005: gemm.tflops 1500 TFLOP/s on cuda:1 is above what it can measure (at most {figure * 1.5:g} "
        f"TFLOP/s: NVIDIA H100 80GB HBM3 figure {figure:g} x 1.5): not used")
    assert results[("smclock", "cuda:2", "sm_clock")].status == "error"
    assert results[("gemm", "cuda:0", "tflops")].ok


def test_a_model_the_sku_table_lacks_is_bounded_by_the_generic_ceiling():
    records = hostile_lines()
    for r in records:
        if r["probe"] == "facts":
            r["details"]["gpu_model"] = "NVIDIA Future GPU"
        if (r["probe"], r["device"]) == ("gemm", "cuda:0"):
            r["value"] = 5000.0
        if (r["probe"], r["device"]) == ("gemm", "cuda:1"):
            r["value"] = 20000.0
    results = {(r.probe, r.device): r for r in checked(records) if r.probe == "gemm"}
    assert results[("gemm", "cuda:0")].ok
    assert results[("gemm", "cuda:1")].status == "error" and "generic ceiling" in results[("gemm", "cuda:1")].reason


# ------------------------------------------------------------------------- a fleet level: hosts weigh once


def test_equal_weights_give_the_plain_median_and_fleet_level():
    rng = random.Random(3)
    for count in range(1, 40):
        values = [rng.random() for _ in range(count)]
        assert weighted_median([(v, 1 / 8) for v in values]) == pytest.approx(statistics.median(values))
        assert weighted_median([(v, 1 / 3) for v in values]) == pytest.approx(statistics.median(values))
    values = [740 * rng.gauss(1, 0.01) for _ in range(64)]
    assert fleet_reference(values, 8, 0.5, [1 / 8] * 64) == fleet_reference(values, 8, 0.5)


def test_a_host_printing_a_hundred_values_weighs_as_one_host():
    rng = random.Random(4)
    values = [740 * rng.gauss(1, 0.01) for _ in range(64)]  # 8 hosts of 8 GPUs
    loud = values + [1100.0] * 100  # a ninth host printing 100 values
    weights = [1 / 8] * 64 + [1 / 100] * 100
    level = fleet_reference(loud, 9, 0.5, weights).value
    assert level == pytest.approx(fleet_reference(values, 8, 0.5).value, rel=0.005)
    assert fleet_reference(loud, 9, 0.5).value == 1100.0  # unweighted, it would have set the level


# ------------------------------------------------------------------------- the pre-flight


@pytest.fixture(scope="module")
def cache() -> fleet.OutputCache:
    return fleet.OutputCache()


@pytest.fixture(scope="module")
def clean_run(cache: fleet.OutputCache) -> fleet.Outputs:
    return fleet.sweep_and_report(fleet.ReplayConnector(cache))


def test_duplicates_and_a_hundred_ghost_gpus_at_1500_tflops_change_only_that_nodes_verdict(cache, clean_run):
    """The issue: one node of an 8-node pre-flight adds duplicate records and GEMM records for
    cuda:8..cuda:107 at 1,500 TFLOP/s; every other node was a confirmed slow_node fail. Now only
    that node's verdict changes: its ghosts are dropped and named, its duplicates unchecked."""
    records = fleet.records_of(cache.first_pass_text("node005"))
    gemm = next(r for r in records if r["probe"] == "gemm")
    ghosts = [dict(copy.deepcopy(gemm), device=f"cuda:{n}", gpu_uuid=f"GPU-ghost-{n}", value=1500.0)
              for n in range(8, 108)]
    hostile = records + copy.deepcopy(records[10:60]) + ghosts
    outputs = fleet.sweep_and_report(fleet.ReplayConnector(cache, {"node005": fleet.lines_of(hostile)}))
    assert fleet.finding_keys(outputs.result, leave_out="node005") == fleet.finding_keys(clean_run.result)
    mine = [f for f in outputs.result.findings if f.host == "node005"]
    assert {f.kind for f in mine} == {"unchecked"} and all(f.severity == "warn" for f in mine)
    assert any("gemm records for 100 GPUs it does not have (cuda:8..cuda:107" in f.evidence for f in mine)
    assert outputs.result.exit_code == 1  # the planted slow GPU still fails; nothing else does


def test_a_node_that_claims_108_gpus_and_prints_them_fast_still_weighs_once(cache, clean_run):
    """A node whose facts agree with its lie (108 GPUs) keeps its records (each below the H100
    ceiling), yet the fleet level is not its: every other node's findings are as they were."""
    records = fleet.records_of(cache.first_pass_text("node006"))
    facts = next(r for r in records if r["probe"] == "facts")
    for name in ("gpu_count", "nvml_gpu_count", "pci_gpu_count"):
        facts["details"][name] = 108
    facts["value"] = 108
    gemm = next(r for r in records if r["probe"] == "gemm")
    loud = [dict(copy.deepcopy(gemm), device=f"cuda:{n}", gpu_uuid=f"GPU-loud-{n}", value=1100.0)
            for n in range(8, 108)]
    outputs = fleet.sweep_and_report(fleet.ReplayConnector(cache, {"node006": fleet.lines_of(records + loud)}))
    assert fleet.finding_keys(outputs.result, leave_out="node006") == fleet.finding_keys(clean_run.result)


def test_a_node_claiming_108_gpus_with_huge_nvlink_counters_does_not_hide_another_nodes_warning():
    """Error counters are judged against the median of their peers' counters: a node whose 108
    GPUs' links all read 100,000 CRC errors would lift that median above a real node's 5,000 —
    unless each host weighs once."""
    faulty = {**fleet.FLEET, "faults": [*fleet.FLEET["faults"],
                                        {"kind": "nvlink_errors", "host": "node002", "gpu": 1, "link": 3,
                                         "counter": "crc", "count": 5000}]}
    cache = fleet.OutputCache(faulty)
    clean = fleet.sweep_and_report(fleet.ReplayConnector(cache))
    assert ("nvlink_errors", "warn", "node002", 1, "telemetry.nvlink_crc_errors") in fleet.finding_keys(clean.result)
    records = fleet.records_of(cache.first_pass_text("node006"))
    facts = next(r for r in records if r["probe"] == "facts")
    for name in ("gpu_count", "nvml_gpu_count", "pci_gpu_count"):
        facts["details"][name] = 108
    gpu0 = [r for r in records if r["probe"] == "telemetry" and r["device"] == "gpu:0"]
    loud = []
    for number in range(8, 108):
        for reading in copy.deepcopy(gpu0):
            reading.update(device=f"gpu:{number}", gpu_uuid=f"GPU-loud-{number}")
            for link in (reading["details"].get("links") or []):
                link["crc_errors"] = 100_000
            loud.append(reading)
    outputs = fleet.sweep_and_report(fleet.ReplayConnector(cache, {"node006": fleet.lines_of(records + loud)}))
    assert fleet.finding_keys(outputs.result, leave_out="node006") == fleet.finding_keys(clean.result,
                                                                                         leave_out="node006")


def test_a_node_printing_a_hundred_gpus_with_a_link_down_cannot_make_that_link_unwired_for_others():
    """For a GPU model the SKU table lacks, peers decide which NVLinks are wired: a hundred GPUs of
    one node reading link 2 inactive must not outvote the fleet, where link 2 is up and one GPU's
    is down (a real nvlink_down)."""
    from gpudiag.analysis.nvlinks import with_wiring
    from gpudiag.analysis.rules import GpuTelemetry, Reading, nvlink_down

    def gpu(host: str, uuid: str, down: set[int]) -> GpuTelemetry:
        links = [{"link": link, "state": "down" if link in down else "up"} for link in range(4)]
        reading = Reading(ProbeResult(probe="telemetry", device="gpu:0", metric="nvlink_links_up", status="ok",
                                      value=4 - len(down), unit="count", details={"links": links}))
        return GpuTelemetry(host, uuid, 0, {"nvlink_links_up": reading}, {}, gpu_model="NVIDIA Future GPU")

    telemetry = {f"node{n}": {f"GPU-{n}-{i}": gpu(f"node{n}", f"GPU-{n}-{i}", {2} if (n, i) == (1, 0) else set())
                              for i in range(2)} for n in range(1, 9)}
    telemetry["liar"] = {f"GPU-liar-{i}": gpu("liar", f"GPU-liar-{i}", {2}) for i in range(100)}
    wired = with_wiring(telemetry, lambda model: None)
    assert nvlink_down(wired["node1"]["GPU-1-0"]) is not None
