"""``gpudiag report`` of simulated sweeps whose findings name no host: a slow uplink between a leaf
and a spine (``slow_fabric_link``) beside a slow NIC, and a four-node job whose every NIC runs at
58 % of line rate (``slow_network``). The sweep writes its document (``--json``), the store and the
Prometheus textfile; the report reads the document and the store in every format, and each shows
where the finding is (the switches, their ports, the rail; the network), never ``None``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from html_tables import HtmlTables
from prometheus_client.parser import text_string_to_metric_families

from gpudiag.cli.main import main

FABRIC_FLEET = {"nodes": 64, "seed": 11, "noise": {"link_cv": 0.02}, "fabric": {"leaves": 8, "spines": 4},
                "faults": [{"kind": "slow_uplink", "a": "r2-leaf03", "b": "r2-spine04", "factor": 0.7},
                           {"kind": "slow_nic", "host": "node050", "factor": 0.7}]}
NETWORK_FLEET = {"nodes": 4, "seed": 4, "faults": [{"kind": "slow_nic", "host": f"node00{n}", "factor": 0.58}
                                                   for n in range(1, 5)]}
FORMATS = ("text", "md", "json", "html")


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _swept(folder: Path, fleet: dict[str, Any]) -> dict[str, Any]:
    """A simulated sweep of ``fleet`` (facts and the pair tests) into a document, a store and a textfile."""
    folder.mkdir()
    (folder / "fleet.json").write_text(json.dumps(fleet))
    paths = {name: folder / name for name in ("sweep.json", "gpudiag.db", "gpudiag.prom")}
    result = _run("sweep", "--simulate", str(folder / "fleet.json"), "--probes", "facts", "-q",
                  "--json", str(paths["sweep.json"]), "--store", str(paths["gpudiag.db"]),
                  "--prom-file", str(paths["gpudiag.prom"]))
    document = json.loads(paths["sweep.json"].read_text())
    return {"code": result.exit_code, "output": result.output, "document": document, **paths}


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _swept(tmp_path_factory.mktemp("fabric") / "sweep", FABRIC_FLEET)


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _swept(tmp_path_factory.mktemp("network") / "sweep", NETWORK_FLEET)


def _report(source: Path, fmt: str, *store: str) -> str:
    result = _run("report", *([str(source)] if source.suffix == ".json" else []), "--format", fmt, *store)
    assert result.exit_code == 0, result.output
    return result.output


def _uplink(document: dict[str, Any]) -> dict[str, Any]:
    """The slow uplink's finding: the only one of no host in the fabric sweep."""
    hostless = [finding for finding in document["findings"] if finding["host"] is None]
    assert [finding["kind"] for finding in hostless] == ["slow_fabric_link"]
    return hostless[0]


def _uplink_words(finding: dict[str, Any]) -> str:
    """``rail 2 r2-leaf03:12 ↔ r2-spine04:3``: the link's ends as the simulated topology numbers
    their ports."""
    part = finding["fabric_link"]
    assert part["rail"] == 2 and part["switches"] == ["r2-leaf03", "r2-spine04"], part
    ends = part["switches"] if part["ports"] is None else [f"{switch}:{port}" for switch, port in
                                                           zip(part["switches"], part["ports"], strict=True)]
    return f"rail 2 {ends[0]} ↔ {ends[1]}"


