"""Reports from a sweep document: finding order, text, markdown, JSON and the self-contained HTML file."""

from __future__ import annotations

import copy
import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from html_tables import HtmlTables

from gpudiag.errors import OutputError
from gpudiag.records import read_probe_output
from gpudiag.report import heat_colour, render_report, sort_findings, write_report
from gpudiag.report.heatmap import FAULT_STYLE

REFERENCE_TFLOPS = 741.2
SLOW_TFLOPS = round(0.85 * REFERENCE_TFLOPS, 2)  # 630.02, shown as 630.0
EVIL_HOST = "<script>alert(1)</script>"


def gemm(gpu: int, value: float) -> dict[str, Any]:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu:04d}", "metric": "tflops",
            "value": value, "unit": "TFLOP/s", "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
            "params": {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}, "details": {}}


def host(name: str, values: list[float] | None, status: str = "ok", error: str | None = None) -> dict[str, Any]:
    results = [] if values is None else [gemm(gpu, value) for gpu, value in enumerate(values)]
    # A membw result on every GPU: the device grid reads it beside GEMM.
    results += [{"probe": "membw", "device": f"cuda:{gpu}", "metric": "bandwidth", "value": 3000.0,
                 "unit": "GB/s", "status": "ok"} for gpu in range(len(values or []))]
    facts = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "driver": "550.54.15"} if values else {}
    return {"host": name, "status": status, "error": error, "duration_s": 12.4, "facts": facts, "results": results}


def finding(kind: str, severity: str, host_name: str, deficit: float | None = None, *, peer: str | None = None,
            gpu: int | None = None, metric: str | None = None, value: float | None = None,
            reference: float | None = None, evidence: str = "", action: str = "") -> dict[str, Any]:
    return {"kind": kind, "severity": severity, "host": host_name, "peer": peer, "gpu": gpu, "metric": metric,
            "value": value, "reference": reference, "deficit_pct": deficit,
            "robust_z": None if deficit is None else -deficit / 2, "confirmed": True,
            "evidence": evidence, "action": action}


def link(a: str, b: str, value: float, rail: int = 0, phase: str = "screen") -> dict[str, Any]:
    return {"a": a, "b": b, "rail": rail, "backend": "tcp", "metric": "gbps", "value": value, "phase": phase}


def make_document() -> dict[str, Any]:
    """Six hosts of 8 GPUs: node003's GPU 5 at 85 %, node006 unreachable, a slow link node001-node004."""
    hosts = [host(f"node00{n}", [REFERENCE_TFLOPS + 0.1 * gpu for gpu in range(8)]) for n in range(1, 6)]
    hosts[2]["results"][5]["value"] = SLOW_TFLOPS
    hosts.append(host("node006", None, status="unreachable", error="ssh: connect to host node006: No route to host"))
    links = []
    for a, b in (("node001", "node002"), ("node003", "node004"), ("node002", "node003"), ("node004", "node001")):
        slow = {a, b} == {"node001", "node004"}
        for rail in (0, 1):
            links.append(link(a, b, (5.2 if slow else 9.41) + 0.01 * rail, rail=rail))
    links.append(link("node001", "node004", 5.6, phase="confirm"))
    findings = [
        finding("unchecked", "warn", "node006", evidence="unreachable: No route to host",
                action="check that the node is up and reachable over SSH"),
        finding("slow_gpu", "fail", "node003", 15.0, gpu=5, metric="gemm.tflops", value=SLOW_TFLOPS,
                reference=REFERENCE_TFLOPS, evidence="HW thermal slowdown active; SM clock 1410 of 1980 MHz",
                action="drain"),
        finding("throttled", "warn", "node003", gpu=5, evidence="hw_thermal_slowdown", action="check cooling"),
        finding("slow_nic", "warn", "node002", 8.0, metric="net.gbps", value=8.66, reference=9.41,
                evidence="slow with node001 and node003 | both rails", action="check the NIC and cable"),
        finding("ecc", "fail", "node005", gpu=2, evidence="2 uncorrected ECC errors", action="drain"),
        finding("slow_link", "fail", "node001", 40.4, peer="node004", metric="net.gbps", value=5.6,
                reference=9.41, evidence="both ends fine with other partners", action="check the cable/switch port"),
    ]
    return {"schema": "gpudiag.sweep/1", "sweep_id": "20261121T101500Z-3f2a",
            "started_at": "2026-11-21T10:15:00Z", "finished_at": "2026-11-21T10:15:41Z",
            "hosts": hosts, "links": links, "findings": findings,
            "summary": {"hosts_total": 6, "hosts_ok": 5, "findings": 6, "exit_code": 1},
            "impact": {"slowdown_pct": 15.0,
                       "slowest": {"host": "node003", "gpu": 5, "metric": "gemm.tflops", "value": SLOW_TFLOPS,
                                   "reference": REFERENCE_TFLOPS},
                       "recovered_pct": 14.8, "exclude": ["node005", "node003"], "hosts_total": 6}}


