"""The simulated fleet: fleet-file checks, the records each simulated node prints (read back with
the controller's own parser), the planted faults as the records show them, determinism, and a
whole sweep of the 64-node demo fleet."""

from __future__ import annotations

import json
import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpudiag.bundle import locate_bundle
from gpudiag.errors import InputError
from gpudiag.exitcodes import ExitCode
from gpudiag.hosts import HostSpec
from gpudiag.nodeprobe import ProbeOptions
from gpudiag.progress import QuietProgress
from gpudiag.results import ProbeResult, parse_probe_output
from gpudiag.simulate import SimulatedConnector, SimulatedFleet, demo_fleet_path, load_fleet, load_skus, parse_fleet
from gpudiag.sku import floor_key, floors_for
from gpudiag.sweep import SweepOptions, run_sweep
from gpudiag.transport import Unreachable
from probes import telemetry as telemetry_probe
from probes.context import ProbeContext
from probes.gemm import GPU_SIZES
from probes.records import Record
from probes.telemetry import METRICS

GPUS = 8


@pytest.fixture(scope="module")
def demo() -> SimulatedFleet:
    return SimulatedFleet(load_fleet(demo_fleet_path()))


def _run(connector: SimulatedConnector, host: str, options: ProbeOptions | None = None) -> list[ProbeResult]:
    result = connector.connect(HostSpec(host)).run((options or ProbeOptions()).bundle_argv(), 600.0)
    assert result.exit_status == 0 and not result.timed_out
    return parse_probe_output(result.stdout, host)


def _one(results: list[ProbeResult], probe: str, metric: str, device: str, **params: Any) -> ProbeResult:
    found = [r for r in results if (r.probe, r.metric, r.device) == (probe, metric, device)
             and all(r.params.get(key) == value for key, value in params.items())]
    assert len(found) == 1, (probe, metric, device, params)
    return found[0]


def _ratio(results: list[ProbeResult], probe: str, device: str, **params: Any) -> float:
    """The device's value over the median of the node's other devices for the same measurement."""
    same = [r for r in results if r.probe == probe and all(r.params.get(k) == v for k, v in params.items())]
    target = next(r.value for r in same if r.device == device)
    return target / statistics.median(r.value for r in same if r.device != device)


# ------------------------------------------------------------------------------ the fleet file


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(data))
    return path


def _small(*faults: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"nodes": 4, "faults": list(faults), **fields}


@pytest.mark.parametrize(("data", "expected"), [
    (_small(colour="red"), "fleet.json: colour: unknown field; allowed: nodes, "),
    ({"gpus_per_node": 8}, "fleet.json: nodes: missing"),
    (_small(nodes="4"), 'fleet.json: nodes: expected an integer, got a string "4"'),
    (_small(nodes=True), "fleet.json: nodes: expected an integer, got a boolean"),
    (_small(gpus_per_node=0), "fleet.json: gpus_per_node: 0 is out of range"),
    (_small(seed=1.5), "fleet.json: seed: expected an integer"),
    (_small(gpu_model="RTX 4090"), 'fleet.json: gpu_model: "RTX 4090" is not in the SKU table'),
    (_small(name_format="node"), "fleet.json: name_format: \"node\" gives the same name to several nodes"),
    (_small(name_format="node{:q}"), "fleet.json: name_format: \"node{:q}\" cannot format a node number"),
    (_small(noise={"gemm_cv": 0.9}), "fleet.json: noise.gemm_cv: 0.9 is out of range 0..0.5"),
    (_small(noise={"clock_cv": 0.1}), "fleet.json: noise.clock_cv: unknown field"),
    (_small(faults={}), "fleet.json: faults: expected a list, got an object"),
    (_small("slow_gpu"), "fleet.json: faults[0]: expected a JSON object, got a string"),
    (_small({"kind": "melt", "host": "node001"}), 'fleet.json: faults[0].kind: "melt" is not a fault kind'),
    (_small({"kind": "slow_gpu", "host": "node001", "gpu": 1}), "fleet.json: faults[0].factor: missing"),
    (_small({"kind": "hang", "host": "node001", "gpu": 1}), "fleet.json: faults[0].gpu: unknown field"),
    (_small({"kind": "hang", "host": "node009"}),
     'fleet.json: faults[0].host: "node009" is not a node of this fleet (node001..node004)'),
    (_small({"kind": "slow_gpu", "host": "node001", "gpu": 9, "factor": 0.8}),
     "fleet.json: faults[0].gpu: 9 is out of range 0..7 for gpus_per_node 8"),
    (_small({"kind": "slow_gpu", "host": "node001", "gpu": "3", "factor": 0.8}),
     'fleet.json: faults[0].gpu: expected an integer, got a string "3"'),
    (_small({"kind": "slow_gpu", "host": "node001", "gpu": 1, "factor": 0}),
     "fleet.json: faults[0].factor: 0 is not in (0, 1]"),
    (_small({"kind": "slow_node", "host": "node001", "factor": 1.5}),
     "fleet.json: faults[0].factor: 1.5 is not in (0, 1]"),
    (_small({"kind": "throttled", "host": "node001", "gpu": 0, "reason": "cold"}),
     'fleet.json: faults[0].reason: "cold" is not a throttle reason; choose from hw_slowdown, hw_thermal, '
     "hw_power_brake, sw_thermal, sw_power_cap"),
    (_small({"kind": "degraded_pcie", "host": "node001", "gpu": 0, "width": 16}),
     "fleet.json: faults[0].width: 16 is not a degraded PCIe width (lanes); choose from 1, 2, 4, 8"),
    (_small({"kind": "nvlink_down", "host": "node001", "gpu": 0, "link": 18}),
     "fleet.json: faults[0].link: 18 is out of range 0..17"),
    (_small({"kind": "slow_nic", "host": "node001", "factor": 0.5, "rail": 8}),
     "fleet.json: faults[0].rail: 8 is out of range 0..7"),
    (_small({"kind": "slow_link", "a": "node001", "b": "node001", "factor": 0.5}),
     "fleet.json: faults[0].b: a link needs two different nodes"),
    (_small({"kind": "hang", "host": "node002"}, {"kind": "unreachable", "host": "node003"},
            {"kind": "hang", "host": "node002"}), "fleet.json: faults[2]: duplicates faults[0]"),
    (_small({"kind": "slow_link", "a": "node001", "b": "node002", "factor": 0.5},
            {"kind": "slow_link", "a": "node002", "b": "node001", "factor": 0.7}),
     "fleet.json: faults[1]: duplicates faults[0]"),
    ([1, 2], "fleet.json: (top level): expected a JSON object, got a list"),
])
def test_a_bad_fleet_file_is_one_input_error_naming_the_file_and_field(tmp_path: Path, data: Any,
                                                                         expected: str) -> None:
    with pytest.raises(InputError) as raised:
        load_fleet(_write(tmp_path, data))
    message = str(raised.value)
    assert message.startswith(str(tmp_path / "fleet.json")), message
    assert expected in message, message
    assert "\n" not in message
    assert raised.value.exit_code == ExitCode.USAGE == 2