def test_the_sweeps_find_a_slow_uplink_of_no_host_and_a_slow_network(fabric, network):
    assert fabric["code"] == 1 and network["code"] == 1
    _uplink(fabric["document"])
    assert {(f["kind"], f["host"]) for f in fabric["document"]["findings"]} == {("slow_nic", "node050"),
                                                                                 ("slow_fabric_link", None)}
    assert [(f["kind"], f["host"]) for f in network["document"]["findings"]] == [("slow_network", None)]
    assert "None" not in fabric["output"] + network["output"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_of_the_fabric_sweep_names_the_uplinks_switches_and_ports(fabric, fmt: str):
    words = _uplink_words(_uplink(fabric["document"]))
    from_file = _report(fabric["sweep.json"], fmt)
    if fmt == "json":
        found = _uplink(json.loads(from_file))
        assert found["fabric_link"] == _uplink(fabric["document"])["fabric_link"]
        return
    assert words in from_file and "None" not in from_file
    # the stored sweep reads the same: its finding of no host comes back as one of no host
    assert _report(fabric["gpudiag.db"], fmt, "--store", str(fabric["gpudiag.db"])) == from_file


def test_the_text_report_of_the_fabric_sweep(fabric):
    text = _report(fabric["sweep.json"], "text")
    lines = [line.strip() for line in text.splitlines()]
    words = _uplink_words(_uplink(fabric["document"]))
    line = next(line for line in lines if line.startswith("fail slow_fabric_link"))
    assert line.startswith(f"fail slow_fabric_link {words} · fabric.perftest.rail2 ")
    assert "action: inspect — for the network team" in line
    assert any(line.startswith("fail slow_nic node050 ·") for line in lines)
    assert lines[0].endswith("2 findings (2 fail) · network slowdown " +
                             f"{fabric['document']['impact']['network_slowdown_pct']:.1f} % (GPUs not compared)")
    impact = next(line for line in lines if line.startswith("impact:"))
    assert "exclude node050 (1 of 64 hosts)" in impact
    assert re.search(r"fabric rail 2 r2-leaf03 port \d+ – r2-spine04 port \d+: the collectives that cross it run "
                     r"−\d+\.\d % below \(confirmed\); nodes behind it node\[017-024\]", impact), impact
    assert any(re.fullmatch(r"ok\s+64\s+node\[001-064\]", line) for line in lines)


def test_the_html_report_of_the_fabric_sweep_lists_the_uplink_with_its_action_shown(fabric):
    page = _report(fabric["sweep.json"], "html")
    parser = HtmlTables()
    parser.feed(page)
    findings = parser.tables["findings-table"][1:]
    words = _uplink_words(_uplink(fabric["document"]))
    assert [(row[0], row[2], row[3]) for row in findings] == [("fail", "slow_nic", "node050"),
                                                              ("fail", "slow_fabric_link", words)]
    row = next(row for row in re.findall(r"<tr class=[^>]*>.*?</tr>", page) if "slow_fabric_link" in row)
    shown = row.split("<details>", 1)[0]
    assert 'class="fail no-host"' in row and '<p class="action-detail">for the network team' in shown
    # the link section's rows are hosts: node050 first, named by its slow_nic; no row of no host
    links = parser.tables["link-hosts"]
    assert links[1][:2] == ["node050", "slow_nic fail"]
    assert {row[0] for row in links[1:]} <= {f"node{n:03d}" for n in range(1, 65)}
    assert [row[:3] for row in parser.tables["host-status"][1:]] == [["ok", "node[001-064]", "64"]]


def test_the_textfile_of_the_fabric_sweep_labels_the_uplink_by_its_switches_not_a_host(fabric):
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(fabric["gpudiag.prom"].read_text()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(dict(sample.labels))
    part = _uplink(fabric["document"])["fabric_link"]
    ports = part["ports"] or ["", ""]
    assert [(labels["kind"], labels["fabric_rail"], labels["switch"], labels["port"], labels["peer_switch"],
             labels["peer_port"], labels["where"]) for labels in samples["gpudiag_network_finding"]] == [
        ("slow_fabric_link", "2", "r2-leaf03", ports[0], "r2-spine04", ports[1], _uplink_words(_uplink(
            fabric["document"])))]
    assert not any("Hostname" in labels for labels in samples["gpudiag_network_finding"])
    assert [labels["Hostname"] for labels in samples["gpudiag_finding"]] == ["node050"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_of_the_job_network_says_the_network_not_none(network, fmt: str):
    text = _report(network["sweep.json"], fmt)
    if fmt == "json":
        assert [f["host"] for f in json.loads(text)["findings"]] == [None]
        return
    assert "None" not in text and "the network (perftest)" in text
    assert _report(network["gpudiag.db"], fmt, "--store", str(network["gpudiag.db"])) == text


def test_the_text_and_markdown_of_the_job_network(network):
    lines = [line.strip() for line in _report(network["sweep.json"], "text").splitlines()]
    # every NIC at 58 % of its healthy rate: the network 42-45 % slower than its line rate lets
    slowdown = json.loads(network["sweep.json"].read_text())["impact"]["network_slowdown_pct"]
    assert 42 <= slowdown <= 45
    assert lines[0].endswith(f"1 finding (1 fail) · network slowdown {slowdown:.1f} % (GPUs not compared)")
    line = next(line for line in lines if line.startswith("fail slow_network"))
    assert line.startswith("fail slow_network the network (perftest) (share 100 % of pairs) · link.perftest ")
    assert "vs line rate 400.0 Gbit/s" in line and "action: inspect — every pair of this network" in line
    markdown = _report(network["sweep.json"], "md")
    assert f"| network slowdown | {slowdown:.1f} % (GPUs not compared: the job's slowdown is not known)" in markdown
    textfile = network["gpudiag.prom"].read_text()
    assert re.search(r'gpudiag_network_finding\{action="inspect",fabric_rail="",kind="slow_network",'
                     r'metric="link.perftest",peer_port="",peer_switch="",port="",severity="fail",switch="",'
                     r'where="the network \(perftest\)"\} 1.0', textfile)
    assert not re.search(r"^gpudiag_finding\{", textfile, re.MULTILINE)


def test_history_reads_a_store_holding_findings_of_no_host(fabric):
    store = str(fabric["gpudiag.db"])
    listed = _run("history", "--store", store)
    assert listed.exit_code == 0 and "None" not in listed.output
    for host in ("node050", "node018"):
        shown = _run("history", host, "--store", store, "--json", "-")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["host"] == host