def html_tables(text: str) -> dict[str, list[list[str]]]:
    parser = HtmlTables()
    parser.feed(text)
    return parser.tables


def markdown_table(text: str, first_header: str) -> list[list[str]]:
    """The body rows of the GitHub table whose first header is ``first_header``; ``\\|`` kept as ``|``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"\|\s*{first_header}\s*\|", line))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([cell.strip().replace("\\|", "|") for cell in cells])
    return rows


# ------------------------------------------------------------------------------------------ order


def test_findings_are_ordered_by_what_they_cost_the_job():
    ordered = sort_findings(make_document()["findings"])
    assert [(f["severity"], f["kind"], f["host"]) for f in ordered] == [
        ("fail", "slow_link", "node001"), ("fail", "slow_gpu", "node003"), ("fail", "ecc", "node005"),
        ("warn", "slow_nic", "node002"), ("warn", "throttled", "node003"), ("warn", "unchecked", "node006")]


def test_ties_break_by_kind_host_peer_and_gpu_whatever_the_input_order():
    findings = [finding("slow_gpu", "fail", "node002", 10.0, gpu=1),
                finding("slow_gpu", "fail", "node001", 10.0, gpu=7),
                finding("slow_gpu", "fail", "node001", 10.0, gpu=2),
                finding("degraded_pcie", "fail", "node009", 10.0),
                finding("slow_link", "fail", "node001", 10.0, peer="node003"),
                finding("slow_link", "fail", "node001", 10.0, peer="node002")]
    expected = [("degraded_pcie", "node009", None, None), ("slow_gpu", "node001", None, 2),
                ("slow_gpu", "node001", None, 7), ("slow_gpu", "node002", None, 1),
                ("slow_link", "node001", "node002", None), ("slow_link", "node001", "node003", None)]
    for shuffled in (findings, findings[::-1], findings[2:] + findings[:2]):
        assert [(f["kind"], f["host"], f["peer"], f["gpu"]) for f in sort_findings(shuffled)] == expected


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="pdf"):
        render_report(make_document(), "pdf")


# ------------------------------------------------------------------------------------------- text


def test_text_summary_line_folds_hosts_counts_findings_and_states_the_impact():
    text = render_report(make_document(), "text")
    # An old document has no summary.unchecked: the unchecked findings are counted instead.
    assert text.splitlines()[0] == (
        "sweep 20261121T101500Z-3f2a · 6 hosts · 5 ok · node006 unreachable · 6 findings (3 fail, 2 warn, 1 unchecked)"
        " · job slowdown 15.0 %, excluding node[003,005] recovers 14.8 %")


def test_text_lists_every_finding_on_one_line_most_costly_first():
    lines = render_report(make_document(), "text").splitlines()
    finding_lines = [line.strip() for line in lines if line.startswith("  fail") or line.startswith("  warn")]
    assert len(finding_lines) == 6
    # Old-shape findings: no unit, no reference source, a free-text action shown as it is.
    assert finding_lines[0] == ("fail slow_link node001 ↔ node004 · net.gbps 5.6 vs 9.41 (−40.4 % below, z -20.2)"
                                " · confirmed · action: check the cable/switch port"
                                " · both ends fine with other partners")
    assert finding_lines[1].startswith("fail slow_gpu node003:5 · gemm.tflops 630.0 vs 741.2 (−15.0 % below")
    assert " · action: drain · HW thermal slowdown active" in finding_lines[1]
    assert any(re.fullmatch(r"ok\s+5\s+node\[001-005\]", line.strip()) for line in lines)
    assert any(re.fullmatch(r"unreachable\s+1\s+node006: ssh: connect to host node006: No route to host",
                            line.strip()) for line in lines)


def test_without_an_impact_estimate_the_summary_says_nothing_of_it():
    document = make_document()
    del document["impact"]
    text = render_report(document, "text")
    assert text.splitlines()[0].endswith("6 findings (3 fail, 2 warn, 1 unchecked)")
    assert "job slowdown" not in text and "impact:" not in text
    assert "impact" not in render_report(document, "md").lower()
    assert "No job-impact estimate in this sweep." in render_report(document, "html")


def test_text_names_the_hosts_whose_bundle_printed_stray_lines():
    document = make_document()
    assert "stray output" not in render_report(document, "text")
    chatty = read_probe_output("sitecustomize: proxy loaded\nUserWarning: TF32 is off\n", "node002").stray
    assert chatty is not None
    document["hosts"][1]["stray_output"] = chatty.to_dict()
    document["hosts"][3]["stray_output"] = {"count": 1, "lines": ["[W init.cpp:42] NCCL_DEBUG unset"]}
    lines = [line.strip() for line in render_report(document, "text").splitlines()]
    assert [line for line in lines if line.startswith("stray output")] == [
        "stray output         2  node[002,004]: 3 lines that are not records;"
        " node002's first: 'sitecustomize: proxy loaded'"]


# --------------------------------------------------------------------------------------- markdown


def test_markdown_findings_table_has_one_row_per_finding_in_cost_order_with_pipes_escaped():
    text = render_report(make_document(), "md")
    rows = markdown_table(text, "severity")
    assert [(row[0], row[2], row[3]) for row in rows] == [
        ("fail", "slow_link", "node001 ↔ node004"), ("fail", "slow_gpu", "node003:5"), ("fail", "ecc", "node005:2"),
        ("warn", "slow_nic", "node002"), ("warn", "throttled", "node003:5"), ("warn", "unchecked", "node006")]
    assert all(len(row) == 12 for row in rows)
    assert rows[1][4:10] == ["gemm.tflops", "630.0", "741.2", "−15.0 % below", "-7.5", "confirmed"]
    assert rows[3][10] == "slow with node001 and node003 | both rails"
    assert "node003 \\| both rails" in text
    # An old free-text action is shown as text in the action column; there is no detail.
    assert rows[0][1] == "check the cable/switch port" and rows[0][11] == ""
    assert rows[1][1] == "drain"


def test_markdown_hosts_by_status_and_impact_tables():
    text = render_report(make_document(), "md")
    assert markdown_table(text, "status") == [
        ["ok", "node[001-005]", "5", ""],
        ["unreachable", "node006", "1", "ssh: connect to host node006: No route to host"]]
    impact = dict(map(tuple, markdown_table(text, "estimate")))
    assert impact == {"job slowdown": "15.0 %", "slowest": "node003:5 gemm.tflops 630.0 vs 741.2",
                      "exclude": "node[003,005] (2 of 6 hosts)", "recovered by excluding": "14.8 %"}


# ------------------------------------------------------------------------------------------- JSON


def test_json_is_the_document_with_findings_sorted():
    document = make_document()
    text = render_report(document, "json")
    assert text.startswith('{\n "schema": "gpudiag.sweep/1",\n "sweep_id"')
    loaded = json.loads(text)
    assert loaded == {**document, "findings": sort_findings(document["findings"])}
    assert list(loaded) == list(document)
    assert document == make_document()  # the input is not reordered in place


# ------------------------------------------------------------------------------------------- HTML


def test_html_is_self_contained():
    text = render_report(make_document(), "html")
    assert text.startswith("<!DOCTYPE html>")
    for forbidden in ("http://", "https://", 'src="http', 'href="http', "@import", "<script", "<link", "url("):
        assert forbidden not in text


def test_html_heatmap_has_a_row_per_host_named_hosts_first_and_shows_the_slow_gpu():
    tables = html_tables(render_report(make_document(), "html"))
    heatmap = tables["gpu-heatmap"]
    assert heatmap[0] == ["host", *(f"GPU {gpu}" for gpu in range(8)), "worst", "findings"]
    rows = {row[0]: row[1:] for row in heatmap[1:]}
    # Every host is named by a finding here: in cost order of its first (node004 is the slow link's peer).
    assert list(rows) == ["node001", "node004", "node003", "node005", "node002", "node006"]
    assert rows["node003"][5] == "85 % GEMM" and rows["node003"][8] == "85 % GEMM"
    assert rows["node003"][9] == "slow_gpu GPU 5, throttled GPU 5"
    assert rows["node001"][0] == "100 % GEMM" and rows["node001"][9] == "slow_link"
    assert rows["node006"] == ["unreachable: ssh: connect to host node006: No route to host", "unchecked"]


def test_html_heat_cells_carry_colour_and_a_title_and_a_named_gpu_the_fault_colour():
    document = make_document()
    document["hosts"][1]["results"][1]["value"] = 0.9 * REFERENCE_TFLOPS  # node002 GPU 1: low, no finding
    text = render_report(document, "html")
    gemm_values = [r["value"] for h in document["hosts"] for r in h["results"] if r["probe"] == "gemm"]
    ratio = 0.9 * REFERENCE_TFLOPS / statistics.median(gemm_values)
    low = re.search(r'<td style="background:(hsl\([^)]*\))" title="node002 GPU 1: GEMM 667.1 TFLOP/s '
                    r'\(([\d.]+) %\), mem 3000.0 GB/s \(100.0 %\)">', text)
    assert low is not None and low.group(1) == heat_colour(ratio) and low.group(2) == f"{100 * ratio:.1f}"
    slow = re.search(r'<td class="fault" style="([^"]*)" title="node003 GPU 5: GEMM 630.0 TFLOP/s \(85.0 %\), '
                     r'mem 3000.0 GB/s \(100.0 %\); finding: slow_gpu, throttled">', text)
    assert slow is not None and slow.group(1) == FAULT_STYLE
    # node005's GPU 2 measured fine, but an ECC finding names it.
    assert re.search(r'<td class="fault" style="[^"]*" title="node005 GPU 2: [^"]*; finding: ecc">100 %', text)
    assert heat_colour(1.0).startswith("hsl(120,") and heat_colour(0.5).startswith("hsl(0,")
    assert 'class="nodata"' in text


def test_html_link_matrix_is_symmetric_and_holds_the_worst_rail_per_pair_suspects_first():
    tables = html_tables(render_report(make_document(), "html"))
    matrix = tables["link-matrix"]
    hosts = matrix[0][1:]
    # The slow_nic host, then the slow_link's two ends, then the rest.
    assert hosts == ["node002", "node001", "node004", "node003"]
    cell = {(row[0], other): value for row in matrix[1:] for other, value in zip(hosts, row[1:], strict=True)}
    # Rail 0 is the median of its screen and confirm runs (5.2, 5.6), rail 1 is 5.21: the worst rail shows.
    assert cell[("node001", "node004")] == cell[("node004", "node001")] == "5.21"
    assert cell[("node001", "node002")] == "9.41"  # both rails at their reference: the lower figure
    assert cell[("node001", "node003")] == "" and cell[("node002", "node002")] == "-"


def test_html_link_matrix_only_when_links_were_measured():
    document = make_document()
    document["links"] = []
    text = render_report(document, "html")
    assert 'id="link-matrix"' not in text
    assert "no link measurements in this sweep" in text
    assert 'id="link-matrix"' in render_report(make_document(), "html")


def test_html_findings_table_carries_evidence_and_action_in_cost_order():
    text = render_report(make_document(), "html")
    rows = html_tables(text)["findings-table"][1:]
    assert [row[2] for row in rows] == ["slow_link", "slow_gpu", "ecc", "slow_nic", "throttled", "unchecked"]
    assert rows[1][:6] == ["fail", "drain", "slow_gpu", "node003:5", "gemm.tflops", "−15.0 % below"]
    # The figures sum up the evidence cell; the evidence itself is one click away, in a <details>.
    assert rows[1][6].startswith("630.0 vs 741.2")
    assert ("<details><summary>630.0 vs 741.2</summary><dl><dt>value</dt><dd>630.0</dd><dt>reference</dt>"
            "<dd>741.2</dd><dt>robust z</dt><dd>-7.5</dd><dt>basis</dt><dd>confirmed</dd><dt>evidence</dt>"
            "<dd>HW thermal slowdown active; SM clock 1410 of 1980 MHz</dd></dl></details>") in text
    assert rows[0][1] == "check the cable/switch port"


def test_html_escapes_a_malicious_host_name_everywhere():
    document = make_document()
    document["hosts"][0]["host"] = EVIL_HOST
    document["hosts"][1]["error"] = '"><img src=x onerror=alert(2)>'
    document["findings"][0]["host"] = EVIL_HOST
    document["links"][0]["a"] = EVIL_HOST
    document["impact"]["exclude"].append(EVIL_HOST)
    text = render_report(document, "html")
    assert EVIL_HOST not in text and "<script" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert EVIL_HOST in [row[0] for row in html_tables(text)["gpu-heatmap"][1:]]


def test_html_report_for_1000_hosts_of_8_gpus_is_small_and_quick():
    document = make_document()
    document["hosts"] = [host(f"node{n:04d}", [REFERENCE_TFLOPS - (n * 7 + gpu) % 13 for gpu in range(8)])
                         for n in range(1, 1001)]
    document["hosts"][41] = host("node0042", None, status="timeout", error="no answer in 600 s")
    document["links"] = [link(f"node{n:04d}", f"node{n % 1000 + 1:04d}", 9.4 - (n % 17) * 0.01, rail=rail)
                         for n in range(1, 1001) for rail in range(4)]
    document["findings"] = [finding("slow_gpu", "fail", f"node{n:04d}", 5.0 + n % 11, gpu=n % 8,
                                    metric="gemm.tflops", value=700.0, reference=REFERENCE_TFLOPS,
                                    evidence="SM clock low", action="drain") for n in range(1, 60)]
    started = time.perf_counter()
    text = render_report(document, "html")
    elapsed_s = time.perf_counter() - started
    assert len(text.encode()) < 5_000_000
    assert elapsed_s < 5.0
    tables = html_tables(text)
    # The 59 hosts named by a finding, then the 50 worst others; the other 891 are folded.
    heatmap = tables["gpu-heatmap"]
    assert len(heatmap) == 1 + 59 + 50 and [row[0] for row in heatmap[1:60]] == [
        f"node{n:04d}" for n in sorted(range(1, 60), key=lambda n: (-(5.0 + n % 11), n))]
    assert re.search(r"891 more hosts folded, none named by a finding; their worst devices [\d.]+–[\d.]+ % of",
                     text)
    # No link finding: the 50 hosts with the worst pairs are rows, the other 950 are folded.
    assert "link-matrix" not in tables and len(tables["link-hosts"]) == 1 + 50
    assert "950 more hosts folded" in text
    for fmt in ("text", "md", "json"):
        assert render_report(document, fmt)


# ------------------------------------------------------------------ findings of the current shape

UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
BUS_ID = "00000000:5D:00.0"
DRAIN_DETAIL = "drain the node and run the vendor diagnostics (dcgmi diag -r 3); replace it if it repeats"


def new_finding(kind: str, severity: str, host_name: str, *, basis: str, action: str, action_detail: str,
                evidence: str = "", peer: str | None = None, gpu: int | None = None, peer_gpu: int | None = None,
                gpu_uuid: str | None = None, pci_bus_id: str | None = None, metric: str | None = None,
                value: float | None = None, reference: float | None = None, unit: str | None = None,
                reference_source: str | None = None, deficit: float | None = None, robust_z: float | None = None,
                share: float | None = None) -> dict[str, Any]:
    """A finding with every key of the current contract, in its key order."""
    return {"kind": kind, "severity": severity, "host": host_name, "peer": peer, "gpu": gpu, "peer_gpu": peer_gpu,
            "gpu_uuid": gpu_uuid, "pci_bus_id": pci_bus_id, "metric": metric, "value": value,
            "reference": reference, "unit": unit, "reference_source": reference_source, "deficit_pct": deficit,
            "robust_z": robust_z, "share_pct": share, "confirmed": basis == "retest", "basis": basis,
            "evidence": evidence, "action": action, "action_detail": action_detail}


def make_new_document(results_compared: int = 412, results_not_compared: int = 12) -> dict[str, Any]:
    """Findings of every new kind and basis, a summary with the unchecked and comparison counts."""
    hosts = [host(name, [REFERENCE_TFLOPS] * 8) for name in ("node017", "node021", "node022", "node023")]
    hosts.append(host("node024", None, status="unreachable", error="No route to host"))
    findings = [
        new_finding("slow_gpu", "fail", "node017", gpu=3, gpu_uuid=UUID, pci_bus_id=BUS_ID, metric="gemm.tflops",
                    value=612.0, reference=742.0, unit="TFLOP/s", reference_source="fleet", deficit=17.5,
                    robust_z=-9.8, basis="retest", evidence="HW thermal slowdown active; SM clock 1410 of 1980 MHz",
                    action="drain", action_detail=DRAIN_DETAIL),
        new_finding("slow_link", "warn", "node017", peer="node017", gpu=3, peer_gpu=5, gpu_uuid=UUID,
                    metric="p2p.bandwidth", value=210.0, reference=380.0, unit="GB/s", reference_source="baseline",
                    deficit=44.7, robust_z=-12.1, basis="single_run", evidence="NVLink 3↔5 slow both ways",
                    action="inspect", action_detail="check nvidia-smi nvlink -s on the node"),
        new_finding("fleet_shift", "warn", "node[001-032]", metric="gemm.tflops", value=690.0, reference=742.0,
                    unit="TFLOP/s", reference_source="sku", deficit=7.0, share=72.0, basis="single_run",
                    evidence="most of the fleet is slower than the SKU figure", action="watch",
                    action_detail="compare driver and firmware versions with the last good sweep"),
        new_finding("missing_gpu", "fail", "node021", metric="facts.gpu_count", value=7, reference=8, unit="count",
                    reference_source="fleet", basis="facts", evidence="7 GPUs where its peers have 8",
                    action="reboot", action_detail="reboot the node; if the GPU stays off the bus, replace it"),
        new_finding("unchecked", "warn", "node022", gpu=1, pci_bus_id="00000000:1B:00.0", metric="membw.bandwidth",
                    basis="error_record", evidence="CUDA error: out of memory", action="inspect",
                    action_detail="free GPU memory or lower --max-gpu-mem, then sweep again"),
        new_finding("unchecked", "warn", "node023", gpu=0, metric="gemm.tflops", value=700.1, unit="TFLOP/s",
                    basis="comparison", evidence="no peers, no stored baseline and no SKU figure", action="watch",
                    action_detail="store a baseline for this GPU model"),
        new_finding("unchecked", "warn", "node024", basis="host_status", evidence="unreachable: No route to host",
                    action="inspect", action_detail="check that the node is up and reachable over SSH"),
        new_finding("throttled", "warn", "node017", gpu=3, gpu_uuid=UUID, pci_bus_id=BUS_ID, basis="telemetry",
                    evidence="hw_thermal_slowdown", action="reset_gpu", action_detail="reset the GPU when idle"),
    ]
    return {"schema": "gpudiag.sweep/1", "sweep_id": "20261122T080000Z-0a1b",
            "started_at": "2026-11-22T08:00:00Z", "finished_at": "2026-11-22T08:00:40Z",
            "hosts": hosts, "links": [], "findings": findings,
            "summary": {"hosts_total": 5, "hosts_ok": 4, "findings": len(findings), "exit_code": 1, "unchecked": 3,
                        "results_compared": results_compared, "results_not_compared": results_not_compared}}


SLOW_GPU_LINE = ("fail slow_gpu node017:3 (GPU-1a2b3c4d…, 00000000:5D:00.0) · gemm.tflops 612.0 TFLOP/s vs fleet "
                 "742.0 TFLOP/s (−17.5 % below, z -9.8) · confirmed by re-test · action: drain — " + DRAIN_DETAIL
                 + " · HW thermal slowdown active; SM clock 1410 of 1980 MHz")


def finding_lines(text: str) -> dict[str, str]:
    """The text report's finding lines by ``kind host`` (the first such line)."""
    lines = [line.strip() for line in text.splitlines() if line.startswith(("  fail", "  warn"))]
    found: dict[str, str] = {}
    for line in lines:
        _, kind, where = line.split(" ", 3)[:3]
        found.setdefault(f"{kind} {where}", line)
    return found


