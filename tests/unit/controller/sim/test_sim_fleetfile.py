"""The simulated fleet's fleet file: every problem is one input error naming the file and the
field; defaults, the demo fleet, the SKU table the simulator draws from, and per-node overrides."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from simfleet import one, run_node, small_fleet

from gpudiag.analysis.sku import floor_key, floors_for
from gpudiag.errors import InputError
from gpudiag.exitcodes import ExitCode
from gpudiag.sim import SimulatedConnector, SimulatedFleet, demo_fleet_path, load_fleet, load_skus, parse_fleet
from probes.gemm import GPU_SIZES

# ------------------------------------------------------------------------------ the fleet file


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("data", "expected"), [
    (small_fleet(colour="red"), "fleet.json: colour: unknown field; allowed: nodes, "),
    ({"gpus_per_node": 8}, "fleet.json: nodes: missing"),
    (small_fleet(nodes="4"), 'fleet.json: nodes: expected an integer, got a string "4"'),
    (small_fleet(nodes=True), "fleet.json: nodes: expected an integer, got a boolean"),
    (small_fleet(gpus_per_node=0), "fleet.json: gpus_per_node: 0 is out of range"),
    (small_fleet(seed=1.5), "fleet.json: seed: expected an integer"),
    (small_fleet(gpu_model="RTX 4090"), 'fleet.json: gpu_model: "RTX 4090" is not in the SKU table'),
    (small_fleet(name_format="node"), "fleet.json: name_format: \"node\" gives the same name to several nodes"),
    (small_fleet(name_format="node{:q}"), "fleet.json: name_format: \"node{:q}\" cannot format a node number"),
    (small_fleet(noise={"gemm_cv": 0.9}), "fleet.json: noise.gemm_cv: 0.9 is out of range 0..0.5"),
    (small_fleet(noise={"clock_cv": 0.1}), "fleet.json: noise.clock_cv: unknown field"),
    (small_fleet(faults={}), "fleet.json: faults: expected a list, got an object"),
    (small_fleet("slow_gpu"), "fleet.json: faults[0]: expected a JSON object, got a string"),
    (small_fleet({"kind": "melt", "host": "node001"}), 'fleet.json: faults[0].kind: "melt" is not a fault kind'),
    (small_fleet({"kind": "slow_gpu", "host": "node001", "gpu": 1}), "fleet.json: faults[0].factor: missing"),
    (small_fleet({"kind": "hang", "host": "node001", "gpu": 1}), "fleet.json: faults[0].gpu: unknown field"),
    (small_fleet({"kind": "hang", "host": "node009"}),
     'fleet.json: faults[0].host: "node009" is not a node of this fleet (node001..node004)'),
    (small_fleet({"kind": "slow_gpu", "host": "node001", "gpu": 9, "factor": 0.8}),
     "fleet.json: faults[0].gpu: 9 is out of range 0..7 for gpus_per_node 8"),
    (small_fleet({"kind": "slow_gpu", "host": "node001", "gpu": "3", "factor": 0.8}),
     'fleet.json: faults[0].gpu: expected an integer, got a string "3"'),
    (small_fleet({"kind": "slow_gpu", "host": "node001", "gpu": 1, "factor": 0}),
     "fleet.json: faults[0].factor: 0 is not in (0, 1]"),
    (small_fleet({"kind": "slow_node", "host": "node001", "factor": 1.5}),
     "fleet.json: faults[0].factor: 1.5 is not in (0, 1]"),
    (small_fleet({"kind": "throttled", "host": "node001", "gpu": 0, "reason": "cold"}),
     'fleet.json: faults[0].reason: "cold" is not a throttle reason; choose from hw_slowdown, hw_thermal, '
     "hw_power_brake, sw_thermal, sw_power_cap"),
    (small_fleet({"kind": "degraded_pcie", "host": "node001", "gpu": 0, "width": 16}),
     "fleet.json: faults[0].width: 16 is not a degraded PCIe width (lanes); choose from 1, 2, 4, 8"),
    (small_fleet({"kind": "nvlink_down", "host": "node001", "gpu": 0, "link": 18}),
     "fleet.json: faults[0].link: 18 is out of range 0..17"),
    (small_fleet({"kind": "slow_nic", "host": "node001", "factor": 0.5, "rail": 8}),
     "fleet.json: faults[0].rail: 8 is out of range 0..7"),
    (small_fleet({"kind": "slow_link", "a": "node001", "b": "node001", "factor": 0.5}),
     "fleet.json: faults[0].b: a link needs two different nodes"),
    (small_fleet({"kind": "hang", "host": "node002"}, {"kind": "unreachable", "host": "node003"},
            {"kind": "hang", "host": "node002"}), "fleet.json: faults[2]: duplicates faults[0]"),
    (small_fleet({"kind": "slow_link", "a": "node001", "b": "node002", "factor": 0.5},
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


# ------------------------------------------------------------------------------ per-size GEMM figures


def test_every_sku_has_a_gemm_figure_per_dtype_and_probe_size() -> None:
    for sku in load_skus().skus.values():
        assert set(sku.gemm_tflops) == {"bf16", "fp16", "tf32", "fp32"}, sku.gpu_model
        for dtype, by_size in sku.gemm_tflops.items():
            assert list(by_size) == list(GPU_SIZES), (sku.gpu_model, dtype)
            figures = [by_size[size] for size in GPU_SIZES]
            # Small GEMMs fill the GPU less; at its power limit the sizes come within noise of each
            # other (measured on an H100: 679 TFLOP/s at 6144, 681 at 4096), so 2 % is allowed.
            pairs = zip(figures, figures[1:], strict=False)
            assert all(smaller <= larger * 1.02 for larger, smaller in pairs), (sku.gpu_model, dtype)
            assert figures[-1] <= figures[0], (sku.gpu_model, dtype)


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
    assert floors[("gemm", "tflops", "bf16:8192")] == h100.gemm_tflops["bf16"][8192]
    assert floors[("gemm", "tflops", "fp16:2048")] == h100.gemm_tflops["fp16"][2048]
    assert floors[("pcie", "bandwidth", "h2d@256")] == h100.pcie_h2d_gbps and ("gemm", "tflops", "bf16") not in floors
    assert ("pcie", "bandwidth", "h2d@16") not in floors  # a smaller buffer copies slower: no figure for it
    assert floors[("smclock", "sm_fma_rate_min_ratio", "")] == 1.0
    assert floors_for("RTX 4090") == {}


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
    a100 = run_node(connector, "node004")
    facts = one(a100, "facts", "gpu_count", "host").details
    assert (facts["gpu_model"], facts["gpu_count"], facts["driver_version"]) == ("NVIDIA A100-SXM4-80GB", 4,
                                                                                 "535.183.01")
    assert (facts["pci_gpu_count"], facts["nvml_gpu_count"], facts["cpu_model"]) == (4, 4,
                                                                                     "AMD EPYC 7742 64-Core Processor")
    assert one(a100, "telemetry", "sm_clock_max", "gpu:3").value == 1410
    assert one(a100, "telemetry", "nvlink_links_up", "gpu:0").value == 12
    assert 250 < one(a100, "gemm", "tflops", "cuda:0").value < 310
    assert sum(1 for r in a100 if r.probe == "p2p") == 4 * 3 + 4 * 3 // 2
    h100 = run_node(connector, "node001")
    assert one(h100, "facts", "gpu_count", "host").value == 8 and 650 < one(h100, "gemm", "tflops", "cuda:7").value


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
    (_mixed(overrides=[{"hosts": "node001", "nvml_link_slots": 65}]),
     "fleet.json: overrides[0].nvml_link_slots: 65 is out of range; it must be in 0..64"),
    (_mixed({"kind": "nvlink_errors", "host": "node004", "gpu": 0, "link": 12, "counter": "crc", "count": 9}),
     "fleet.json: faults[0].link: 12 is out of range 0..11 for the 12 NVLinks of NVIDIA A100-SXM4-80GB"),
])
def test_a_bad_override_or_a_fault_beyond_its_node_is_an_input_error(tmp_path: Path, data: Any,
                                                                      expected: str) -> None:
    with pytest.raises(InputError) as raised:
        load_fleet(_write(tmp_path, data))
    assert expected in str(raised.value), str(raised.value)


@pytest.mark.parametrize(("fault", "expected"), [
    ({"kind": "gpu_lost", "host": "node001"}, "faults[0].gpu: missing"),
    ({"kind": "gpu_missing", "host": "node001", "gpu": 8}, "faults[0].gpu: 8 is out of range 0..7"),
    ({"kind": "probe_error", "host": "node001", "probe": "nccl"},
     'faults[0].probe: "nccl" is not a probe; choose from facts, telemetry, xid, gemm'),
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
    ({"kind": "pcie_replays", "host": "node001", "gpu": 0}, "faults[0].count: missing"),
    ({"kind": "pcie_replays", "host": "node001", "gpu": 0, "count": 0},
     "faults[0].count: 0 is out of range; it must be at least 1"),
    ({"kind": "nvlink_errors", "host": "node001", "gpu": 0, "link": 3, "counter": "flit", "count": 5},
     'faults[0].counter: "flit" is not an NVLink error counter; choose from crc, replay, recovery'),
    ({"kind": "nvlink_errors", "host": "node001", "gpu": 0, "link": 18, "counter": "crc", "count": 5},
     "faults[0].link: 18 is out of range 0..17"),
    ({"kind": "nvlink_errors", "host": "node001", "gpu": 0, "counter": "crc", "count": 5}, "faults[0].link: missing"),
])
def test_a_bad_new_fault_is_an_input_error(tmp_path: Path, fault: dict[str, Any], expected: str) -> None:
    with pytest.raises(InputError, match=re.escape(expected)):
        load_fleet(_write(tmp_path, small_fleet(fault)))


def test_a_gpu_is_lost_or_missing_and_a_node_keeps_one(tmp_path: Path) -> None:
    both = small_fleet({"kind": "gpu_lost", "host": "node001", "gpu": 1},
                  {"kind": "gpu_missing", "host": "node001", "gpu": 1})
    with pytest.raises(InputError, match=re.escape("faults[1]: duplicates faults[0]")):
        load_fleet(_write(tmp_path, both))
    all_gone = small_fleet(*({"kind": "gpu_lost", "host": "node001", "gpu": gpu} for gpu in range(2)), gpus_per_node=2)
    with pytest.raises(InputError, match=re.escape("faults[1]: leaves node001 no GPU that torch can use")):
        load_fleet(_write(tmp_path, all_gone))
