"""A node judged as one (gpudiag.analysis.nodes), through the real pipeline on simulated fleets at
GEMM noise CV 3 %: a node 8 % slow on every GPU is one ``slow_node`` (not a few of its GPUs named
one by one, or none), confirmed and a fail; a healthy noisy fleet gets no node finding; a node
whose GPUs' telemetry explains the loss (a throttle) keeps that cause."""

import json
import tempfile
from pathlib import Path

from click.testing import CliRunner

from gpudiag.analysis.measurements import HOST_DEVICES, NODE_MEDIAN, KeyInfo, Measurement
from gpudiag.analysis.nodes import is_median_key, median_key, node_medians
from gpudiag.analysis.thresholds import default_thresholds
from gpudiag.cli.main import main

FAST = ("--probes", "gemm,telemetry", "--duration", "0.2", "--links", "none")
NODES = 32


def _sweep(tmp_path: Path, seed: int, faults: list[dict]) -> tuple[int, dict]:
    fleet = tmp_path / f"fleet{seed}.json"
    fleet.write_text(json.dumps({"nodes": NODES, "seed": seed, "noise": {"gemm_cv": 0.03, "membw_cv": 0.03},
                                 "faults": faults}))
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "-q", "--json", str(out), "--no-store",
                                           *FAST], catch_exceptions=False)
        return result.exit_code, json.loads(out.read_text())


def _every_gpu(host: str, factor: float, **fields) -> list[dict]:
    return [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": factor, **fields} for gpu in range(8)]


def test_a_node_eight_percent_slow_on_every_gpu_at_cv_3_percent_is_one_slow_node(tmp_path: Path):
    for seed in range(1, 4):
        code, document = _sweep(tmp_path, seed, _every_gpu("node013", 0.92))
        named = [(f["kind"], f["host"], f["gpu"], f["severity"]) for f in document["findings"]]
        assert named == [("slow_node", "node013", None, "fail")], (seed, named)
        (finding,) = document["findings"]
        assert "the median of its GPUs, against the fleet's node medians" in finding["evidence"]
        assert finding["confirmed"] and code == 1 and document["impact"]["exclude"] == ["node013"]


def test_a_healthy_fleet_at_cv_3_percent_has_no_node_finding(tmp_path: Path):
    for seed in range(1, 4):
        code, document = _sweep(tmp_path, seed, [])
        assert [f for f in document["findings"] if f["kind"] == "slow_node"] == [], seed
        assert code in (0, 1)  # a lone GPU's dip at CV 3 % is judged elsewhere; no node is blamed


def test_a_node_throttled_on_every_gpu_keeps_its_cause(tmp_path: Path):
    faults = [{"kind": "throttled", "host": "node007", "gpu": gpu, "reason": "hw_thermal",
               "factor": 0.85} for gpu in range(8)]
    _, document = _sweep(tmp_path, 1, faults)
    kinds = {(f["kind"], f["host"]) for f in document["findings"] if f["host"] == "node007"}
    assert ("throttled", "node007") in kinds and ("slow_node", "node007") not in kinds, kinds


def _m(host: str, device: str, value: float, probe: str = "gemm", key: str = '{"k":1}') -> Measurement:
    return Measurement(host, device, None, KeyInfo(key, probe, "tflops", {}, "TFLOP/s", "H100"), value, 0.002)


def test_node_medians_are_one_per_host_and_key_of_enough_gpus_under_a_key_no_record_has():
    thresholds = default_thresholds()
    found = [_m("a", f"cuda:{i}", 700.0 + i) for i in range(8)]
    found += [_m("b", f"cuda:{i}", 690.0) for i in range(thresholds.sibling_min_gpus - 1)]  # too few GPUs
    found += [_m("a", "host", 10.0), _m("a", "cuda:0", 5.0, probe="p2p")]  # host-side, no siblings
    (median,) = node_medians(found, thresholds)
    assert (median.host, median.device, median.value) == ("a", NODE_MEDIAN, 703.5)
    assert median.device in HOST_DEVICES and median.gpu is None and median.probe == "gemm"
    assert median.key == median_key('{"k":1}') != '{"k":1}' and is_median_key(median.key)
    assert json.loads(median.key)["k"] == 1 and not is_median_key('{"k":1}')