def test_text_shows_units_gpu_ids_action_verb_and_basis_of_a_new_finding():
    text = render_report(make_new_document(), "text")
    lines = finding_lines(text)
    assert lines["slow_gpu node017:3"] == SLOW_GPU_LINE
    assert lines["slow_link node017:3↔5"].startswith(
        "warn slow_link node017:3↔5 (3: GPU-1a2b3c4d…) · p2p.bandwidth 210.0 GB/s vs baseline 380.0 GB/s "
        "(−44.7 % below, z -12.1) · single run, not re-tested · action: inspect — check nvidia-smi nvlink -s")
    assert lines["fleet_shift node[001-032]"].startswith(
        "warn fleet_shift node[001-032] (share 72 % of hosts) · gemm.tflops 690.0 TFLOP/s vs SKU 742.0 TFLOP/s "
        "(−7.0 % below) · single run, not re-tested · action: watch — compare driver")
    assert lines["missing_gpu node021"].startswith(
        "fail missing_gpu node021 · facts.gpu_count 7 vs fleet 8 · host facts · action: reboot — reboot the node")
    assert lines["unchecked node022:1"].startswith(
        "warn unchecked node022:1 (00000000:1B:00.0) · membw.bandwidth · probe error · action: inspect — free")
    assert lines["unchecked node023:0"].startswith(
        "warn unchecked node023:0 · gemm.tflops 700.1 TFLOP/s · nothing to compare with · action: watch — store")
    assert lines["unchecked node024"].startswith("warn unchecked node024 · no usable measurements · action: inspect — ")
    assert lines["throttled node017:3"].startswith(
        "warn throttled node017:3 (GPU-1a2b3c4d…, 00000000:5D:00.0) · NVML telemetry · action: reset_gpu — reset")
    assert UUID not in text  # shortened in text


