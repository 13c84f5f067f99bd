"""GPUs named as an operator acts on them, and GPU counts compared within a platform, through the
real pipeline (``gpudiag sweep --simulate``: plan, re-test, analysis, report) on simulated fleets.

After a GPU is lost CUDA renumbers the rest (NVML's GPU 5 is ``cuda:4``): every finding names the
GPU by NVML's index, with its UUID and bus id, and its action's commands take that index. A
healthy 4-GPU board among 8-GPU boards of the same GPU model is no missing GPU; a GPU gone from an
8-GPU board still is."""

import json
import tempfile
from pathlib import Path

from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.sim import SimulatedFleet
from gpudiag.sim.fleetfile import parse_fleet

FAST = ("--probes", "facts,gemm,telemetry,p2p", "--duration", "0.2")


def _fleet(tmp_path: Path, faults=(), nodes: int = 16, **fields) -> str:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": nodes, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                "faults": list(faults), **fields}))
    return str(path)


def _sweep(fleet: str, *args: str) -> tuple[int, dict, str]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "--json", str(out), "--no-store",
                                           "--links", "none", *args], catch_exceptions=False)
        document = json.loads(out.read_text())
    return result.exit_code, document, result.output


def _gpu(fleet: str, host: str, slot: int):
    """The simulated GPU in baseboard slot ``slot`` of ``host`` (its true identity, for the test to
    check against; the analysis never sees it)."""
    state = SimulatedFleet(parse_fleet(json.loads(Path(fleet).read_text()), fleet)).node_state(host)
    return next(gpu for gpu in state.gpus if gpu.index == slot)


def test_a_slow_gpu_after_a_lost_one_is_named_by_its_nvml_index_uuid_and_bus_id(tmp_path: Path):
    fleet = _fleet(tmp_path, [{"kind": "gpu_lost", "host": "node003", "gpu": 3},
                              {"kind": "slow_gpu", "host": "node003", "gpu": 5, "factor": 0.8}])
    code, document, output = _sweep(fleet, *FAST)
    assert code == 1
    slow = [f for f in document["findings"] if f["kind"] == "slow_gpu"]
    assert [(f["host"], f["gpu"]) for f in slow] == [("node003", 5)]  # CUDA calls it cuda:4
    gpu5 = _gpu(fleet, "node003", 5)
    assert (gpu5.cuda_index, gpu5.nvml_index) == (4, 5)
    assert (slow[0]["gpu_uuid"], slow[0]["pci_bus_id"]) == (gpu5.gpu_uuid, gpu5.pci_bus_id)
    assert "-i 5" in slow[0]["action_detail"] and "-i 4" not in slow[0]["action_detail"]
    assert "cuda:4" in slow[0]["evidence"]  # CUDA's number only as a detail
    lost = [f for f in document["findings"] if f["kind"] == "missing_gpu"]
    assert [(f["host"], f["gpu"]) for f in lost] == [("node003", 3)] and "GPU 3" in lost[0]["action_detail"]
    assert document["impact"]["slowest"]["gpu"] == 5
    assert "node003:5 (GPU-" in output and "node003:4" not in output


def test_a_throttled_gpu_and_a_down_nvlink_after_a_lost_gpu_keep_their_nvml_index(tmp_path: Path):
    fleet = _fleet(tmp_path, [{"kind": "gpu_lost", "host": "node007", "gpu": 0},
                              {"kind": "throttled", "host": "node007", "gpu": 6, "reason": "hw_thermal",
                               "factor": 0.8},
                              {"kind": "nvlink_down", "host": "node007", "gpu": 2, "link": 4}])
    code, document, _ = _sweep(fleet, *FAST)
    assert code == 1
    found = {(f["kind"], f["gpu"]): f for f in document["findings"] if f["host"] == "node007"}
    assert set(found) == {("missing_gpu", 0), ("throttled", 6), ("nvlink_down", 2)}
    assert found[("throttled", 6)]["pci_bus_id"] == _gpu(fleet, "node007", 6).pci_bus_id
    assert "-i 2" in found[("nvlink_down", 2)]["action_detail"]


def test_healthy_4_gpu_boards_among_8_gpu_boards_are_no_missing_gpu_and_a_gone_gpu_still_is(tmp_path: Path):
    fleet = _fleet(tmp_path, [{"kind": "gpu_missing", "host": "node002", "gpu": 7},
                              {"kind": "gpu_missing", "host": "node014", "gpu": 1}],
                   overrides=[{"hosts": "node[011-016]", "gpus_per_node": 4}])
    code, document, _ = _sweep(fleet, "--probes", "facts,gemm,telemetry", "--duration", "0.2")
    assert code == 1
    missing = sorted((f["host"], f["severity"], f["action"]) for f in document["findings"]
                     if f["kind"] == "missing_gpu")
    # node002: an 8-GPU board with 7 (PCI 7, NVML 7: only its platform's peers say 8); node014 a 4-GPU board with 3.
    assert missing == [("node002", "fail", "reboot"), ("node014", "fail", "reboot")]
    assert not [f for f in document["findings"] if f["host"] in ("node011", "node012", "node013", "node015", "node016")]


