"""The simulated fleet through the CLI: sweep, demo, report, history, baseline; input errors."""

import json
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.sim import demo_fleet_path

EXPECTED = {("throttled", "node012", 0), ("slow_gpu", "node017", 3), ("degraded_pcie", "node021", 5),
            ("nvlink_down", "node033", 2), ("slow_node", "node040", None), ("slow_nic", "node030", None),
            ("slow_link", "node004", None), ("unchecked", "node050", None), ("unchecked", "node051", None),
            ("slow_fabric_link", None, None)}


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def demo_sweep(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("demo")
    store, document, exclude = folder / "gpudiag.db", folder / "sweep.json", folder / "exclude.txt"
    result = _run("sweep", "--simulate", str(demo_fleet_path()), "--store", str(store), "--json", str(document),
                  "--exclude-file", str(exclude), "--links", "full", "-q")
    return {"result": result, "store": store, "document": json.loads(document.read_text()), "exclude": exclude,
            "folder": folder}


def test_the_simulated_sweep_names_every_fault_and_nothing_else(demo_sweep):
    assert demo_sweep["result"].exit_code == 1  # fail findings
    findings = demo_sweep["document"]["findings"]
    assert {(f["kind"], f["host"], f["gpu"]) for f in findings} == EXPECTED
    fails = [f for f in findings if f["severity"] == "fail"]
    assert len(fails) == 8 and all(f["confirmed"] for f in fails)
    uplink = next(f for f in findings if f["kind"] == "slow_fabric_link")
    assert uplink["fabric_link"] == {"rail": 3, "switches": ["r3-leaf05", "r3-spine02"], "ports": ["10", "5"]}
    link = next(f for f in findings if f["kind"] == "slow_link")
    assert link["peer"] == "node009" and link["unit"] == "Gbit/s" and "on 8 rails" in link["evidence"]
    assert [f["severity"] for f in findings] == sorted(f["severity"] for f in findings)  # fail before warn
    throttled = next(f for f in findings if f["kind"] == "throttled")
    assert "HW thermal slowdown active" in throttled["evidence"] and "SM clock" in throttled["evidence"]


def test_job_impact_and_the_exclude_file(demo_sweep):
    impact = demo_sweep["document"]["impact"]
    assert impact["slowest"]["host"] == "node012" and 25 < impact["gpu_slowdown_pct"] < 35
    # the job waits for the slower of its GPUs and its network (the demo's slow link is at half its rate)
    assert impact["slowdown_pct"] == max(impact["gpu_slowdown_pct"], impact["network_slowdown_pct"])
    # both ends of the slow link (node009 and its partner): the job must not get the pair, and neither is blamed
    link = next(f for f in demo_sweep["document"]["findings"] if f["kind"] == "slow_link")
    assert {link["host"], link["peer"]} == {"node004", "node009"}
    expected = ["node004", "node009", "node012", "node017", "node021", "node030", "node033", "node040", "node050",
                "node051"]
    assert impact["exclude"] == expected
    assert demo_sweep["exclude"].read_text().split() == expected
    # excluding hosts recovers the GPUs' and the slow pairs' part, never the slow uplink's
    [uplink] = impact["fabric"]
    assert uplink["hosts_behind"] == [f"node{i:03d}" for i in range(33, 41)] and 35 < uplink["loss_pct"] < 45
    assert impact["recovered_pct"] == pytest.approx(impact["slowdown_pct"] - uplink["loss_pct"], abs=0.02)


def test_reports_from_the_store_and_from_the_document(demo_sweep, tmp_path: Path):
    store = str(demo_sweep["store"])
    text = _run("report", "--store", store)
    assert text.exit_code == 0 and "10 findings (8 fail, 2 unchecked)" in text.output
    from_file = _run("report", str(demo_sweep["folder"] / "sweep.json"), "--format", "md")
    assert from_file.exit_code == 0 and "| fail" in from_file.output
    html = tmp_path / "r.html"
    assert _run("report", "--store", store, "--format", "html", "-o", str(html)).exit_code == 0
    assert "node017" in html.read_text() and "http://" not in html.read_text()
    stored = json.loads(_run("report", demo_sweep["document"]["sweep_id"], "--store", store,
                             "--format", "json").output)
    assert stored["findings"] == demo_sweep["document"]["findings"]
    unknown = _run("report", "20000101T000000Z-0000", "--store", store)
    assert unknown.exit_code == 2 and "20000101T000000Z-0000" in unknown.output


def test_history_and_baselines_round_trip(demo_sweep, tmp_path: Path):
    store = str(demo_sweep["store"])
    history = _run("history", "node017", "--store", store)
    assert history.exit_code == 0 and "gemm.tflops" in history.output
    assert _run("baseline", "build", "--last", "1", "--name", "fleet", "--store", store).exit_code == 0
    shown = _run("baseline", "show", "fleet", "--store", store)
    assert shown.exit_code == 0 and "gemm.tflops" in shown.output
    exported = tmp_path / "fleet.json"
    assert _run("baseline", "export", "fleet", str(exported), "--store", store).exit_code == 0
    data = json.loads(exported.read_text())
    assert data["schema"] == "gpudiag.baseline/1" and data["entries"]
    other = str(tmp_path / "other.db")
    assert _run("baseline", "import", str(exported), "--store", other).exit_code == 0
    refused = _run("baseline", "import", str(exported), "--store", other)
    assert refused.exit_code == 2 and "--replace" in refused.output
    # results that were findings are not part of the baseline: the four GPUs with a finding of
    # their own, and every GPU of node040 (slow_node)
    gemm = next(e for e in data["entries"] if e["key"]["probe"] == "gemm")
    assert gemm["count"] == 62 * 8 - 4 - 8


@pytest.mark.parametrize(("content", "message"), [
    ('{"schema": "gpudiag.thresholds/1", "robust_zz": {"value": -4, "unit": "sigma"}}', "robust_zz: unknown"),
    ('{"schema": "gpudiag.thresholds/1", "deficit_warn": {"value": 3, "unit": "fraction"}}', "unit must be"),
    ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 2.5, "unit": "count"}}', "whole number"),
    ('{"schema": "gpudiag.thresholds/1",\n "min_peers": }', "thresholds.json:2:"),
])
def test_bad_thresholds_exit_2_before_anything_runs(tmp_path: Path, content: str, message: str):
    path = tmp_path / "thresholds.json"
    path.write_text(content)
    result = _run("sweep", "--simulate", str(demo_fleet_path()), "--thresholds", str(path), "--no-store", "-q")
    assert result.exit_code == 2 and message in result.output