def test_invalid_json_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text('{"nodes": 4,\n "faults": [}\n')
    with pytest.raises(InputError, match=r"fleet\.json: invalid JSON at line 2, column 13: ") as raised:
        load_fleet(path)
    assert raised.value.exit_code == 2


def test_a_missing_fleet_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nope.json: cannot read the fleet file"):
        load_fleet(tmp_path / "nope.json")


def test_defaults_and_generated_names() -> None:
    fleet = parse_fleet({"nodes": 3}, "inline")
    assert fleet.hosts == ("node001", "node002", "node003")
    assert (fleet.gpus_per_node, fleet.gpu_model, fleet.seed, fleet.faults) == (8, "NVIDIA H100 80GB HBM3", 0, ())
    assert (fleet.noise.gemm_cv, fleet.noise.membw_cv, fleet.noise.link_cv) == (0.01, 0.01, 0.02)
    assert (fleet.driver, fleet.cuda, fleet.torch) == ("550.54.15", "12.4", "2.4.0")
    assert [spec.label for spec in fleet.host_specs()] == list(fleet.hosts)
    named = parse_fleet({"nodes": 12, "name_format": "gpu-{:02d}", "gpu_model": "NVIDIA A100-SXM4-80GB"}, "x")
    assert named.hosts[0] == "gpu-01" and named.hosts[-1] == "gpu-12"


def test_the_demo_fleet_has_the_nine_faults() -> None:
    fleet = load_fleet(demo_fleet_path())
    assert len(fleet.hosts) == 64 and fleet.hosts[0] == "node001" and fleet.hosts[-1] == "node064"
    assert [fault.kind for fault in fleet.faults] == ["slow_gpu", "throttled", "degraded_pcie", "nvlink_down",
                                                      "slow_node", "slow_nic", "slow_link", "unreachable", "hang"]


def test_the_sku_table_has_the_main_datacenter_gpus_and_a_floor() -> None:
    table = load_skus()
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB"} <= set(table.skus)
    assert 0 < table.floor_fraction < 1
    h100, a100 = table.skus["NVIDIA H100 80GB HBM3"], table.skus["NVIDIA A100-SXM4-80GB"]
    assert (h100.sm_clock_max_mhz, h100.nvlinks, a100.sm_clock_max_mhz, a100.nvlinks) == (1980, 18, 1410, 12)
    assert h100.gemm_tflops["bf16"][8192] > 2 * a100.gemm_tflops["bf16"][8192]


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
    facts = _one(results, "facts", "gpu_count", "host")
    assert facts.value == GPUS and facts.details["hostname"] == "node002"
    assert facts.details["gpu_model"] == "NVIDIA H100 80GB HBM3" and len(facts.details["gpu_uuids"]) == GPUS

    def count(probe: str, metric: str | None = None) -> int:
        return sum(1 for r in results if r.probe == probe and metric in (None, r.metric))

    assert count("gemm") == count("membw") == GPUS
    assert count("p2p") == GPUS * (GPUS - 1) + GPUS * (GPUS - 1) // 2
    assert count("pcie") == 2 * GPUS and count("smclock") == 2 * GPUS
    assert count("telemetry") == GPUS * (1 + len(METRICS))
    telemetry_metrics = [r.metric for r in results if r.probe == "telemetry" and r.device == "gpu:0"]
    assert telemetry_metrics == ["identity", *(metric for metric, _ in METRICS)]
    assert all(r.unit == dict(METRICS)[r.metric] for r in results if r.probe == "telemetry" and r.metric != "identity")
    gemm = _one(results, "gemm", "tflops", "cuda:0")
    assert gemm.params == {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}
    assert 650 < gemm.value < 830 and gemm.cv < 0.01 and gemm.samples >= 5
    assert gemm.details["clocks_event_reasons"] == [] and gemm.details["sm_clock_max_mhz"] == 1980
    uuids = {r.gpu_uuid for r in results if r.probe == "telemetry"}
    assert uuids == set(facts.details["gpu_uuids"]) == {r.gpu_uuid for r in results if r.probe == "gemm"}