def test_text_headline_counts_unchecked_and_results_not_compared():
    first = render_report(make_new_document(), "text").splitlines()[0]
    assert first == ("sweep 20261122T080000Z-0a1b · 5 hosts · 4 ok · node024 unreachable · 8 findings (2 fail, "
                     "3 warn, 3 unchecked) · 12 results could not be compared (no peers, baseline or SKU figure)")
    assert "not a pass" not in first
    assert "could not be compared" not in render_report(make_new_document(results_not_compared=0), "text")
    single = render_report(make_new_document(results_not_compared=1), "text").splitlines()[0]
    assert single.endswith(" · 1 result could not be compared (no peers, baseline or SKU figure)")


def test_a_sweep_that_compared_nothing_says_plainly_it_is_not_a_pass_in_every_format():
    document = make_new_document(results_compared=0, results_not_compared=40)
    plain = "no result could be compared: this sweep is not a pass"
    first = render_report(document, "text").splitlines()[0]
    assert f"3 unchecked) · {plain} · 40 results could not be compared" in first
    assert f"**{plain}**" in render_report(document, "md")
    text = render_report(document, "html")
    assert f'<strong class="alert">{plain}</strong>' in text
    assert ('<strong class="alert">40 results could not be compared (no peers, baseline or SKU figure)</strong>'
            in text)
    # JSON is the document itself: its summary carries the counts a hook reads.
    summary = json.loads(render_report(document, "json"))["summary"]
    assert (summary["results_compared"], summary["results_not_compared"], summary["unchecked"]) == (0, 40, 3)


