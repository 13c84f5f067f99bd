"""``gpudiag preflight`` takes the sweep's --probes, --links, --deadline and --net-line-rate with
the same names and meaning, within its budget (a simulated fleet)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main


def _fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 4, "name_format": "n{}"}))
    return path


def _preflight(tmp_path: Path, *args: str) -> tuple[Result, dict]:
    document = tmp_path / "doc.json"
    result = CliRunner().invoke(main, ["preflight", "--no-store", "-q", "--simulate", str(_fleet(tmp_path)),
                                       "--json", str(document), *args],
                                env={"SLURM_JOB_NODELIST": "", "SLURM_NODELIST": ""})
    return result, json.loads(document.read_text()) if document.exists() else {}


def test_probes_names_the_node_probes_the_budget_plans(tmp_path: Path):
    result, document = _preflight(tmp_path, "--probes", "facts,gemm", "--links", "none")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].startswith("  node probes: facts, gemm, 2.0 s of load per probe and GPU")
    assert document["preflight"]["plan"]["probes"] == ["facts", "gemm"]
    measured = {record["probe"] for host in document["hosts"] for record in host["results"]}
    assert measured == {"gemm"}  # no membw: not asked for (facts are the host's facts, not results)


def test_links_full_tests_every_pair_and_none_none(tmp_path: Path):
    result, document = _preflight(tmp_path, "--links", "full")
    assert result.exit_code == 0, result.output
    assert any(line.startswith("  link tests of every pair: 4 rounds") for line in result.output.splitlines())
    pairs = {(link["a"], link["b"]) for link in document["links"]}
    assert len(pairs) == 6  # every pair of 4 nodes
    result, document = _preflight(tmp_path, "--links", "none")
    assert result.exit_code == 0 and document["links"] == [] and not document["preflight"]["plan"]["links"]


def test_a_given_deadline_caps_the_planned_one_on_the_nodes(tmp_path: Path):
    result, document = _preflight(tmp_path, "--links", "none")
    assert result.exit_code == 0 and document["preflight"]["plan"]["deadline_s"] > 10, result.output
    # 5 s: gemm's 2 s of load fits, membw's does not start before it passes; unchecked, never passed
    result, document = _preflight(tmp_path, "--deadline", "5", "--links", "none")
    assert result.exit_code == 3, result.output
    assert document["preflight"]["plan"]["deadline_s"] == 5.0
    statuses = {(record["probe"], record["status"]) for host in document["hosts"] for record in host["results"]}
    assert ("gemm", "ok") in statuses and ("membw", "skipped") in statuses


def test_net_line_rate_judges_the_links_against_it(tmp_path: Path):
    result, document = _preflight(tmp_path, "--net-line-rate", "800")
    assert result.exit_code in (0, 1, 3), result.output
    assert {link["line_rate_gbps"] for link in document["links"]} == {800.0}


@pytest.mark.parametrize(("args", "message"), [
    (["--deadline", "1"], "--deadline 1 is not longer than the planned 2 s of load per probe"),
    (["--links", "full", "--no-links"], "--no-links and --links full disagree"),
    (["--probes", "gemm,nvlinks"], "unknown probe 'nvlinks'"),
    (["--probes", ","], "--probes names no probe"),
])
def test_bad_sweep_options_are_refused_before_any_node_is_touched(tmp_path: Path, args, message):
    result, document = _preflight(tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert f"gpudiag: error: {message}" in result.output and not document