def test_the_bundle_options_shape_the_records(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    results = _run(connector, "node002", ProbeOptions(names=("gemm", "membw"), dtype="fp16", sequential=True))
    assert {r.probe for r in results} == {"gemm", "membw"}
    gemm = _one(results, "gemm", "tflops", "cuda:4")
    assert gemm.params["dtype"] == "fp16" and gemm.params["mode"] == "sequential"
    capped = _run(connector, "node002", ProbeOptions(names=("gemm", "p2p"), max_gpu_mem_mib=20))
    assert all(r.status == "error" and r.reason.startswith("refused: ") for r in capped)
    assert "capped at 20 MiB by --max-gpu-mem" in capped[0].reason
    small = _run(connector, "node002", ProbeOptions(names=("gemm",), max_gpu_mem_mib=300))
    assert all(r.ok and r.params["m"] == 6144 for r in small)


def test_a_short_deadline_skips_the_probes_it_leaves_no_time_for(demo: SimulatedFleet) -> None:
    results = _run(SimulatedConnector(demo), "node002", ProbeOptions(deadline_s=1.0))
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
    results = _run(SimulatedConnector(demo), "node017")
    assert _ratio(results, "gemm", "cuda:3") == pytest.approx(0.85, abs=0.03)
    gemm = _one(results, "gemm", "tflops", "cuda:3")
    assert gemm.details["clocks_event_reasons"] == [] and gemm.details["sm_clock_mhz_median"] == 1980
    assert _one(results, "telemetry", "clocks_event_reasons", "gpu:3").details["active"] == ["gpu_idle"]
    assert _ratio(results, "membw", "cuda:3") == pytest.approx(1.0, abs=0.04)


def test_a_throttled_gpu_shows_its_reason_and_a_low_clock(demo: SimulatedFleet) -> None:
    results = _run(SimulatedConnector(demo), "node012")
    assert _ratio(results, "gemm", "cuda:0") == pytest.approx(0.7, abs=0.03)
    evidence = _one(results, "gemm", "tflops", "cuda:0").details
    assert evidence["clocks_event_reasons"] == ["hw_thermal_slowdown"]
    assert evidence["sm_clock_mhz_median"] < 0.72 * evidence["sm_clock_max_mhz"]
    idle = _one(results, "telemetry", "clocks_event_reasons", "gpu:0")
    assert idle.value == 0x41 and idle.details["active"] == ["gpu_idle", "hw_thermal_slowdown"]
    assert _one(results, "smclock", "sm_clock", "cuda:0").value == pytest.approx(0.7 * 1980, rel=0.02)
    assert _one(results, "gemm", "tflops", "cuda:1").details["clocks_event_reasons"] == []


def test_a_degraded_pcie_link_shows_its_width_and_half_the_bandwidth(demo: SimulatedFleet) -> None:
    results = _run(SimulatedConnector(demo), "node021")
    assert _one(results, "telemetry", "pcie_width", "gpu:5").value == 8
    assert _one(results, "telemetry", "pcie_width_max", "gpu:5").value == 16
    assert _one(results, "telemetry", "pcie_width", "gpu:4").value == 16
    for direction in ("h2d", "d2h"):
        assert _ratio(results, "pcie", "cuda:5", direction=direction) == pytest.approx(0.5, abs=0.03)
        record = _one(results, "pcie", "bandwidth", "cuda:5", direction=direction)
        assert record.details["pcie_width_min_loaded"] == 8 and record.details["pcie_width_max"] == 16


def test_an_nvlink_down_shows_in_telemetry_and_slows_that_gpus_pairs(demo: SimulatedFleet) -> None:
    results = _run(SimulatedConnector(demo), "node033")
    links = _one(results, "telemetry", "nvlink_links_up", "gpu:2")
    assert links.value == 17 and len(links.details["links"]) == 18
    assert [link["link"] for link in links.details["links"] if link["state"] == "down"] == [4]
    assert _one(results, "telemetry", "nvlink_links_up", "gpu:3").value == 18
    uni = [r for r in results if r.probe == "p2p" and r.params["direction"] == "unidirectional"]
    with_two = [r.value for r in uni if "cuda:2" in (r.params["src"], r.params["dst"])]
    without = [r.value for r in uni if "cuda:2" not in (r.params["src"], r.params["dst"])]
    assert statistics.median(with_two) / statistics.median(without) == pytest.approx(17 / 18, abs=0.01)


def test_a_slow_node_shows_on_the_host_side(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    slow, healthy = _run(connector, "node040"), _run(connector, "node041")

    def median(results: list[ProbeResult], probe: str) -> float:
        return statistics.median(r.value for r in results if r.probe == probe)

    assert median(slow, "pcie") / median(healthy, "pcie") == pytest.approx(0.5, abs=0.03)
    assert median(slow, "gemm") / median(healthy, "gemm") == pytest.approx(0.5 ** 0.25, abs=0.03)
    assert median(slow, "membw") / median(healthy, "membw") == pytest.approx(1.0, abs=0.03)
    facts = _one(slow, "facts", "gpu_count", "host").details
    assert facts["cpu_count_usable"] < facts["cpu_count"] and facts["load_average_1m"] > facts["cpu_count_usable"]
    assert _one(healthy, "facts", "gpu_count", "host").details["load_average_1m"] < 3


def test_slow_nics_and_links_show_only_in_link_measurements(demo: SimulatedFleet) -> None:
    def rate(a: str, b: str, rail: int = 0) -> float:
        return statistics.median(demo.link_gbps(a, b, rail, demo.link_rng(a, b, rail, i)) for i in range(9))

    nominal = rate("node001", "node002")
    assert 370 < nominal < 410
    assert rate("node030", "node031") / nominal == pytest.approx(0.6, abs=0.04)
    assert rate("node002", "node030", rail=5) / nominal == pytest.approx(0.6, abs=0.04)
    assert rate("node009", "node004") / nominal == pytest.approx(0.5, abs=0.04)
    assert rate("node004", "node010") / nominal == pytest.approx(1.0, abs=0.04)
    with pytest.raises(ValueError, match="node999"):
        demo.link_gbps("node001", "node999", 0, demo.link_rng("node001", "node999", 0, 0))
    node_results = _run(SimulatedConnector(demo), "node030")
    assert _ratio(node_results, "gemm", "cuda:0") == pytest.approx(1.0, abs=0.04)


def test_an_unreachable_node_and_a_stranger_raise_unreachable(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    with pytest.raises(Unreachable, match="node050"):
        connector.connect(HostSpec("node050"))
    with pytest.raises(Unreachable, match="not a node of the simulated fleet"):
        connector.connect(HostSpec("elsewhere"))


def test_a_hung_node_times_out_at_once(demo: SimulatedFleet) -> None:
    started = time.monotonic()
    result = SimulatedConnector(demo).connect(HostSpec("node051")).run(ProbeOptions().bundle_argv(), 635.0)
    assert time.monotonic() - started < 1.0
    assert result.timed_out and result.exit_status is None and result.stdout == ""


# ------------------------------------------------------------------------------ determinism


def test_the_same_fleet_gives_the_same_bytes_whatever_the_thread_order(demo: SimulatedFleet) -> None:
    argv = ProbeOptions().bundle_argv()
    hosts = ["node017", "node012", "node002", "node040"]

    def outputs(order: list[str]) -> dict[str, str]:
        connector = SimulatedConnector(load_fleet(demo_fleet_path()))
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = pool.map(lambda host: (host, connector.connect(HostSpec(host)).run(argv, 600.0).stdout), order)
            return dict(done)

    assert outputs(hosts) == outputs(list(reversed(hosts)))


def test_a_retest_gets_fresh_noise_on_the_same_faults(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    first, second = _run(connector, "node017"), _run(connector, "node017")
    assert [r.value for r in first if r.probe == "gemm"] != [r.value for r in second if r.probe == "gemm"]
    assert _ratio(second, "gemm", "cuda:3") == pytest.approx(0.85, abs=0.03)
    assert [r.gpu_uuid for r in first] == [r.gpu_uuid for r in second]
    other_seed = SimulatedConnector(parse_fleet({"nodes": 20, "seed": 8}, "x"))
    assert [r.value for r in _run(other_seed, "node017") if r.probe == "gemm"] != [
        r.value for r in first if r.probe == "gemm"]


# ------------------------------------------------------------------------------ a whole sweep


def test_a_sweep_of_the_demo_fleet_finishes_in_seconds() -> None:
    fleet = load_fleet(demo_fleet_path())
    started = time.monotonic()
    result = run_sweep(fleet.host_specs(), SweepOptions(ProbeOptions()), SimulatedConnector(fleet), locate_bundle(),
                       QuietProgress())
    assert time.monotonic() - started < 20.0
    statuses = {host.host: host.status for host in result.hosts}
    assert len(statuses) == 64
    assert statuses.pop("node050") == "unreachable" and statuses.pop("node051") == "timeout"
    assert set(statuses.values()) == {"ok"}
    ok = next(host for host in result.hosts if host.host == "node017")
    assert ok.facts["gpu_count"] == GPUS and ok.facts["driver"] == "550.54.15"
    assert sum(1 for r in ok.results if r.probe == "gemm") == GPUS
    assert result.exit_code == ExitCode.UNCHECKED
    json.dumps(result.to_dict())


# ------------------------------------------------------------------------------ per-size GEMM figures


def test_every_sku_has_a_gemm_figure_per_dtype_and_probe_size() -> None:
    for sku in load_skus().skus.values():
        assert set(sku.gemm_tflops) == {"bf16", "fp16", "tf32", "fp32"}, sku.gpu_model
        for dtype, by_size in sku.gemm_tflops.items():
            assert list(by_size) == list(GPU_SIZES), (sku.gpu_model, dtype)
            figures = [by_size[size] for size in GPU_SIZES]
            assert figures == sorted(figures, reverse=True), (sku.gpu_model, dtype)  # small GEMMs fill less


@pytest.mark.parametrize(("probe", "metric", "params", "expected"), [
    ("gemm", "tflops", {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}, "bf16:8192"),
    ("gemm", "tflops", {"dtype": "fp32", "m": 4096, "n": 1024, "k": 4096}, "fp32:4096x1024x4096"),
    ("gemm", "tflops", {"dtype": "tf32"}, "tf32"),
    ("pcie", "bandwidth", {"direction": "h2d", "buffer_mib": 256}, "h2d@256"),
    ("membw", "bandwidth", {"memory": "device", "buffer_mib": 1024}, "@1024"),
    ("p2p", "bandwidth", {"direction": "bidirectional", "buffer_mib": 16}, "bidirectional@16"),
    ("smclock", "sm_clock", {"threads_per_block": 512}, ""),
])
def test_floor_keys_qualify_gemm_by_dtype_and_size(probe: str, metric: str, params: dict[str, Any],
                                                    expected: str) -> None:
    assert floor_key(probe, metric, params) == (probe, metric, expected)


def test_floors_hold_every_dtype_and_size_under_their_floor_keys() -> None:
    h100 = load_skus().skus["NVIDIA H100 80GB HBM3"]
    floors = floors_for("NVIDIA H100 80GB HBM3")
    gemm_keys = {key for key in floors if key[0] == "gemm"}
    assert gemm_keys == {("gemm", "tflops", f"{dtype}:{size}") for dtype in h100.gemm_tflops for size in GPU_SIZES}
    assert floors[("gemm", "tflops", "bf16:8192")] == 740.0
    assert floors[("gemm", "tflops", "fp16:2048")] == h100.gemm_tflops["fp16"][2048]
    assert floors[("pcie", "bandwidth", "h2d@256")] == h100.pcie_h2d_gbps and ("gemm", "tflops", "bf16") not in floors
    assert ("pcie", "bandwidth", "h2d@16") not in floors  # a smaller buffer copies slower: no figure for it
    assert floors[("smclock", "sm_fma_rate_min_ratio", "")] == 1.0
    assert floors_for("RTX 4090") == {}


def test_a_smaller_gemm_runs_at_its_own_table_figure() -> None:
    table = load_skus()
    h100 = table.skus["NVIDIA H100 80GB HBM3"]
    odd = replace(h100, gemm_tflops={**h100.gemm_tflops, "bf16": {**h100.gemm_tflops["bf16"], 6144: 100.0}})
    skus = replace(table, skus={**table.skus, h100.gpu_model: odd})
    connector = SimulatedConnector(SimulatedFleet(parse_fleet({"nodes": 2}, "x", skus), skus))
    small = _run(connector, "node001", ProbeOptions(names=("gemm",), max_gpu_mem_mib=300))
    assert {r.params["m"] for r in small} == {6144}
    assert statistics.median(r.value for r in small) == pytest.approx(100.0, rel=0.03)
    large = _run(connector, "node001", ProbeOptions(names=("gemm",)))
    assert statistics.median(r.value for r in large) == pytest.approx(740.0, rel=0.03)


# ------------------------------------------------------------------------------ per-node overrides


MIXED = {"nodes": 6, "seed": 3, "overrides": [
    {"hosts": "node[003-005]", "gpu_model": "NVIDIA A100-SXM4-80GB", "gpus_per_node": 4, "driver": "535.183.01"},
    {"hosts": ["node005", "node006"], "cuda": "12.2", "torch": "2.3.1"},
    {"hosts": "node005", "driver": "550.90.07"}]}


def test_overrides_mix_gpu_models_drivers_and_gpu_counts_in_order() -> None:
    fleet = parse_fleet(MIXED, "mixed.json")
    specs = {spec.host: spec for spec in fleet.node_specs}
    assert (fleet.gpu_model, fleet.gpus_per_node, fleet.driver) == ("NVIDIA H100 80GB HBM3", 8, "550.54.15")
    assert (specs["node001"].gpu_model, specs["node001"].gpus_per_node, specs["node001"].gpu_memory_mib) == (
        "NVIDIA H100 80GB HBM3", 8, 81008)
    assert (specs["node003"].gpu_model, specs["node003"].gpus_per_node, specs["node003"].gpu_memory_mib) == (
        "NVIDIA A100-SXM4-80GB", 4, 81051)  # memory follows the overridden model
    assert (specs["node005"].driver, specs["node005"].cuda, specs["node005"].torch) == ("550.90.07", "12.2", "2.3.1")
    assert (specs["node006"].gpu_model, specs["node006"].driver, specs["node006"].cuda) == (
        "NVIDIA H100 80GB HBM3", "550.54.15", "12.2")
    connector = SimulatedConnector(fleet)
    a100 = _run(connector, "node004")
    facts = _one(a100, "facts", "gpu_count", "host").details
    assert (facts["gpu_model"], facts["gpu_count"], facts["driver_version"]) == ("NVIDIA A100-SXM4-80GB", 4,
                                                                                 "535.183.01")
    assert (facts["pci_gpu_count"], facts["nvml_gpu_count"], facts["cpu_model"]) == (4, 4,
                                                                                     "AMD EPYC 7742 64-Core Processor")
    assert _one(a100, "telemetry", "sm_clock_max", "gpu:3").value == 1410
    assert _one(a100, "telemetry", "nvlink_links_up", "gpu:0").value == 12
    assert 250 < _one(a100, "gemm", "tflops", "cuda:0").value < 310
    assert sum(1 for r in a100 if r.probe == "p2p") == 4 * 3 + 4 * 3 // 2
    h100 = _run(connector, "node001")
    assert _one(h100, "facts", "gpu_count", "host").value == 8 and 650 < _one(h100, "gemm", "tflops", "cuda:7").value


def test_a_mixed_pair_runs_at_the_slower_nodes_rail_rate() -> None:
    fleet = SimulatedFleet(parse_fleet(MIXED, "mixed.json"))
    rate = statistics.median(fleet.link_gbps("node001", "node003", 7, fleet.link_rng("node001", "node003", 7, i))
                             for i in range(9))
    assert rate == pytest.approx(196.0, rel=0.03)  # A100 rails are 200 Gbit/s, H100 rails 400
    assert fleet.sku("node003").gpu_model == "NVIDIA A100-SXM4-80GB"


def _mixed(*faults: dict[str, Any], overrides: Any = None) -> dict[str, Any]:
    return {**MIXED, "overrides": MIXED["overrides"] if overrides is None else overrides, "faults": list(faults)}


@pytest.mark.parametrize(("data", "expected"), [
    (_mixed({"kind": "slow_gpu", "host": "node003", "gpu": 5, "factor": 0.8}),
     "fleet.json: faults[0].gpu: 5 is out of range 0..3 for gpus_per_node 4 of node003"),
    (_mixed({"kind": "nvlink_down", "host": "node004", "gpu": 0, "link": 12}),
     "fleet.json: faults[0].link: 12 is out of range 0..11 for the 12 NVLinks of NVIDIA A100-SXM4-80GB"),
    (_mixed(overrides=[{"hosts": "node001", "colour": "red"}]), "fleet.json: overrides[0].colour: unknown field"),
    (_mixed(overrides=[{"gpu_model": "NVIDIA H200"}]), "fleet.json: overrides[0].hosts: missing"),
    (_mixed(overrides=[{"hosts": "node[001-002]"}]), "fleet.json: overrides[0]: overrides nothing; give any of"),
    (_mixed(overrides=[{"hosts": "node001", "driver": "1"}, {"hosts": "node[005-009]", "driver": "2"}]),
     'fleet.json: overrides[1].hosts: "node007" is not a node of this fleet (node001..node006)'),
    (_mixed(overrides=[{"hosts": ["node001", "gpu9"], "driver": "1"}]),
     'fleet.json: overrides[0].hosts[1]: "gpu9" is not a node of this fleet'),
    (_mixed(overrides=[{"hosts": ["node001", 2], "driver": "1"}]),
     "fleet.json: overrides[0].hosts[1]: expected a node name (a string), got an integer 2"),
    (_mixed(overrides=[{"hosts": [], "driver": "1"}]), "fleet.json: overrides[0].hosts: expected a ClusterShell"),
    (_mixed(overrides=[{"hosts": "node[001-", "driver": "1"}]),
     'fleet.json: overrides[0].hosts: "node[001-" is not a ClusterShell node set'),
    (_mixed(overrides=[{"hosts": "node[1-9999999]", "driver": "1"}]),
     "fleet.json: overrides[0].hosts: \"node[1-9999999]\" holds a range of more than 100000 nodes"),
    (_mixed(overrides=[{"hosts": "node001", "gpu_model": "RTX 4090"}]),
     'fleet.json: overrides[0].gpu_model: "RTX 4090" is not in the SKU table'),
    (_mixed(overrides=[{"hosts": "node001", "gpus_per_node": 0}]),
     "fleet.json: overrides[0].gpus_per_node: 0 is out of range"),
    (_mixed(overrides={"hosts": "node001"}), "fleet.json: overrides: expected a list, got an object"),
])
def test_a_bad_override_or_a_fault_beyond_its_node_is_an_input_error(tmp_path: Path, data: Any,
                                                                      expected: str) -> None:
    with pytest.raises(InputError) as raised:
        load_fleet(_write(tmp_path, data))
    assert expected in str(raised.value), str(raised.value)


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
    fleet = parse_fleet(_small({"kind": "gpu_lost", "host": "node002", "gpu": 2}), "x")
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
    assert _one(results, "telemetry", "identity", "gpu:3").gpu_uuid == slot_uuids[3]  # NVML keeps its numbers
    facts = _one(results, "facts", "gpu_count", "host")
    assert facts.value == facts.details["gpu_count"] == GPUS - 1
    assert facts.details["gpu_uuids"] == [uuid for slot, uuid in enumerate(slot_uuids) if slot != 2]
    assert (facts.details["pci_gpu_count"], facts.details["nvml_gpu_count"]) == (GPUS, GPUS)
    gemm = [r for r in results if r.probe == "gemm"]
    assert [r.device for r in gemm] == [f"cuda:{n}" for n in range(GPUS - 1)]  # CUDA renumbers
    assert [r.gpu_uuid for r in gemm] == facts.details["gpu_uuids"]
    assert _one(results, "smclock", "sm_clock", "cuda:2").gpu_uuid == slot_uuids[3]
    assert sum(1 for r in results if r.probe == "p2p") == 7 * 6 + 7 * 6 // 2
    assert sum(1 for r in results if r.probe == "pcie") == 2 * 7 and all(r.ok for r in gemm)


def test_a_missing_gpu_is_gone_from_the_bus_nvml_and_torch() -> None:
    fleet = parse_fleet(_small({"kind": "gpu_missing", "host": "node002", "gpu": 5}), "x")
    slot_uuids = [gpu.gpu_uuid for gpu in SimulatedFleet(parse_fleet(_small(), "x")).node_state("node002").gpus]
    results = _run(SimulatedConnector(fleet), "node002")
    identities = [r for r in results if r.probe == "telemetry" and r.metric == "identity"]
    assert [r.device for r in identities] == [f"gpu:{n}" for n in range(GPUS - 1)]
    assert [r.gpu_uuid for r in identities] == [uuid for slot, uuid in enumerate(slot_uuids) if slot != 5]
    assert [r.details["nvml_index"] for r in identities] == list(range(GPUS - 1))
    assert "00000000:AB:00.0" not in {r.details["pci_bus_id"] for r in identities}  # slot 5's bus
    facts = _one(results, "facts", "gpu_count", "host").details
    assert (facts["gpu_count"], facts["pci_gpu_count"], facts["nvml_gpu_count"]) == (7, 7, 7)
    assert all(r.ok for r in results) and sum(1 for r in results if r.probe == "gemm") == 7


# ------------------------------------------------------------------------------ probe errors


ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered (Xid 13)"


def test_a_probe_error_from_the_retest_on() -> None:
    fleet = parse_fleet(_small({"kind": "probe_error", "host": "node002", "probe": "gemm", "gpu": 1,
                                "from_call": 1}), "x")
    connector = SimulatedConnector(fleet)
    first, retest = _run(connector, "node002"), _run(connector, "node002")
    assert all(r.ok for r in first)
    failed = _one(retest, "gemm", "tflops", "cuda:1")
    assert (failed.status, failed.value, failed.unit, failed.reason, failed.params) == (
        "error", None, None, ILLEGAL_ACCESS, {})
    assert failed.gpu_uuid == _one(first, "gemm", "tflops", "cuda:1").gpu_uuid
    assert failed.details["clocks_event_reasons"] == [] and "nvml_samples" in failed.details  # the sampler ran
    assert [r.device for r in retest if r.probe == "gemm" and not r.ok] == ["cuda:1"]
    assert all(r.ok for r in retest if r.probe != "gemm")


def test_probe_errors_take_each_probes_failure_shape() -> None:
    fleet = parse_fleet(_small({"kind": "probe_error", "host": "node002", "probe": "p2p", "gpu": 3},
                               {"kind": "probe_error", "host": "node002", "probe": "smclock", "gpu": 0,
                                "reason": "CUDA error: unspecified launch failure"},
                               {"kind": "probe_error", "host": "node002", "probe": "membw"},
                               {"kind": "probe_error", "host": "node003", "probe": "p2p"},
                               {"kind": "probe_error", "host": "node003", "probe": "facts", "reason": "boom"}), "x")
    connector = SimulatedConnector(fleet)
    results = _run(connector, "node002")
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
    other = _run(connector, "node003")
    p2p = [r for r in other if r.probe == "p2p"]
    assert [(r.device, r.metric, r.status, r.reason) for r in p2p] == [("host", "bandwidth", "error", ILLEGAL_ACCESS)]
    facts = [r for r in other if r.probe == "facts"]
    assert [(r.device, r.metric, r.status, r.reason) for r in facts] == [("host", "gpu_count", "error", "boom")]


def test_a_probe_error_follows_its_gpu_when_cuda_renumbers() -> None:
    fleet = parse_fleet(_small({"kind": "gpu_lost", "host": "node002", "gpu": 2},
                               {"kind": "probe_error", "host": "node002", "probe": "pcie", "gpu": 3}), "x")
    slot3 = SimulatedFleet(fleet).node_state("node002").gpus[3]
    results = _run(SimulatedConnector(fleet), "node002")
    failed = [r for r in results if r.probe == "pcie" and not r.ok]
    assert [(r.device, r.gpu_uuid) for r in failed] == [("cuda:2", slot3.gpu_uuid)] * 2  # h2d and d2h
    assert failed[0].params == {} and failed[0].details["nvml_samples"] > 2


# ------------------------------------------------------------------------------ throttle share and full load


def test_a_brief_throttle_blip_is_counted_in_a_few_loaded_samples() -> None:
    fleet = parse_fleet(_small({"kind": "throttled", "host": "node002", "gpu": 4, "reason": "hw_slowdown",
                                "factor": 1.0, "share": 0.07}), "x")
    results = _run(SimulatedConnector(fleet), "node002")
    evidence = _one(results, "gemm", "tflops", "cuda:4").details
    loaded = evidence["nvml_samples"] - evidence["nvml_samples_idle"]
    assert evidence["clocks_event_reasons"] == ["hw_slowdown"]
    assert evidence["clocks_event_reason_samples"] == {"hw_slowdown": max(1, round(0.07 * loaded))} and loaded >= 10
    assert evidence["sm_clock_mhz_median"] == 1980
    assert _one(results, "telemetry", "clocks_event_reasons", "gpu:4").details["active"] == ["gpu_idle"]
    assert _ratio(results, "gemm", "cuda:4") == pytest.approx(1.0, abs=0.03)
    assert _one(results, "gemm", "tflops", "cuda:3").details["clocks_event_reason_samples"] == {}


def test_a_partial_throttle_slows_by_its_share() -> None:
    fleet = parse_fleet(_small({"kind": "throttled", "host": "node002", "gpu": 4, "reason": "sw_power_cap",
                                "factor": 0.6, "share": 0.5}), "x")
    results = _run(SimulatedConnector(fleet), "node002")
    assert _ratio(results, "gemm", "cuda:4") == pytest.approx(1 - 0.5 * 0.4, abs=0.03)
    evidence = _one(results, "gemm", "tflops", "cuda:4").details
    loaded = evidence["nvml_samples"] - evidence["nvml_samples_idle"]
    assert evidence["clocks_event_reason_samples"] == {"sw_power_cap": round(0.5 * loaded)}
    assert evidence["sm_clock_mhz_min"] <= 0.6 * 1980 + 15 and evidence["sm_clock_mhz_max_seen"] == 1980


def test_a_full_load_only_throttle_acts_only_with_every_gpu_loaded() -> None:
    fleet = parse_fleet(_small({"kind": "throttled", "host": "node002", "gpu": 6, "reason": "hw_power_brake",
                                "factor": 0.6, "full_load_only": True}), "x")
    connector = SimulatedConnector(fleet)
    concurrent = _run(connector, "node002")
    assert _ratio(concurrent, "gemm", "cuda:6") == pytest.approx(0.6, abs=0.03)
    loaded = _one(concurrent, "gemm", "tflops", "cuda:6").details
    assert loaded["clocks_event_reasons"] == ["hw_power_brake_slowdown"]
    assert loaded["clocks_event_reason_samples"] == {"hw_power_brake_slowdown": loaded["nvml_samples"] - 2}
    assert _one(concurrent, "telemetry", "clocks_event_reasons", "gpu:6").value == 0x1
    assert _one(concurrent, "pcie", "bandwidth", "cuda:6", direction="h2d").details["clocks_event_reasons"] == []
    assert _one(concurrent, "smclock", "sm_clock", "cuda:6").value == pytest.approx(1980, rel=0.01)
    sequential = _run(connector, "node002", ProbeOptions(names=("gemm",), sequential=True))
    assert _ratio(sequential, "gemm", "cuda:6") == pytest.approx(1.0, abs=0.03)
    assert _one(sequential, "gemm", "tflops", "cuda:6").details["clocks_event_reason_samples"] == {}


def test_a_constant_throttle_is_active_in_every_loaded_sample(demo: SimulatedFleet) -> None:
    evidence = _one(_run(SimulatedConnector(demo), "node012"), "gemm", "tflops", "cuda:0").details
    assert evidence["clocks_event_reason_samples"] == {"hw_thermal_slowdown": evidence["nvml_samples"] - 2}


@pytest.mark.parametrize(("fault", "expected"), [
    ({"kind": "gpu_lost", "host": "node001"}, "faults[0].gpu: missing"),
    ({"kind": "gpu_missing", "host": "node001", "gpu": 8}, "faults[0].gpu: 8 is out of range 0..7"),
    ({"kind": "probe_error", "host": "node001", "probe": "nccl"},
     'faults[0].probe: "nccl" is not a probe; choose from facts, telemetry, gemm'),
    ({"kind": "probe_error", "host": "node001", "probe": "facts", "gpu": 0},
     "faults[0].gpu: the facts probe has no per-GPU records"),
    ({"kind": "probe_error", "host": "node001", "probe": "gemm", "from_call": -1},
     "faults[0].from_call: -1 is out of range; it must be at least 0"),
    ({"kind": "probe_error", "host": "node001", "probe": "gemm", "reason": " "}, "faults[0].reason: must not be empty"),
    ({"kind": "probe_error", "host": "node001", "probe": "gemm", "width": 8}, "faults[0].width: unknown field"),
    ({"kind": "throttled", "host": "node001", "gpu": 0, "reason": "hw_slowdown", "share": 0},
     "faults[0].share: 0 is not in (0, 1]"),
    ({"kind": "throttled", "host": "node001", "gpu": 0, "reason": "hw_slowdown", "full_load_only": "yes"},
     'faults[0].full_load_only: expected true or false, got a string "yes"'),
])
def test_a_bad_new_fault_is_an_input_error(tmp_path: Path, fault: dict[str, Any], expected: str) -> None:
    with pytest.raises(InputError, match=re.escape(expected)):
        load_fleet(_write(tmp_path, _small(fault)))


def test_a_gpu_is_lost_or_missing_and_a_node_keeps_one(tmp_path: Path) -> None:
    both = _small({"kind": "gpu_lost", "host": "node001", "gpu": 1},
                  {"kind": "gpu_missing", "host": "node001", "gpu": 1})
    with pytest.raises(InputError, match=re.escape("faults[1]: duplicates faults[0]")):
        load_fleet(_write(tmp_path, both))
    all_gone = _small(*({"kind": "gpu_lost", "host": "node001", "gpu": gpu} for gpu in range(2)), gpus_per_node=2)
    with pytest.raises(InputError, match=re.escape("faults[1]: leaves node001 no GPU that torch can use")):
        load_fleet(_write(tmp_path, all_gone))