def test_markdown_row_of_a_new_finding_has_units_ids_verb_basis_and_detail():
    rows = markdown_table(render_report(make_new_document(), "md"), "severity")
    by_where = {row[3]: row for row in rows if row[2] != "throttled"}
    assert by_where["node017:3 (GPU-1a2b3c4d…, 00000000:5D:00.0)"] == [
        "fail", "drain", "slow_gpu", "node017:3 (GPU-1a2b3c4d…, 00000000:5D:00.0)", "gemm.tflops", "612.0 TFLOP/s",
        "fleet 742.0 TFLOP/s", "−17.5 % below", "-9.8", "confirmed by re-test",
        "HW thermal slowdown active; SM clock 1410 of 1980 MHz", DRAIN_DETAIL]
    assert by_where["node[001-032] (share 72 % of hosts)"][1:3] == ["watch", "fleet_shift"]
    assert by_where["node017:3↔5 (3: GPU-1a2b3c4d…)"][5:7] == ["210.0 GB/s", "baseline 380.0 GB/s"]
    assert {row[1] for row in rows} == {"drain", "inspect", "watch", "reboot", "reset_gpu"}
    assert [row[9] for row in rows if row[2] == "unchecked"] == [
        "probe error", "nothing to compare with", "no usable measurements"]
    headline = render_report(make_new_document(), "md").split("\n\n")[1]
    assert "8 findings (2 fail, 3 warn, 3 unchecked)" in headline and "12 results could not be compared" in headline