def test_a_bad_fleet_file_names_the_field(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 4, "faults": [{"kind": "slow_gpu", "host": "node001", "gpu": 9,
                                                         "factor": 0.8}]}))
    result = _run("sweep", "--simulate", str(fleet), "--no-store", "-q")
    assert result.exit_code == 2 and "faults[0].gpu" in result.output


def test_a_corrupt_store_is_refused_and_left_as_it_was(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    store.write_bytes(b"this is not a database" * 100)
    before = store.read_bytes()
    result = _run("sweep", "--simulate", str(demo_fleet_path()), "--store", str(store), "-q")
    assert result.exit_code == 2 and str(store) in result.output
    assert store.read_bytes() == before


def test_the_demo_without_output_names_its_kept_folder_and_finds_what_the_same_sweep_found_byte_for_byte(
        demo_sweep, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes the demo's folder
    result = _run("demo", "-q")
    assert result.exit_code == 0, result.output
    [folder] = list(tmp_path.glob("gpudiag-demo-*"))
    # the demo sweeps the demo fleet as `gpudiag sweep --simulate ... --links full` did: the same findings
    again = json.loads((folder / "sweep.json").read_text())
    assert json.dumps(again["findings"]) == json.dumps(demo_sweep["document"]["findings"])
    assert again["sweep_id"] != demo_sweep["document"]["sweep_id"]
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("verdict (a real sweep with these findings would exit so): FAIL")
    assert f"all kept in {folder} (" in last and f"MiB; remove them with rm -r {folder}, or give --output DIR)" in last
    assert (folder / "report.html").is_file() and (folder / "gpudiag.db").is_file()
    # README describes the demo's unreachable node and its hung one as the demo reports them
    hosts = [line.split() for line in result.output.splitlines() if line.startswith("  unreachable ")
             or line.startswith("  timeout ")]
    assert sorted((words[0], words[1]) for words in hosts) == [("timeout", "1"), ("unreachable", "1")]
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert "an unreachable node and one whose probes hang until they time out" in readme


def test_a_demo_output_that_cannot_be_made_is_bad_input(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(main, ["demo", "-q", "--output", str(blocker / "demo")])
    assert result.exit_code == 2
    assert result.output.startswith(f"gpudiag: error: --output {blocker / 'demo'}: cannot create the folder")