def test_without_a_platform_a_board_its_own_bus_and_nvml_agree_with_is_unchecked_not_rebooted(tmp_path: Path):
    fleet = _fleet(tmp_path, overrides=[{"hosts": "node[011-016]", "gpus_per_node": 4},
                                        {"hosts": "node[001-016]", "platform": None}])
    code, document, _ = _sweep(fleet, "--probes", "facts,gemm,telemetry", "--duration", "0.2")
    small = sorted((f["kind"], f["host"]) for f in document["findings"] if f["host"] >= "node011")
    assert small == [("unchecked", f"node{n:03d}") for n in range(11, 17)]
    assert code == 3 and not [f for f in document["findings"] if f["kind"] == "missing_gpu"]


def test_a_platform_override_is_checked_and_one_line_on_error(tmp_path: Path):
    fleet = _fleet(tmp_path, overrides=[{"hosts": "node001", "platform": "\u0007bell"}])
    result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "--no-store"])
    assert result.exit_code == 2
    assert "overrides[0].platform" in result.output and len(result.output.strip().splitlines()) == 1


def test_the_stored_history_follows_a_gpu_by_its_nvml_index_after_a_lost_one(tmp_path: Path):
    # node003's GPU 2 is lost and GPU 5 slow: CUDA numbers GPU 5 cuda:4. The stored figures, the
    # host's history and the baseline's exclusions name it GPU 5, as the finding does.
    fleet = _fleet(tmp_path, [{"kind": "gpu_lost", "host": "node003", "gpu": 2},
                              {"kind": "slow_gpu", "host": "node003", "gpu": 5, "factor": 0.8}])
    store = tmp_path / "gpudiag.db"
    runner = CliRunner()
    result = runner.invoke(main, ["sweep", "--simulate", fleet, "--store", str(store), "--links", "none", "-q", *FAST],
                           catch_exceptions=False)
    assert result.exit_code == 1, result.output
    history = runner.invoke(main, ["history", "node003", "--store", str(store), "--json", "-"], catch_exceptions=False)
    document = json.loads(history.output)
    [gemm] = [f for f in document["sweeps"][0]["figures"] if f["metric"] == "gemm.tflops"]
    per_gpu = dict(gemm["per_gpu"])
    assert sorted(per_gpu) == [0, 1, 3, 4, 5, 6, 7]  # NVML's indices: 2 is the lost one
    assert per_gpu[5] == min(per_gpu.values())  # the slow one is NVML's GPU 5, not CUDA's 5 (GPU 6)


def _stored_sweep(fleet: str, store: Path) -> tuple[int, dict, str]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "--json", str(out), "--store", str(store),
                                           "--links", "none", "-q", *FAST], catch_exceptions=False)
        return result.exit_code, json.loads(out.read_text()), result.output


def test_a_gpu_gone_from_the_bus_since_the_nodes_previous_sweep_is_missing_in_a_1_node_job(tmp_path: Path):
    # One node, no peers: its PCI bus, NVML and torch all count 7, and nothing else said 8. The
    # job passed on a node one GPU short. Its own previous sweep on the same board counted 8.
    store = tmp_path / "gpudiag.db"
    code, _, output = _stored_sweep(_fleet(tmp_path, nodes=1), store)
    assert code == 0, output
    code, document, output = _stored_sweep(_fleet(tmp_path, [{"kind": "gpu_missing", "host": "node001", "gpu": 3}],
                                                   nodes=1), store)
    [missing] = [f for f in document["findings"] if f["kind"] == "missing_gpu"]
    assert code == 1 and missing["host"] == "node001" and missing["severity"] == "fail", output
    assert "expected 8" in missing["evidence"] and "its previous sweep on this board counted 8" in missing["evidence"]


def test_a_node_whose_board_changed_since_its_previous_sweep_is_not_missing_gpus(tmp_path: Path):
    # The 8-GPU board was replaced by a 4-GPU one (another DMI product): nothing is gone.
    store = tmp_path / "gpudiag.db"
    assert _stored_sweep(_fleet(tmp_path, nodes=1), store)[0] == 0
    code, document, output = _stored_sweep(_fleet(tmp_path, nodes=1, gpus_per_node=4), store)
    assert code == 0 and not [f for f in document["findings"] if f["kind"] == "missing_gpu"], output


def test_without_a_platform_a_gpu_gone_since_the_previous_sweep_is_missing_not_unchecked(tmp_path: Path):
    # No DMI product name: peers alone expecting 8 could mean a smaller board (unchecked); the
    # node's own previous sweep counting 8 on the same (unknown) board says a GPU is gone.
    store = tmp_path / "gpudiag.db"
    unknown = [{"hosts": "node[001-008]", "platform": None}]
    assert _stored_sweep(_fleet(tmp_path, nodes=8, overrides=unknown), store)[0] == 0
    fleet = _fleet(tmp_path, [{"kind": "gpu_missing", "host": "node004", "gpu": 6}], nodes=8, overrides=unknown)
    code, document, output = _stored_sweep(fleet, store)
    assert [(f["kind"], f["host"]) for f in document["findings"]] == [("missing_gpu", "node004")] and code == 1, output
