"""A node slow as a whole is judged by its worst metric, through ``gpudiag sweep --simulate``: a
node whose PCIe bandwidth is 12 % low on every GPU, and its GEMM only 3-5 %, is a `slow_node` fail
headed by PCIe. It was a warning (exit 0) by its GEMM, the first of its metrics by name."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main


@pytest.mark.parametrize(("seed", "cv", "host"), [(2, 0.015, "node0003"), (6, 0.02, "node0002")])
def test_a_node_low_on_pcie_everywhere_is_a_slow_node_fail_headed_by_its_worst_metric(tmp_path: Path, seed: int,
                                                                                    cv: float, host: str):
    fleet, out = tmp_path / "fleet.json", tmp_path / "out.json"
    fleet.write_text(json.dumps({"nodes": 8, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": seed,
                                 "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv},
                                 "faults": [{"kind": "slow_node", "host": host, "factor": 0.88}]}))
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--no-store", "--links", "none", "--probes",
                                       "facts,telemetry,gemm,membw,pcie", "--json", str(out), "-q"],
                                catch_exceptions=False)
    [finding] = json.loads(out.read_text())["findings"]
    assert (finding["kind"], finding["host"], finding["severity"], finding["metric"]) == (
        "slow_node", host, "fail", "pcie.bandwidth")
    assert finding["deficit_pct"] > 10 and finding["evidence"].startswith("pcie.bandwidth low on 8 of 8 GPUs")
    assert "gemm.tflops low" in finding["evidence"]  # its other metric still said
    assert result.exit_code == 1
