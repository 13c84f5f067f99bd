"""The HTML report for the person on call: every finding's action detail (what to do, the command)
is shown outside its <details>, which keep the figures and the evidence; every figure of a finding
is the text report's (``finding_row``: a deficit "−17.5 % below"); the findings are never in a
scroll box of their own; the device grid marks its worst and findings columns (which a phone puts
before the devices); links under the title lead to each section."""

from __future__ import annotations

import html
import re
from typing import Any

from gpudiag.report import render_report
from gpudiag.report.html import reports_dir
from gpudiag.report.phrasing import finding_row
from gpudiag.words import MINUS

DRAIN = "drain the node and run the vendor diagnostics on GPU 3 (dcgmi diag -r 3 -i 3); replace it if it repeats"
LINK = "for the network team: read perfquery -x 5 10 (r2-leaf03); until it is fixed, keep jobs under one leaf"


def gpu_host(name: str, tflops: float = 740.0) -> dict[str, Any]:
    results = [{"probe": "gemm", "device": f"cuda:{gpu}", "metric": "tflops", "value": tflops - gpu, "unit": "TFLOP/s",
                "status": "ok", "params": {"dtype": "bf16"}} for gpu in range(4)]
    return {"host": name, "status": "ok", "error": None, "facts": {"gpu_model": "NVIDIA H100 80GB HBM3"},
            "results": results}


def document() -> dict[str, Any]:
    findings = [
        {"kind": "slow_gpu", "severity": "fail", "host": "node002", "gpu": 3, "metric": "gemm.tflops",
         "value": 612.04, "reference": 742.0, "unit": "TFLOP/s", "reference_source": "fleet", "deficit_pct": 17.52,
         "robust_z": -9.84, "basis": "retest", "evidence": "SM clock 1410 of 1980 MHz", "action": "drain",
         "action_detail": DRAIN},
        {"kind": "slow_fabric_link", "severity": "fail", "host": None, "metric": "fabric.perftest.rail2",
         "value": 70.0, "reference": 100.0, "unit": "%", "reference_source": "pairs", "deficit_pct": 29.9,
         "basis": "retest", "evidence": "12 of 12 streams slow", "action": "inspect", "action_detail": LINK,
         "fabric_link": {"rail": 2, "switches": ["r2-leaf03", "r2-spine04"], "ports": ["12", "3"]}},
        {"kind": "unchecked", "severity": "warn", "host": "node003", "basis": "host_status",
         "evidence": "unreachable: No route to host", "action": "inspect",
         "action_detail": "check that the node is up and reachable over SSH"},
        # an older free-text action: no detail to show
        {"kind": "ecc", "severity": "fail", "host": "node001", "gpu": 1, "evidence": "2 uncorrected ECC errors",
         "action": "check the GPU's memory"},
    ]
    return {"schema": "gpudiag.sweep/1", "sweep_id": "20261129T030000Z-0c41", "hosts": [
        gpu_host("node001"), gpu_host("node002"),
        {"host": "node003", "status": "unreachable", "error": "No route to host", "results": []}],
            "links": [], "findings": findings}


def rows(text: str) -> dict[str, str]:
    """Each findings row's HTML by its kind."""
    return {re.search(r'data-label="kind">([^<]*)<', row).group(1): row
            for row in re.findall(r"<tr class=[^>]*>.*?</tr>", text.split('id="findings-table"', 1)[1])
            if 'data-label="kind"' in row}


def test_every_action_detail_is_shown_outside_the_details_which_keep_the_evidence():
    doc = document()
    by_kind = rows(render_report(doc, "html"))
    for finding in doc["findings"]:
        row = by_kind[finding["kind"]]
        shown, _, folded = row.partition("<details>")
        assert "<dt>evidence</dt>" in folded and "action detail" not in folded, row
        detail = finding.get("action_detail")
        if detail:
            assert shown.count('<p class="action-detail">') == 1, row
            assert f'<p class="action-detail">{detail}</p>' in shown.replace("&#x27;", "'"), row
        else:
            assert "action-detail" not in row, row


def test_every_figure_of_a_finding_is_the_text_reports():
    doc = document()
    by_kind = rows(render_report(doc, "html"))
    for finding in doc["findings"]:
        cells = finding_row(finding, full_uuid=True)
        value, reference, deficit, robust_z = cells[5], cells[6], cells[7], cells[8]
        row = by_kind[finding["kind"]]
        assert f'<td data-label="deficit">{deficit}</td>' in row, row
        for name, text in (("value", value), ("reference", reference), ("robust z", robust_z)):
            if text:
                assert f"<dt>{name}</dt><dd>{text}</dd>" in row, (name, row)
        # no other number than those the text report writes: the row's digits all come from its cells
        numbers = set(re.findall(r"\d+(?:\.\d+)?", html.unescape(re.sub(r"<[^>]*>", " ", row))))
        assert numbers <= set(re.findall(r"\d+(?:\.\d+)?", " ".join(cells))), row
    slow = by_kind["slow_gpu"]
    assert f'<td data-label="deficit">{MINUS}17.5 % below</td>' in slow
    assert "<summary>612.0 TFLOP/s vs fleet 742.0 TFLOP/s</summary>" in slow and "<dd>-9.8</dd>" in slow


def test_the_findings_are_in_the_pages_scroll_and_the_grid_marks_its_worst_and_findings_columns():
    text = render_report(document(), "html")
    assert re.search(r'<section id="findings">\s*<h2>[^<]*</h2>\s*<table id="findings-table">', text)
    css = (reports_dir() / "report.css").read_text(encoding="utf-8")
    assert "findings-scroll" not in text and "max-height" not in css
    assert ('<th class="worst">worst</th><th class="kinds">findings</th></tr></thead>' in text
            and 'style="--devices:4"' in text)
    assert '<td class="status" colspan="5">unreachable: No route to host</td>' in text
    contents = re.search(r'<nav id="contents">(.*?)</nav>', text).group(1)
    assert re.findall(r'href="#(\w+)"', contents) == ["findings", "heatmap", "hosts", "links"]
    assert ">4 findings<" in contents
    for section in ("findings", "heatmap", "hosts", "links"):
        assert f'<section id="{section}">' in text
