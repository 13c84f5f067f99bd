"""The simulated fleet: fleet-file checks, the records each simulated node prints (read back with
the controller's own parser), the planted faults as the records show them, determinism, and a
whole sweep of the 64-node demo fleet."""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
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
from gpudiag.sweep import SweepOptions, run_sweep
from gpudiag.transport import Unreachable
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
    assert h100.gemm_tflops["bf16"] > 2 * a100.gemm_tflops["bf16"]


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