def test_html_findings_show_the_full_uuid_the_verb_as_a_badge_and_the_basis():
    text = render_report(make_new_document(), "html")
    rows = html_tables(text)["findings-table"]
    assert rows[0] == ["severity", "action", "kind", "where", "metric", "deficit", "evidence"]
    slow = next(row for row in rows[1:] if row[2] == "slow_gpu")
    assert slow == ["fail", "drain", "slow_gpu", f"node017:3 ({UUID}, {BUS_ID})", "gemm.tflops", "−17.5 % below",
                    f"{DRAIN_DETAIL}612.0 TFLOP/s vs fleet 742.0 TFLOP/svalue612.0 TFLOP/sreferencefleet 742.0 TFLOP/s"
                    "robust z-9.8basisconfirmed by re-testevidenceHW thermal slowdown active; SM clock 1410 of 1980 "
                    "MHz"]
    # what to do is shown before the <details> (the figures and evidence), never folded into them
    assert f'<td data-label="evidence" class="evidence"><p class="action-detail">{DRAIN_DETAIL}</p><details>' in text
    assert (f'<td data-label="where" title="GPU {UUID}, {BUS_ID}">node017:3<small class="ids"> ({UUID}, {BUS_ID})'
            "</small></td>") in text
    assert '<td data-label="action" class="action act-drain">drain</td>' in text
    assert '<td data-label="action" class="action act-reset_gpu">' in text
    assert "node[001-032] (share 72 % of hosts)" in [row[3] for row in rows[1:]]
    for basis in ("confirmed by re-test", "single run, not re-tested", "host facts", "probe error",
                  "nothing to compare with", "no usable measurements", "NVML telemetry"):
        assert any(f"basis{basis}" in row[6] for row in rows[1:]), basis
    summary = re.search(r'<p class="summary" id="summary">(.*?)</p>', text)
    assert summary is not None and "8 findings (2 fail, 3 warn, 3 unchecked)" in summary.group(1)


