"""``gpudiag sweep|preflight|triage --topology`` on simulated fleets with a fabric (gpudiag/sim/fabric.py):
the sweep document's fabric findings (no host, fabric_link, inspect), what is drained and kept
out (nothing, for the fabric), the site's default topology, a topology file that leaves a node
out, and a topology file that cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.fabric.render import topology_document
from gpudiag.sim.fleetfile import load_fleet

NO_JOB = {"SLURM_JOB_NODELIST": None, "SLURM_NODELIST": None, "GPUDIAG_TOPOLOGY": None}
FABRIC = {"leaves": 8, "spines": 4, "rails": 2}


def _fleet(tmp_path: Path, *faults: dict, nodes: int = 64, fabric: dict | None = None) -> Path:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": nodes, "seed": 2, "noise": {"link_cv": 0.02},
                                "fabric": fabric or FABRIC, "faults": list(faults)}))
    return path


def _sweep(tmp_path: Path, fleet: Path, *args: str, env: dict | None = None) -> tuple[int, dict, str]:
    document = tmp_path / "sweep.json"
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--no-store", "-q", "--probes", "facts",
                                       "--json", str(document), *args], env={**NO_JOB, **(env or {})},
                                catch_exceptions=False)
    return result.exit_code, json.loads(document.read_text()) if document.exists() else {}, result.output


SLOW_UPLINK = {"kind": "slow_uplink", "a": "r1-leaf05", "b": "r1-spine02", "factor": 0.7}


def test_a_slow_uplink_is_one_fabric_finding_of_no_host_that_keeps_no_node_out(tmp_path):
    code, document, output = _sweep(tmp_path, _fleet(tmp_path, SLOW_UPLINK))
    assert code == 1, output
    [finding] = [f for f in document["findings"] if f["kind"] in ("slow_fabric_link", "slow_switch")]
    assert finding["host"] is None and finding["peer"] is None and finding["severity"] == "fail"
    assert finding["fabric_link"] == {"rail": 1, "switches": ["r1-leaf05", "r1-spine02"], "ports": ["10", "5"]}
    assert finding["action"] == "inspect" and finding["confirmed"] and finding["basis"] == "retest"
    assert [f for f in document["findings"] if f["kind"] != "slow_fabric_link"] == []
    assert document["impact"]["exclude"] == [] and document["impact"]["fabric_slowdown_pct"] > 25
    # each pair test's streams are in the document, their traced paths named by the topology's switches
    streams = [s for link in document["links"] for s in link.get("streams") or []]
    assert streams and all(s["hops"][0].startswith(f"r{link_rail}-leaf") for link in document["links"]
                           if (link_rail := link["rail"]) is not None for s in link.get("streams") or [])
    assert "r1-leaf05:10 ↔ r1-spine02:5" in output and "None" not in output.split("findings")[1].split("\n")[2]


def test_preflight_drains_no_node_for_a_fabric_fault_and_says_where_it_is(tmp_path):
    document = tmp_path / "preflight.json"
    result = CliRunner().invoke(main, ["preflight", "--simulate", str(_fleet(tmp_path, SLOW_UPLINK)), "--no-store",
                                       "-q", "--probes", "facts", "--json", str(document)], env=NO_JOB)
    assert result.exit_code == 1, result.output
    preflight = json.loads(document.read_text())["preflight"]
    assert preflight["drain"] == [] and preflight["plan"]["link_rounds"] <= 4
    assert "r1-leaf05:10 r1-spine02:5 slow_fabric_link" in result.stdout.splitlines()[-1]


def test_the_sites_topology_file_is_the_default_and_none_turns_it_off(tmp_path):
    fleet = _fleet(tmp_path, SLOW_UPLINK)
    topology = tmp_path / "fabric.json"
    topology.write_text(json.dumps(topology_document(load_fleet(str(fleet)).topology)))
    code, document, _ = _sweep(tmp_path, fleet, env={"GPUDIAG_TOPOLOGY": str(topology)})
    assert code == 1 and [f["kind"] for f in document["findings"]] == ["slow_fabric_link"]
    # without a topology the screen knows no switch link: the slow uplink costs a few pairs a little
    code, document, output = _sweep(tmp_path, fleet, "--topology", "none")
    assert not [f for f in document["findings"] if f["kind"] in ("slow_fabric_link", "slow_switch")], output


def test_a_node_the_topology_file_leaves_out_is_unchecked_for_the_fabric(tmp_path):
    fleet = _fleet(tmp_path, nodes=16, fabric={"leaves": 4, "spines": 2, "rails": 1})
    written = topology_document(load_fleet(str(fleet)).topology)
    for plane in written["planes"]:
        plane["nodes"] = [node for node in plane["nodes"] if node["host"] != "node016"]
    topology = tmp_path / "fabric.json"
    topology.write_text(json.dumps(written))
    code, document, output = _sweep(tmp_path, fleet, "--topology", str(topology))
    assert code == 3, output
    [missing] = [f for f in document["findings"] if f["kind"] == "unchecked"]
    assert missing["host"] == "node016" and "not in the topology" in missing["evidence"]


@pytest.mark.parametrize("text", ["SwitchName=leaf1 Nodes=node[001-004]\nSwitchName=top Switches=leaf[1-2]\n",
                                  "{not json", ""])
def test_a_topology_file_that_cannot_be_read_is_one_line_naming_it_and_exit_2(tmp_path, text):
    topology = tmp_path / "topology.conf"
    topology.write_text(text)
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(_fleet(tmp_path)), "--no-store", "-q",
                                       "--topology", str(topology)], env=NO_JOB)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(topology) in lines[0]


def test_triage_says_where_the_node_sits_in_the_fabric(tmp_path):
    result = CliRunner().invoke(main, ["triage", "--simulate", str(_fleet(tmp_path)), "--host", "node020",
                                       "--no-store", "-q", "--duration", "0.1"], env=NO_JOB)
    assert "In the fabric:" in result.output
    assert "rail 0: r0-leaf03 port 4; r0-leaf03 has 4 uplinks to r0-spine01" in result.output


@pytest.mark.parametrize("nodes", [2, 3, 4, 8, 16, 64])
def test_a_jobs_network_at_58_pct_of_its_line_rate_fails_as_a_whole_and_drains_or_excludes_none(tmp_path, nodes):
    faults = [{"kind": "slow_nic", "host": f"node{i:03d}", "factor": 0.58} for i in range(1, nodes + 1)]
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"nodes": nodes, "seed": nodes, "faults": faults}))
    code, document, output = _sweep(tmp_path, path)
    assert code == 1, output
    [network] = [f for f in document["findings"] if f["kind"] == "slow_network"]
    assert (network["severity"], network["host"], network["action"], network["confirmed"]) == (
        "fail", None, "inspect", True)
    assert not [f for f in document["findings"] if f["action"] == "drain" or f["kind"] in ("slow_nic", "slow_link")]
    assert document["impact"]["exclude"] == [] and document["impact"]["network_slowdown_pct"] > 35
