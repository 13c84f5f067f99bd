"""Findings of no host in every report: a slow switch link, a slow switch, a set of switch links
the tests could not split (the fabric between switches) and a job's network below its line rate
(``slow_network``). Each format shows where such a finding is (its switches and ports, its rail, or
the network of its pair tests), never a host of ``None``; the per-host grids and counts leave it
out; the Prometheus textfile gives it series of its own, labelled with the part and no Hostname."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from html_tables import HtmlTables
from prometheus_client.parser import text_string_to_metric_families

from gpudiag.findings import Action, Basis, FabricPart, Finding, Kind, Severity
from gpudiag.report import impact_phrase, render_report, sort_findings
from gpudiag.report.folding import fold_findings
from gpudiag.report.heatmap import named_devices
from gpudiag.report.linkmap import html_links
from gpudiag.report.phrasing import finding_location, finding_where
from gpudiag.report.prometheus import write_prom_file
from gpudiag.report.summary import _impact_rows
from gpudiag.report.text import finding_text

HOSTS = [f"node{n:03d}" for n in range(1, 5)]
LINK_DETAIL = ("for the network team: read perfquery -x 3 12 and ibportstate 3 12 (r2-leaf03); perfquery -x 12 3 "
               "and ibportstate 12 3 (r2-spine04) (no node is at fault: none is drained)")
SWITCH_DETAIL = "read every port of r0-spine02: perfquery -x -a 17; check its health and firmware"
NETWORK_DETAIL = "every pair of this network runs alike and far below its line rate: draining nodes will not fix it"


def _fabric_link() -> Finding:
    return Finding(kind=Kind.SLOW_FABRIC_LINK, severity=Severity.FAIL, host=None, metric="fabric.perftest.rail2",
                   value=70.05, reference=100.0, unit="%", reference_source="pairs", deficit_pct=29.95,
                   robust_z=-129.8, confirmed=True, basis=Basis.RETEST, action=Action.INSPECT,
                   action_detail=LINK_DETAIL,
                   evidence="rail 2 (perftest): r2-leaf03 port 12 – r2-spine04 port 3: the 10 streams through it "
                            "reached 70.1 % of the other streams of their pairs; nodes behind it: node[001-002]",
                   fabric=(FabricPart(rail=2, switches=("r2-leaf03", "r2-spine04"), ports=("12", "3")),))


def _switch() -> Finding:
    return Finding(kind=Kind.SLOW_SWITCH, severity=Severity.WARN, host=None, metric="fabric.perftest.rail0",
                   value=81.0, reference=100.0, unit="%", reference_source="pairs", deficit_pct=19.0,
                   basis=Basis.SINGLE_RUN, action=Action.INSPECT, action_detail=SWITCH_DETAIL,
                   evidence="rail 0 (perftest): switch r0-spine02: every stream through it slow",
                   fabric=(FabricPart(rail=0, switch="r0-spine02"),))


def _candidates() -> Finding:
    return Finding(kind=Kind.SLOW_FABRIC_LINK, severity=Severity.WARN, host=None, metric="fabric.perftest.rail1",
                   deficit_pct=12.0, basis=Basis.SINGLE_RUN, action=Action.INSPECT,
                   action_detail="read the ports of both links", evidence="two links, always crossed together",
                   fabric=(FabricPart(rail=1, switches=("r1-leaf01", "r1-spine01")),
                           FabricPart(rail=1, switches=("r1-leaf01", "r1-spine03"), ports=("50", "1"))))


def _network() -> Finding:
    return Finding(kind=Kind.SLOW_NETWORK, severity=Severity.FAIL, host=None, metric="link.perftest", value=222.4,
                   reference=400.0, unit="Gbit/s", reference_source="line_rate", deficit_pct=44.4, share_pct=100.0,
                   confirmed=True, basis=Basis.RETEST, action=Action.INSPECT, action_detail=NETWORK_DETAIL,
                   evidence="links on perftest rail 5 run below their line rate: 6 of 6 pairs below")


def _slow_nic() -> Finding:
    return Finding(kind=Kind.SLOW_NIC, severity=Severity.FAIL, host="node003", metric="link.perftest", value=269.2,
                   reference=391.7, unit="Gbit/s", reference_source="fleet", deficit_pct=31.3, confirmed=True,
                   basis=Basis.RETEST, action=Action.DRAIN, action_detail="check the NIC's port",
                   evidence="node003 slow with all 3 partners")


def _host(name: str) -> dict[str, Any]:
    results = [{"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{name}-{gpu}", "metric": "tflops",
                "value": 740.0 + gpu, "unit": "TFLOP/s", "status": "ok", "params": {"dtype": "bf16"}}
               for gpu in range(2)]
    return {"host": name, "status": "ok", "error": None, "facts": {"gpu_model": "H100", "gpu_count": 2,
                                                                     "hostname": name}, "results": results}


def _link(a: str, b: str, value: float) -> dict[str, Any]:
    return {"a": a, "b": b, "rail": 0, "backend": "perftest", "metric": "gbps", "value": value, "unit": "Gbit/s",
            "phase": "screen", "line_rate_gbps": 400.0, "error": None}


def document(*findings: Finding, impact: dict[str, Any] | None = None) -> dict[str, Any]:
    """A four-host sweep document (as a file holds it: JSON) with ``findings``."""
    chosen = findings or (_slow_nic(), _fabric_link(), _switch(), _candidates(), _network())
    links = [_link(a, b, 300.0 if "node003" in (a, b) else 390.0)
             for a, b in (("node001", "node002"), ("node002", "node003"), ("node003", "node004"),
                          ("node004", "node001"))]
    return json.loads(json.dumps({
        "schema": "gpudiag.sweep/1", "sweep_id": "20261129T080000Z-fab1", "started_at": "2026-11-29T08:00:00Z",
        "finished_at": "2026-11-29T08:01:00Z", "hosts": [_host(name) for name in HOSTS], "links": links,
        "findings": [finding.to_dict() for finding in chosen],
        "summary": {"hosts_total": 4, "hosts_ok": 4, "findings": len(chosen), "unchecked": 0, "exit_code": 1},
        "impact": {"slowdown_pct": 44.4, "gpu_slowdown_pct": 3.0, "network_slowdown_pct": 44.4,
                   "recovered_pct": 0.0, "exclude": ["node003"], "hosts_total": 4,
                   "fabric_slowdown_pct": 29.95,
                   "fabric": [{"parts": ["r2-leaf03 port 12 – r2-spine04 port 3"], "rail": 2,
                               "hosts_behind": ["node001", "node002"], "loss_pct": 29.95, "confirmed": True},
                              {"parts": ["r1-leaf01 – r1-spine01", "r1-leaf01 port 50 – r1-spine03 port 1"],
                               "rail": 1, "hosts_behind": [], "loss_pct": 12.0, "confirmed": False}]}
        if impact is None else impact}))


def _by_kind(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{f['kind']}{'*' if f.get('fabric_candidates') else ''}": f for f in doc["findings"]}


# ------------------------------------------------------------------------------------ where it is


def test_each_finding_of_no_host_says_where_it_is_in_the_reports_words():
    found = _by_kind(document())
    assert finding_location(found["slow_fabric_link"]) == "rail 2 r2-leaf03:12 ↔ r2-spine04:3"
    assert finding_location(found["slow_switch"]) == "rail 0 switch r0-spine02"
    # a set the tests could not split: its members, each with its ports where known
    assert finding_location(found["slow_fabric_link*"]) == (
        "rail 1 one of r1-leaf01 ↔ r1-spine01, r1-leaf01:50 ↔ r1-spine03:1")
    # a job's network as a whole; the share of a pair test's finding is of pairs
    assert finding_where(found["slow_network"]) == "the network (perftest) (share 100 % of pairs)"
    rail = {**found["slow_network"], "metric": "link.perftest.rail5"}
    assert finding_location(rail) == "the network (perftest, rail 5)"


def test_a_finding_of_no_host_that_names_nothing_still_reads_as_words_not_none():
    assert finding_location({"kind": "slow_fabric_link", "host": None, "fabric_link": None, "switch": None,
                             "metric": "fabric.tcp.rail3"}) == "the fabric (rail 3)"
    assert finding_location({"kind": "slow_network", "host": None}) == "the network"
    assert finding_location({"kind": "slow_gpu"}) == "no host named"


def test_findings_of_no_host_are_never_folded_together():
    doc = document(_network(), _network(), _fabric_link())
    assert len(fold_findings(sort_findings(doc["findings"]))) == 3


# ------------------------------------------------------------------------------------------- text


def test_the_text_report_shows_the_switches_ports_and_rail_and_the_network_never_none():
    text = render_report(document(), "text")
    assert "None" not in text
    lines = [line.strip() for line in text.splitlines()]
    assert lines[0].startswith("sweep 20261129T080000Z-fab1 · 4 hosts · 4 ok · 5 findings (3 fail, 2 warn)")
    assert lines[0].endswith("job slowdown 44.4 % (GPUs 3.0 %, network 44.4 %: a synchronous job waits for the "
                             "slower), excluding node003 recovers 0.0 %")
    assert any(line.startswith("fail slow_fabric_link rail 2 r2-leaf03:12 ↔ r2-spine04:3 · fabric.perftest.rail2 "
                               "70.0 % vs pairs 100.0 % (−29.9 % below, z -129.8) · confirmed by re-test · "
                               "action: inspect — for the network team") for line in lines)
    assert any(line.startswith("fail slow_network the network (perftest) (share 100 % of pairs) · link.perftest "
                               "222.4 Gbit/s vs line rate 400.0 Gbit/s (−44.4 % below)") for line in lines)
    assert any(line.startswith("warn slow_switch rail 0 switch r0-spine02 ·") for line in lines)
    # the impact line names each slow part of the fabric and the nodes behind it
    impact = next(line for line in lines if line.startswith("impact:"))
    assert ("fabric rail 2 r2-leaf03 port 12 – r2-spine04 port 3: the collectives that cross it run −29.9 % below "
            "(confirmed); nodes behind it node[001-002]") in impact
    assert ("fabric rail 1 one of r1-leaf01 – r1-spine01, r1-leaf01 port 50 – r1-spine03 port 1: the collectives "
            "that cross it run −12.0 % below") in impact
    # the hosts' lines count only hosts
    assert any(re.fullmatch(r"ok\s+4\s+node\[001-004\]", line) for line in lines)


def test_a_finding_line_of_no_host_keeps_its_action_detail():
    line = finding_text(_by_kind(document())["slow_switch"])
    assert line.startswith("warn slow_switch rail 0 switch r0-spine02 · fabric.perftest.rail0 81.0 % vs pairs 100.0 %")
    assert f"action: inspect — {SWITCH_DETAIL}" in line


# ----------------------------------------------------------------------------------------- impact


def test_the_impact_rows_give_the_gpus_and_the_networks_part_and_each_slow_fabric_part():
    rows = _impact_rows(document()["impact"])
    labels = [label for label, _ in rows]
    assert labels[:3] == ["job slowdown", "GPU slowdown", "network slowdown"]
    assert dict(rows[:3]) == {"job slowdown": "44.4 %", "GPU slowdown": "3.0 %", "network slowdown": "44.4 %"}
    fabric = [text for label, text in rows if label == "fabric"]
    assert fabric == ["rail 2 r2-leaf03 port 12 – r2-spine04 port 3: the collectives that cross it run −29.9 % below "
                      "(confirmed); nodes behind it node[001-002]",
                      "rail 1 one of r1-leaf01 – r1-spine01, r1-leaf01 port 50 – r1-spine03 port 1: the collectives "
                      "that cross it run −12.0 % below (not confirmed)"]


def test_where_the_gpus_were_not_compared_the_impact_is_the_networks_alone():
    impact = {"slowdown_pct": None, "gpu_slowdown_pct": None, "network_slowdown_pct": 33.0, "exclude": ["node050"],
              "hosts_total": 64, "recovered_pct": None}
    assert impact_phrase(impact) == "network slowdown 33.0 % (GPUs not compared)"
    assert _impact_rows(impact) == [("network slowdown", "33.0 % (GPUs not compared: the job's slowdown is not known)"),
                                    ("exclude", "node050 (1 of 64 hosts)")]
    # an estimate of neither says nothing, as before
    assert _impact_rows({"slowdown_pct": None, "exclude": ["node050"]}) == []


def test_a_job_slowdown_of_the_gpus_alone_reads_as_it_did():
    impact = {"slowdown_pct": 15.0, "recovered_pct": 14.8, "exclude": ["node003"], "hosts_total": 6}
    assert impact_phrase(impact) == "job slowdown 15.0 %, excluding node003 recovers 14.8 %"
    assert [label for label, _ in _impact_rows(impact)] == ["job slowdown", "exclude", "recovered by excluding"]


# --------------------------------------------------------------------------------------- markdown


def _markdown_rows(text: str, first_header: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"\|\s*{first_header}\s*\|", line))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def test_the_markdown_findings_table_names_the_fabric_part_and_the_network():
    text = render_report(document(), "md")
    assert "None" not in text
    where = {(row[2], row[3]) for row in _markdown_rows(text, "severity")}
    assert where == {("slow_network", "the network (perftest) (share 100 % of pairs)"),
                     ("slow_nic", "node003"),
                     ("slow_fabric_link", "rail 2 r2-leaf03:12 ↔ r2-spine04:3"),
                     ("slow_switch", "rail 0 switch r0-spine02"),
                     ("slow_fabric_link", "rail 1 one of r1-leaf01 ↔ r1-spine01, r1-leaf01:50 ↔ r1-spine03:1")}
    row = next(row for row in _markdown_rows(text, "severity") if row[2] == "slow_fabric_link" and "rail 2" in row[3])
    assert row[1] == "inspect" and row[11] == LINK_DETAIL
    impact = _markdown_rows(text, "estimate")
    assert [label for label, _ in impact] == ["job slowdown", "GPU slowdown", "network slowdown", "exclude",
                                              "recovered by excluding", "fabric", "fabric"]


# ------------------------------------------------------------------------------------------- HTML


def _tables(text: str) -> dict[str, list[list[str]]]:
    parser = HtmlTables()
    parser.feed(text)
    return parser.tables


def test_the_html_findings_list_shows_each_fabric_finding_with_its_action_text_outside_the_details():
    text = render_report(document(), "html")
    assert "None" not in text
    rows = {(row[2], row[3]) for row in _tables(text)["findings-table"][1:]}
    assert ("slow_fabric_link", "rail 2 r2-leaf03:12 ↔ r2-spine04:3") in rows
    assert ("slow_switch", "rail 0 switch r0-spine02") in rows
    assert ("slow_network", "the network (perftest) (share 100 % of pairs)") in rows
    for detail in (LINK_DETAIL, SWITCH_DETAIL, NETWORK_DETAIL):
        row = next(row for row in re.findall(r"<tr class=[^>]*>.*?</tr>", text) if detail.split(":")[0] in row)
        assert 'class="fail no-host"' in row or 'class="warn no-host"' in row
        # shown before the <details>, so it reads without a click; and not said twice
        shown, folded = row.split("<details>", 1)
        assert f'<p class="action-detail">{detail}</p>' in shown.replace("&#x27;", "'")
        assert "action detail" not in folded
    # a finding of a host shows its detail the same way (issue 29: what to do is never a click away)
    nic = next(row for row in re.findall(r"<tr class=[^>]*>.*?</tr>", text) if "slow_nic" in row)
    shown, folded = nic.split("<details>", 1)
    assert 'class="fail"' in nic and shown.count('<p class="action-detail">') == 1 and "action detail" not in folded


def test_the_html_device_grid_and_link_section_count_a_finding_of_no_host_for_no_host():
    doc = document()
    named = named_devices(doc)
    assert set(named) == {"node003"} and dict(named["node003"]) == {None: ["slow_nic"]}
    text = render_report(doc, "html")
    grid = _tables(text)["gpu-heatmap"]
    assert [row[0] for row in grid[1:]] == ["node003", "node001", "node002", "node004"]
    assert [row[-1] for row in grid[1:]] == ["slow_nic", "", "", ""]
    links = html_links(doc)
    assert "None" not in links and "slow_fabric_link" not in links and "slow_network" not in links


def test_the_html_impact_block_lists_the_networks_part_and_the_fabric():
    impact = _tables(render_report(document(), "html"))["impact"]
    assert impact[0] == ["job slowdown", "44.4 %"] and ["network slowdown", "44.4 %"] in impact
    assert [row[1].split(":")[0] for row in impact if row[0] == "fabric"] == [
        "rail 2 r2-leaf03 port 12 – r2-spine04 port 3", "rail 1 one of r1-leaf01 – r1-spine01, r1-leaf01 port 50 – "
        "r1-spine03 port 1"]


# ------------------------------------------------------------------------------------------- JSON


def test_the_json_report_keeps_a_finding_of_no_host_as_null_with_its_part():
    findings = json.loads(render_report(document(), "json"))["findings"]
    link = next(f for f in findings if f["kind"] == "slow_fabric_link" and f["fabric_link"])
    assert link["host"] is None and link["fabric_link"] == {"rail": 2, "switches": ["r2-leaf03", "r2-spine04"],
                                                            "ports": ["12", "3"]}
    assert next(f for f in findings if f["kind"] == "slow_switch")["switch"] == "r0-spine02"


# ------------------------------------------------------------------------------------- Prometheus


def _samples(path: Path) -> dict[str, list[dict[str, str]]]:
    found: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append({**sample.labels, "value": str(sample.value)})
    return found


@pytest.fixture
def textfile(tmp_path: Path) -> dict[str, list[dict[str, str]]]:
    path = tmp_path / "gpudiag.prom"
    write_prom_file(document(), str(path))
    return _samples(path)


def test_a_finding_of_no_host_is_a_network_finding_labelled_with_its_part_and_no_hostname(textfile):
    network = textfile["gpudiag_network_finding"]
    assert all("Hostname" not in labels and "host" not in labels and "gpu" not in labels for labels in network)
    parts = {(labels["kind"], labels["fabric_rail"], labels["switch"], labels["port"], labels["peer_switch"],
              labels["peer_port"], labels["severity"], labels["action"]) for labels in network}
    assert parts == {("slow_fabric_link", "2", "r2-leaf03", "12", "r2-spine04", "3", "fail", "inspect"),
                     ("slow_switch", "0", "r0-spine02", "", "", "", "warn", "inspect"),
                     ("slow_fabric_link", "1", "", "", "", "", "warn", "inspect"),
                     ("slow_network", "", "", "", "", "", "fail", "inspect")}
    where = {labels["where"] for labels in network}
    assert where == {"rail 2 r2-leaf03:12 ↔ r2-spine04:3", "rail 0 switch r0-spine02",
                     "rail 1 one of r1-leaf01 ↔ r1-spine01, r1-leaf01:50 ↔ r1-spine03:1", "the network (perftest)"}


def test_the_node_findings_family_holds_only_findings_of_a_host(textfile):
    assert [(labels["Hostname"], labels["kind"]) for labels in textfile["gpudiag_finding"]] == [("node003", "slow_nic")]
    assert all(labels["Hostname"] for family in ("gpudiag_finding_value", "gpudiag_finding_reference")
               for labels in textfile[family])


def test_a_network_findings_figure_and_reference_join_one_to_one(textfile):
    values = {labels["where"]: float(labels["value"]) for labels in textfile["gpudiag_network_finding_value"]}
    references = {labels["where"]: float(labels["value"]) for labels in textfile["gpudiag_network_finding_reference"]}
    assert values == {"rail 2 r2-leaf03:12 ↔ r2-spine04:3": 70.05, "rail 0 switch r0-spine02": 81.0,
                      "the network (perftest)": 222.4}
    assert references == {"rail 2 r2-leaf03:12 ↔ r2-spine04:3": 100.0, "rail 0 switch r0-spine02": 100.0,
                          "the network (perftest)": 400.0}
    line_rate = next(labels for labels in textfile["gpudiag_network_finding_value"] if labels["kind"] == "slow_network")
    assert (line_rate["unit"], line_rate["reference_source"]) == ("Gbit/s", "line_rate")


def test_a_sweep_of_only_host_findings_has_an_empty_network_family(tmp_path: Path):
    path = tmp_path / "hosts.prom"
    write_prom_file(document(_slow_nic()), str(path))
    samples = _samples(path)
    assert "gpudiag_network_finding" not in samples and len(samples["gpudiag_finding"]) == 1
    assert "# TYPE gpudiag_network_finding gauge" in path.read_text()