def test_html_shows_an_old_free_text_action_as_text_without_a_verb_badge():
    text = render_report(make_document(), "html")
    assert '<td data-label="action" class="action">check the cable/switch port</td>' in text
    assert '<td data-label="action" class="action act-drain">drain</td>' in text


def test_json_keeps_the_new_keys_in_their_order():
    document = make_new_document()
    loaded = json.loads(render_report(document, "json"))
    assert loaded == {**document, "findings": sort_findings(document["findings"])}
    assert list(loaded["findings"][0]) == list(document["findings"][0])
    assert loaded["findings"][0]["action"] == "drain" and loaded["findings"][0]["action_detail"] == DRAIN_DETAIL
    assert loaded["summary"]["results_not_compared"] == 12


def test_new_fields_are_escaped_in_html():
    document = make_new_document()
    evil = '"><script>alert(3)</script>'
    first = document["findings"][0]
    for key in ("gpu_uuid", "pci_bus_id", "unit", "reference_source", "basis", "action_detail", "action"):
        first[key] = f"{key}{evil}"
    text = render_report(document, "html")
    assert "<script" not in text and 'title="GPU gpu_uuid&quot;&gt;' in text
    for fmt in ("text", "md", "json"):
        assert render_report(document, fmt)


def test_an_old_finding_without_the_new_keys_renders_in_every_format():
    old = {"kind": "slow_gpu", "severity": "fail", "host": "node009", "gpu": 2, "metric": "gemm.tflops",
           "value": 612.0, "reference": 742.0, "deficit_pct": 17.5, "confirmed": False,
           "evidence": "SM clock low", "action": "drain the node and run dcgmi diag -r 3"}
    document = {"sweep_id": "old", "hosts": [host("node009", [612.0] * 8)], "findings": [old]}
    line = finding_lines(render_report(document, "text"))["slow_gpu node009:2"]
    assert line == ("fail slow_gpu node009:2 · gemm.tflops 612.0 vs 742.0 (−17.5 % below) · not confirmed"
                    " · action: drain the node and run dcgmi diag -r 3 · SM clock low")
    row = markdown_table(render_report(document, "md"), "severity")[0]
    assert row[1] == "drain the node and run dcgmi diag -r 3" and row[9] == "not confirmed" and row[11] == ""
    assert html_tables(render_report(document, "html"))["findings-table"][1][1] == old["action"]


