"""What the controller writes from a node's words: strict JSON (a non-finite figure the controller
computed is null), markdown cells that are data (no HTML, no link), terminal output that no node
string can turn into rich markup or an escape sequence."""

from __future__ import annotations

import io
import json
import math
from datetime import datetime, timezone
from typing import Any

from rich.console import Console

from gpudiag.findings import Finding
from gpudiag.records import ProbeResult
from gpudiag.report import render_report
from gpudiag.report.console import render_probe_results
from gpudiag.report.document import document_chunks
from gpudiag.report.tables import Column, TableSpec, print_tables, split_table
from gpudiag.run.fanout import SweepResult
from gpudiag.run.outcome import HostOutcome

MARKUP = "[bold red]loud[/] [link=https://evil.example]click[/link]"
HTML = "<script>alert(1)</script> <img src=x onerror=alert(1)> [click](javascript:alert(1)) a|b & c"


def strict(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: the bare token {token}")

    return json.loads(text, parse_constant=refuse)


def result_with(findings: tuple[Finding, ...], impact: dict[str, Any] | None = None) -> SweepResult:
    now = datetime(2026, 11, 21, 10, 15, tzinfo=timezone.utc)
    host = HostOutcome("node001", "ok", None, 1.0, {"gpu_model": "NVIDIA H100 80GB HBM3"},
                       [ProbeResult("gemm", "cuda:0", "tflops", 700.0, "TFLOP/s", "ok")])
    return SweepResult("20261121T101500Z-3f2a", now, now, (host,), findings, impact=impact)


def test_a_non_finite_figure_the_controller_computed_is_null_in_the_sweep_document_and_the_json_report():
    odd = Finding(kind="slow_gpu", severity="warn", host="node001", evidence="x", action="watch", gpu=0,
                  value=math.nan, reference=math.inf, robust_z=-math.inf, metric="gemm.tflops")
    result = result_with((odd,), {"slowdown_pct": math.nan, "exclude": []})
    for detail in ("full", "compact"):
        document = strict("".join(document_chunks(result, detail)))
        (found,) = document["findings"]
        assert (found["value"], found["reference"], found["robust_z"]) == (None, None, None)
        assert document["impact"]["slowdown_pct"] is None
    report = strict(render_report(result.to_dict(), "json"))
    assert report["findings"][0]["value"] is None


def test_a_node_string_in_a_markdown_cell_is_data_never_html_or_a_link():
    finding = Finding(kind="unchecked", severity="warn", host="node001", evidence=HTML + " " + MARKUP,
                      action="inspect", basis="error_record")
    text = render_report(result_with((finding,)).to_dict(records=False), "md")
    row = next(line for line in text.splitlines() if line.startswith("| warn"))
    assert "<script>" not in row and "<img" not in row and "&lt;script&gt;alert(1)&lt;/script&gt;" in row
    assert "](javascript:" not in row and "[click]\\(javascript:alert(1))" in row
    assert "a\\|b &amp; c" in row and row.count(" | ") == 11  # twelve cells, the '|' of the text escaped


def test_a_node_string_is_never_read_as_rich_markup():
    facts = ProbeResult("facts", "host", "gpu_count", 0, "count", "ok",
                        details={"hostname": MARKUP, "gpu_count": 0, "cpu_count": 2})
    failed = ProbeResult("gemm", "cpu", "tflops", None, None, "error", reason=f"CUDA error: {MARKUP}")
    measured = ProbeResult("membw", "cpu", "bandwidth", 8.0, "GB/s", "ok", params={"memory": MARKUP})
    stream = io.StringIO()
    console = Console(file=stream, width=200, force_terminal=True, color_system="truecolor")
    render_probe_results([facts, failed, measured], console)
    printed = stream.getvalue()
    assert printed.count("[bold red]loud[/]") == 3  # the facts line, the error line, the table cell
    assert "\x1b]8;" not in printed  # no hyperlink made of [link=...]
    spec = TableSpec(f"Telemetry ({MARKUP})", (Column("GPU", "name"), Column("value")), (("gpu:0", "1"),),
                     caption=MARKUP)
    stream = io.StringIO()
    print_tables(Console(file=stream, width=200, force_terminal=True), split_table(spec, 200))
    shown = stream.getvalue()  # title and caption wrap at the table's width: their words stay text
    assert shown.count("[bold") == 2 and shown.count("[link=") == 2 and "\x1b]8;" not in shown
