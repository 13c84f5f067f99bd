"""One figure, one meaning: every rendering of one sweep (the text on the terminal, the markdown
and HTML reports, the Prometheus textfile) quotes each finding's value, reference and deficit as
the sweep document holds them, the links table quotes each pair's figure (the median of its
runs) against the reference its group was judged by (the document's ``link_groups``), and the
impact quotes the slowest GPU's figure as its finding does. A deficit is written "−x % below"
and a share "x % of" what, everywhere."""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.links.groups import judged_gbps
from gpudiag.words import deficit_text, figure

FLEET = {"nodes": 16, "seed": 11, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": 0.02},
         "faults": [{"kind": "slow_gpu", "host": "node003", "gpu": 1, "factor": 0.8},
                    {"kind": "nvlink_down", "host": "node005", "gpu": 2, "link": 4},
                    {"kind": "degraded_pcie", "host": "node007", "gpu": 6, "width": 8},
                    {"kind": "throttled", "host": "node009", "gpu": 0, "reason": "hw_thermal", "factor": 0.7},
                    {"kind": "slow_nic", "host": "node011", "factor": 0.6},
                    {"kind": "slow_link", "a": "node002", "b": "node014", "factor": 0.5}]}


def _run(*args: str):
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("one-figure")
    fleet, store, document, prom = (folder / name for name in ("fleet.json", "gpudiag.db", "sweep.json", "s.prom"))
    fleet.write_text(json.dumps(FLEET))
    text = _run("sweep", "--simulate", str(fleet), "--store", str(store), "--json", str(document),
                "--prom-file", str(prom), "--links", "full", "-q")
    assert text.exit_code == 1, text.output
    loaded = json.loads(document.read_text())
    renderings = {"text": text.output, "prom": prom.read_text()}
    for form in ("md", "html"):
        out = folder / f"report.{form}"
        assert _run("report", str(document), "--format", form, "-o", str(out)).exit_code == 0
        renderings[form] = out.read_text()
    return {"document": loaded, **renderings}


def _measured(document: dict) -> list[dict]:
    return [f for f in document["findings"] if f.get("value") is not None and f.get("deficit_pct") is not None]


def test_the_sweep_found_what_was_planted(swept):
    kinds = {(f["kind"], f["host"]) for f in swept["document"]["findings"]}
    assert {("slow_gpu", "node003"), ("nvlink_down", "node005"), ("degraded_pcie", "node007"),
            ("throttled", "node009"), ("slow_nic", "node011"), ("slow_link", "node002")} <= kinds


@pytest.mark.parametrize("form", ["text", "md", "html"])
def test_each_finding_quotes_the_documents_value_reference_and_deficit(swept, form: str):
    rendered = html.unescape(swept[form]) if form == "html" else swept[form]
    for finding in _measured(swept["document"]):
        for words in (figure(finding["value"], finding["unit"]), figure(finding["reference"], finding["unit"]),
                      deficit_text(finding["deficit_pct"])):
            assert words in rendered, (form, finding["kind"], finding["host"], words)


def test_no_rendering_writes_a_bare_signed_percentage(swept):
    """A deficit says "below" and a share says "of": no "(-17.5 %)" and no "(82.5 %)"."""
    for form in ("text", "md"):
        assert not re.search(r"\(-?\d+(\.\d+)? %[),]", swept[form]), form


def test_the_textfile_carries_each_findings_value_and_reference(swept):
    samples: dict[str, list[float]] = defaultdict(list)
    for line in swept["prom"].splitlines():
        match = re.match(r"(gpudiag_(?:network_)?finding_(?:value|reference))\{(.*)\} (\S+)$", line)
        if match:
            samples[match.group(1).replace("network_", "")].append(float(match.group(3)))
    for finding in _measured(swept["document"]):
        assert finding["value"] in samples["gpudiag_finding_value"], finding["kind"]
        assert finding["reference"] in samples["gpudiag_finding_reference"], finding["kind"]


def _pair_figures(document: dict) -> dict[tuple[str, str, int], float]:
    runs: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for link in document["links"]:
        if link.get("value") is not None:
            runs[(*sorted((link["a"], link["b"])), link["rail"])].append(link["value"])
    return {key: judged_gbps(values) for key, values in runs.items()}


def test_the_links_table_quotes_each_pairs_figure_against_its_groups_judged_reference(swept):
    document = swept["document"]
    figures = _pair_figures(document)
    references = {group["rail"]: group["reference_gbps"] for group in document["link_groups"]}
    lines = [line for line in swept["text"].splitlines() if re.match(r"\s+node\d+ ↔ node\d+\s+rail \d+ ", line)]
    assert len(lines) == 10
    for line in lines:
        a, b, rail, value, reference, deficit = re.match(
            r"\s+(\S+) ↔ (\S+)\s+rail (\d+)\s+([\d.]+) vs ([\d.]+) Gbit/s \((−[\d.]+ % below)\)", line).groups()
        judged, level = figures[(a, b, int(rail))], references[int(rail)]
        assert (float(value), float(reference)) == (round(judged, 1), round(level, 1)), line
        assert deficit == deficit_text(100 * (1 - judged / level)), line
    # the slow link's finding and its row of the table quote one figure and one reference
    slow = next(f for f in document["findings"] if f["kind"] == "slow_link")
    row = next(line for line in lines if "node002 ↔ node014" in line)
    assert f"{slow['value']:.1f} vs {slow['reference']:.1f} Gbit/s ({deficit_text(slow['deficit_pct'])})" in row


def test_the_impact_quotes_the_slowest_gpu_as_its_finding_does(swept):
    # The slowest GPU here is the throttled one, its clock and its GEMM each about 30 % below,
    # judged on its re-test: its finding leads with whichever fell further, and quotes the other
    # as "also gemm.tflops −x % below". Either way the GEMM figure is the re-test's, as the impact's is.
    document = swept["document"]
    slowest = document["impact"]["slowest"]
    finding = next(f for f in document["findings"] if f["host"] == slowest["host"] and f["gpu"] == slowest["gpu"]
                   and f.get("value") is not None)
    if finding["metric"] == "gemm.tflops":
        assert (slowest["value"], slowest["reference"]) == (finding["value"], finding["reference"])
    else:
        deficit = 100 * (1 - slowest["value"] / slowest["reference"])
        assert f"also gemm.tflops {deficit_text(deficit)}" in finding["evidence"]


def test_the_html_grid_reads_each_gpu_against_the_reference_the_sweep_judged_it_by(swept):
    document = swept["document"]
    gemm = next(entry for entry in document["references"] if entry["probe"] == "gemm")
    slow = next(f for f in document["findings"] if f["kind"] == "slow_gpu")
    share = round(100 * slow["value"] / gemm["reference"], 1)
    assert f"GEMM {figure(slow['value'], slow['unit'])} ({share:.1f} %" in html.unescape(swept["html"])
    assert gemm["reference"] == slow["reference"]  # the finding was judged against that entry's reference