# ----------------------------------------------------------------------------------- write_report


def test_write_report_replaces_the_file_in_one_step(tmp_path: Path):
    path = tmp_path / "report.html"
    path.write_text("old")
    write_report("new ✓\n", path)
    assert path.read_text(encoding="utf-8") == "new ✓\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would create it, not tempfile's 0600


def test_write_report_into_a_missing_folder_is_an_output_error(tmp_path: Path):
    with pytest.raises(OutputError, match="cannot write the report"):
        write_report("x", tmp_path / "missing" / "report.md")


def test_a_document_without_optional_parts_still_renders():
    minimal = {"sweep_id": "x", "hosts": [{"host": "node1", "status": "ok", "results": []}]}
    for fmt in ("text", "md", "json", "html"):
        assert render_report(copy.deepcopy(minimal), fmt)
    assert "No GPU or host device figures in this sweep." in render_report(minimal, "html")


def test_a_nic_port_or_xid_finding_says_what_it_rests_on_not_nvml_alone():
    from gpudiag.report.phrasing import basis_words

    assert basis_words({"kind": "nic_port", "basis": "telemetry"}) == "NIC port readings (sysfs)"
    assert basis_words({"kind": "xid", "basis": "telemetry"}) == "kernel log and NVML"
    assert basis_words({"kind": "throttled", "basis": "telemetry"}) == "NVML telemetry"
