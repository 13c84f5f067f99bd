"""A baseline stored from one node's sweep judges with the spread its few values can know, through
the real pipeline (``gpudiag sweep --simulate``, ``gpudiag baseline build``, then a sweep against it).

Eight GPUs give a MAD that came out anywhere from 0.6 to 3 % at 2 % noise. Judged at the normal
bar with the tight one, a healthy GPU 3.6 % under the baseline was a ``slow_gpu`` warning; with
its Student bar (two degrees of freedom) the baseline confirms nothing a node's spread explains,
and the GPU's siblings judge beside it, so a GPU 10-20 % slow is still named."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.analysis.reference import FEW_SPREAD_DOF, KeyReferences, key_references
from gpudiag.analysis.siblings import siblings_alone
from gpudiag.analysis.tails import spread_dof
from gpudiag.analysis.thresholds import default_thresholds
from gpudiag.cli.main import main
from gpudiag.store.baselines import BaselineEntry

FAST = ("--probes", "facts,gemm,telemetry", "--links", "none", "-q")


def _fleet(path: Path, seed: int, cv: float, faults: list[dict]) -> str:
    path.write_text(json.dumps({"nodes": 1, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": seed,
                                "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": faults}))
    return str(path)


def _judged(tmp_path: Path, seed: int, cv: float, faults: list[dict]) -> tuple[int, list[dict]]:
    """A 1-node job swept healthy into a store, a baseline built from that one sweep, then the
    node swept with ``faults`` against it: the exit code and the findings."""
    store = str(tmp_path / "gpudiag.db")
    runner = CliRunner()
    healthy = runner.invoke(main, ["sweep", "--simulate", _fleet(tmp_path / "healthy.json", seed + 1000, cv, []),
                                   "--store", store, *FAST], catch_exceptions=False)
    assert healthy.exit_code == 0, healthy.output
    built = runner.invoke(main, ["baseline", "build", "--last", "1", "--name", "node", "--store", store])
    assert built.exit_code == 0, built.output
    out = tmp_path / "sweep.json"
    result = runner.invoke(main, ["sweep", "--simulate", _fleet(tmp_path / "now.json", seed, cv, faults),
                                  "--store", store, "--baseline", "node", "--json", str(out), *FAST],
                           catch_exceptions=False)
    return result.exit_code, json.loads(out.read_text())["findings"]


# Seed 1's healthy sweep leaves a baseline MAD of 0.64 % at 2 % noise; the others 1.6-3 %.
@pytest.mark.parametrize("seed", [1, 7, 9, 11])
def test_a_gpu_gone_and_a_slow_one_are_named_against_a_baseline_of_one_node_and_no_healthy_gpu_is(
        tmp_path: Path, seed: int):
    faults = [{"kind": "gpu_missing", "host": "node0001", "gpu": 1},
              {"kind": "slow_gpu", "host": "node0001", "gpu": 3, "factor": 0.8}]
    code, findings = _judged(tmp_path, seed, 0.02, faults)
    assert code == 1
    # NVML numbers the seven GPUs left: the slow one is its GPU 2 now
    assert {(f["kind"], f["gpu"]) for f in findings} == {("missing_gpu", None), ("slow_gpu", 2)}, [
        (f["kind"], f["gpu"], f["severity"], f["evidence"]) for f in findings]


@pytest.mark.parametrize("seed", [1, 7])
def test_a_healthy_node_judged_against_a_baseline_of_its_own_one_sweep_passes(tmp_path: Path, seed: int):
    code, findings = _judged(tmp_path, seed, 0.02, [])
    assert (code, findings) == (0, [])


def test_a_gpu_ten_pct_slow_is_named_by_its_siblings_beside_a_baseline_of_one_node(tmp_path: Path):
    code, findings = _judged(tmp_path, 1, 0.01, [{"kind": "slow_gpu", "host": "node0001", "gpu": 5,
                                                  "factor": 0.9}])
    assert code == 1 and [(f["kind"], f["gpu"], f["severity"]) for f in findings] == [("slow_gpu", 5, "fail")]


def test_a_baselines_spread_is_as_sure_as_its_values_are_many():
    thresholds = default_thresholds()

    def baseline(count: int):
        entry = BaselineEntry(key="k", median=700.0, mad=3.0, count=count, unit="TFLOP/s")
        [ref] = key_references([], 0, entry, None, thresholds).references
        return ref

    one_node, fleet = baseline(8), baseline(1024)
    assert (one_node.spread_dof, spread_dof(8)) == (2, 2) and fleet.spread_dof == spread_dof(1024) > 300
    # a value 5 spreads low: far below a fleet's baseline, within what eight values' spread can be off by
    low = 700.0 - 5 * one_node.spread
    assert fleet.flags(low, thresholds) and not one_node.flags(low, thresholds)
    assert one_node.bar(thresholds.robust_z) < -15 and fleet.bar(thresholds.robust_z) == pytest.approx(
        thresholds.robust_z, rel=0.01)
    # the siblings judge beside a baseline of a node or two, not beside one of a fleet
    assert not one_node.rests_on_many() and spread_dof(28) >= FEW_SPREAD_DOF and fleet.rests_on_many()
    assert siblings_alone(KeyReferences((one_node,))) and not siblings_alone(KeyReferences((fleet,)))
