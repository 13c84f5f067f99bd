"""A finding read as a view (gpudiag.findings.FindingView, what a sweep's reports and store read in
its process) is its JSON object key for key and in order, fabric parts too; the sweep's summary
hands its findings over so, and renders, stores and exports as it did with the dicts."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpudiag import findings as order
from gpudiag.findings import Action, Basis, FabricPart, Finding, FindingView, FindingViews, Kind, Severity, unchecked
from gpudiag.report import render_report
from gpudiag.report.phrasing import sort_findings
from gpudiag.report.prometheus import prom_text
from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.request import LinkOptions, Reach, SweepRequest
from gpudiag.run.runtime import Runtime
from gpudiag.run.sweep import run_sweep
from gpudiag.sim.standin import FleetFile
from gpudiag.store.store import Store

FINDINGS = [
    unchecked("node01", "unreachable", "node01: Connection refused"),
    Finding(kind=Kind.SLOW_GPU, severity=Severity.FAIL, host="node02", evidence="e", action=Action.DRAIN, gpu=3,
            gpu_uuid="GPU-1", metric="gemm.tflops", value=600.0, reference=700.0, unit="TFLOP/s",
            deficit_pct=14.3, robust_z=-9.0, confirmed=True, basis=Basis.RETEST),
    Finding(kind=Kind.SLOW_FABRIC_LINK, severity=Severity.WARN, host=None, evidence="e", action=Action.INSPECT,
            fabric=(FabricPart(rail=2, switches=("r2-leaf03", "r2-spine04"), ports=("12", "3")),)),
    Finding(kind=Kind.SLOW_SWITCH, severity=Severity.WARN, host=None, evidence="e", action=Action.INSPECT,
            fabric=(FabricPart(rail=0, switch="r0-spine02"),)),
    Finding(kind=Kind.SLOW_FABRIC_LINK, severity=Severity.WARN, host=None, evidence="e", action=Action.INSPECT,
            fabric=(FabricPart(rail=1, switches=("a", "b")), FabricPart(rail=1, switches=("a", "c")))),
]


@pytest.mark.parametrize("finding", FINDINGS, ids=lambda f: str(f.kind))
def test_a_view_reads_as_the_findings_json_object_key_for_key_in_order(finding: Finding):
    view = FindingView(finding)
    as_dict = finding.to_dict()
    assert list(view) == list(as_dict) and len(view) == len(as_dict)
    assert dict(view) == as_dict and view == as_dict
    assert json.dumps(dict(view)) == json.dumps(as_dict)
    assert view.get("no such field") is None and "no such field" not in view
    with pytest.raises(KeyError):
        view["no such field"]  # noqa: B018 - the lookup is what is tested


def test_views_are_made_as_they_are_read_in_the_findings_order():
    views = FindingViews(FINDINGS)
    assert len(views) == len(FINDINGS)
    assert [dict(view) for view in views] == [finding.to_dict() for finding in FINDINGS]
    assert [dict(view) for view in views[1:3]] == [finding.to_dict() for finding in FINDINGS[1:3]]
    assert views[-1].finding is FINDINGS[-1]


FLEET = {"nodes": 8, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": 0.02},
         "faults": [{"kind": "slow_gpu", "host": "node003", "gpu": 1, "factor": 0.8},
                    {"kind": "slow_nic", "host": "node006", "factor": 0.6},
                    {"kind": "unreachable", "host": "node008"}]}


def test_the_summarys_views_render_store_and_export_as_the_documents_dicts(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps(FLEET))
    request = SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(fleet))),
                           sweep=SweepOptions(ProbeOptions(names=("facts", "gemm"), duration_s=0.1)),
                           links=LinkOptions(mode="screen"))
    result = run_sweep(request, Runtime())
    summary = result.summary()
    document = json.loads(json.dumps(result.to_dict(records=False), default=str))
    assert isinstance(summary["findings"], FindingViews) and len(summary["findings"]) >= 3
    assert {f["kind"] for f in summary["findings"]} >= {"slow_gpu", "slow_nic", "unchecked"}
    for fmt in ("text", "md"):
        assert render_report(summary, fmt, outputs=["x"]) == render_report(document, fmt, outputs=["x"])
    # (the textfile reads each host's records: the summary's hosts unpack theirs)
    assert "".join(prom_text(summary)) == "".join(prom_text(json.loads(json.dumps(result.to_dict(), default=str))))
    with Store.open(tmp_path / "a.db") as store:
        store.finish_sweep(result.sweep_id, summary)
        stored = store.load_document(result.sweep_id)["findings"]
    assert stored == [finding.to_dict() for finding in result.findings] == document["findings"]


def test_sorting_one_part_of_the_key_at_a_time_gives_the_order_of_the_whole_key():
    rng = random.Random(7)
    findings = [Finding(kind=rng.choice([Kind.SLOW_GPU, Kind.UNCHECKED, Kind.SLOW_LINK]),
                        severity=rng.choice(list(Severity)), host=rng.choice(["n1", "n2", "n10", None]),
                        peer=rng.choice([None, "n3", "n1"]), gpu=rng.choice([None, 0, 3, 7]),
                        metric=rng.choice([None, "gemm.tflops", "membw.bandwidth"]),
                        deficit_pct=rng.choice([None, 0.0, 4.5, 12.0, 12.0]), evidence=rng.choice("abc"),
                        action=Action.INSPECT) for _ in range(400)]
    assert order.sort_by_cost(findings, FindingView) == sorted(findings, key=lambda f: order.cost_order(f.to_dict()))
    dicts = [finding.to_dict() for finding in reversed(findings)]
    by_key = sorted(dicts, key=order.cost_order)
    assert sort_findings(dicts) == by_key == sort_findings(by_key)
