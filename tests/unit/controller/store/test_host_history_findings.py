"""``Store.host_history``: the findings naming a host in each sweep (its own and a link's it is an
end of; never a fleet's, a group's or the network's, whatever hosts they list), and its GPU figures
at the value the sweep judged them where a finding names one figure of a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpudiag.store.historyrows import judged_figures
from gpudiag.store.store import Store

FACTS = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "driver": "550.54.15",
         "driver_version": "550.54.15", "cuda_version": "12.4", "torch_version": "2.4.1", "gpu_memory_mib": 81559}
GEMM = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "steady"}


def _result(gpu: int, probe: str, value: float, unit: str, params: dict[str, Any]) -> dict[str, Any]:
    metric = "tflops" if probe == "gemm" else "bandwidth"
    return {"probe": probe, "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": metric, "value": value,
            "unit": unit, "samples": 20, "cv": 0.004, "status": "ok", "reason": None, "params": dict(params),
            "details": {}}


def _host(name: str, gemm: tuple[float, float]) -> dict[str, Any]:
    results = [_result(gpu, "gemm", value, "TFLOP/s", GEMM) for gpu, value in enumerate(gemm)]
    results += [_result(gpu, "pcie", 54.0, "GB/s", {"direction": direction, "buffer_mib": 256})
                for gpu in (0, 1) for direction in ("h2d", "d2h")]
    return {"host": name, "status": "ok", "error": None, "duration_s": 10.0, "facts": dict(FACTS), "results": results}


def _finding(kind: str, severity: str, host: str | None, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "severity": severity, "host": host, "peer": None, "gpu": None, "metric": None,
            "value": None, "unit": None, "reference": None, "deficit_pct": None, "robust_z": None, "confirmed": True,
            "evidence": f"{kind} evidence", "action": "inspect", **fields}


FINDINGS = [
    _finding("fleet_shift", "fail", "node[001-003]", metric="gemm.tflops", deficit_pct=30.0),
    _finding("fleet_shift", "fail", "node001", metric="gemm.tflops", deficit_pct=30.0),  # a group of one, folded
    _finding("slow_fabric_link", "fail", None, metric="fabric.perftest.rail0", deficit_pct=40.0,
             fabric_link={"rail": 0, "switches": ["leaf1", "spine1"], "ports": None}, hosts_behind=["node001"]),
    _finding("degraded_pcie", "fail", "node001", gpu=0, metric="pcie.bandwidth", value=27.0, unit="GB/s",
             deficit_pct=50.0),
    _finding("slow_gpu", "fail", "node001", gpu=1, metric="gemm.tflops", value=600.5, unit="TFLOP/s",
             deficit_pct=19.0),
    _finding("slow_link", "warn", "node002", peer="node001", metric="link.perftest", value=200.0, unit="Gbit/s",
             deficit_pct=45.0),
    _finding("unchecked", "warn", "node003"),
]


def _stored(tmp_path: Path) -> Path:
    path = tmp_path / "gpudiag.db"
    document = {"schema": "gpudiag.sweep/1", "sweep_id": "20261121T101500Z-3f2a", "started_at": "2026-11-21T10:15:00Z",
                "finished_at": "2026-11-21T10:15:41Z",
                "hosts": [_host("node001", (740.0, 590.0)), _host("node002", (741.0, 739.0)),
                          {"host": "node003", "status": "unreachable", "error": "refused", "duration_s": 3.0,
                           "facts": {}, "results": []}],
                "links": [], "findings": FINDINGS,
                "summary": {"hosts_total": 3, "hosts_ok": 2, "findings": len(FINDINGS), "exit_code": 1}}
    with Store.open(path) as store:
        store.finish_sweep(document["sweep_id"], document)
    return path


def test_the_findings_naming_a_host_are_its_own_and_its_links_never_the_fleets_or_the_fabrics(tmp_path: Path):
    with Store.open(_stored(tmp_path), readonly=True) as store:
        node001, node002, node003 = (store.host_history(host)[0] for host in ("node001", "node002", "node003"))
    # most costly first: fail before warn, the largest deficit first
    assert [(f["kind"], f["host"], f["gpu"]) for f in node001["findings"]] == [
        ("degraded_pcie", "node001", 0), ("slow_gpu", "node001", 1), ("slow_link", "node002", None)]
    assert node001["findings"][2] == FINDINGS[5]  # the whole finding, as the document has it
    assert [f["kind"] for f in node002["findings"]] == ["slow_link"]
    assert [(f["kind"], node003["status"]) for f in node003["findings"]] == [("unchecked", "unreachable")]


def test_a_gpu_figure_a_finding_names_is_judged_at_the_findings_value_and_an_ambiguous_one_is_not(tmp_path: Path):
    with Store.open(_stored(tmp_path), readonly=True) as store:
        row = store.host_history("node001")[0]
    # the slow GPU's one GEMM figure takes the finding's value; of GPU 0's two PCIe figures (h2d, d2h)
    # which one the finding judged is not stored: neither changes
    assert row["judged"] == [{"metric": "gemm.tflops", "params": GEMM, "gpu": 1, "first_pass": 590.0, "value": 600.5}]
    gemm = next(f for f in row["figures"] if f["metric"] == "gemm.tflops")
    assert gemm["per_gpu"] == [[0, 740.0], [1, 590.0]]  # the stored figures stay the first pass's (the trend's)
    judged = {(f["metric"], f["params"].get("direction")): f for f in judged_figures(row)}
    assert judged[("gemm.tflops", None)]["per_gpu"] == [[0, 740.0], [1, 600.5]]
    assert (judged[("gemm.tflops", None)]["min"], judged[("gemm.tflops", None)]["median"]) == (600.5, 670.25)
    assert judged[("pcie.bandwidth", "h2d")]["per_gpu"] == [[0, 54.0], [1, 54.0]]
