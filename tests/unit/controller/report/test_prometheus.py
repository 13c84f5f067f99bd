"""``gpudiag sweep --prom-file``: the node_exporter textfile of a simulated sweep, read back with
prometheus_client's own parser, labels and values checked against the sweep document."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from gpudiag.cli.main import main
from gpudiag.report.prometheus import CHUNK_SAMPLES, write_prom_file

MODEL = "NVIDIA H100 80GB HBM3"
FAULTS = [{"kind": "slow_gpu", "host": "node003", "gpu": 5, "factor": 0.8},
          {"kind": "gpu_lost", "host": "node004", "gpu": 2},
          {"kind": "unreachable", "host": "node008"},
          {"kind": "slow_nic", "host": "node006", "factor": 0.5},
          {"kind": "slow_link", "a": "node001", "b": "node002", "factor": 0.5}]

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 8, "seed": 5, "faults": FAULTS}))
    return path


def _sweep(tmp_path: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(_fleet(tmp_path)), "-q", "--no-store",
                                       "--probes", "gemm,membw,pcie,telemetry", "--duration", "0.2", *extra],
                                catch_exceptions=False)
    return result.exit_code, result.output


def _parse(path: Path) -> Samples:
    """Every sample of the file by metric name, through prometheus_client's parser."""
    found: Samples = defaultdict(list)
    for family in text_string_to_metric_families(path.read_text()):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            found[sample.name].append((dict(sample.labels), sample.value))
    return found


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> dict[str, Any]:
    """One sweep written as a textfile and as a full sweep document."""
    folder = tmp_path_factory.mktemp("prom")
    prom, document = folder / "gpudiag.prom", folder / "sweep.json"
    code, output = _sweep(folder, "--links", "screen", "--prom-file", str(prom), "--json", str(document),
                          "--json-detail", "full")
    return {"code": code, "output": output, "samples": _parse(prom), "document": json.loads(document.read_text()),
            "folder": folder, "text": prom.read_text()}


def _identity(document: dict) -> dict[str, dict[str, Any]]:
    """Per GPU UUID: host, NVML index, PCI bus id and name, from the telemetry identity records."""
    found = {}
    for host in document["hosts"]:
        for record in host["results"]:
            if record["probe"] == "telemetry" and record["metric"] == "identity" and record["status"] == "ok":
                details = record["details"]
                found[record["gpu_uuid"]] = {"host": host["host"], "gpu": str(details["nvml_index"]),
                                             "pci_bus_id": details["pci_bus_id"], "modelName": details["name"]}
    return found


@pytest.mark.parametrize(("metric", "probe", "extra"), [("gpudiag_gemm_tflops", "gemm", "dtype"),
                                                        ("gpudiag_membw_gbps", "membw", None),
                                                        ("gpudiag_pcie_gbps", "pcie", "direction")])
def test_each_gpus_figure_carries_dcgm_exporters_labels_and_the_measured_value(swept, metric: str, probe: str,
                                                                              extra: str | None):
    document, identity = swept["document"], _identity(swept["document"])
    expected = {}
    for host in document["hosts"]:
        for record in host["results"]:
            if record["probe"] == probe and record["status"] == "ok":
                key = (record["gpu_uuid"], record["params"].get(extra) if extra else None)
                expected[key] = record["value"]
    samples = swept["samples"][metric]
    assert len(samples) == len(expected) == {"pcie": 2, "gemm": 1, "membw": 1}[probe] * (6 * 8 + 7)
    for labels, value in samples:
        uuid = labels["UUID"]
        assert value == pytest.approx(expected[(uuid, labels.get(extra) if extra else None)], rel=1e-12)
        gpu = identity[uuid]
        assert labels["Hostname"] == labels["host"] == gpu["host"]
        assert (labels["gpu"], labels["pci_bus_id"], labels["modelName"]) == (gpu["gpu"], gpu["pci_bus_id"], MODEL)
    if extra == "dtype":
        assert {labels["dtype"] for labels, _ in samples} == {"bf16"}
    if extra == "direction":
        assert {labels["direction"] for labels, _ in samples} == {"h2d", "d2h"}


def test_the_gpu_label_is_nvmls_index_where_cuda_renumbers_around_a_lost_gpu(swept):
    # node004's GPU 2 is lost: torch numbers the GPUs after it one lower (cuda:2 is NVML's GPU 3).
    document = swept["document"]
    node004 = next(host for host in document["hosts"] if host["host"] == "node004")
    cuda2 = next(r for r in node004["results"] if r["probe"] == "gemm" and r["device"] == "cuda:2")
    (labels,) = [labels for labels, _ in swept["samples"]["gpudiag_gemm_tflops"] if labels["UUID"] == cuda2["gpu_uuid"]]
    assert labels["gpu"] == "3"
    gpus = sorted(int(labels["gpu"]) for labels, _ in swept["samples"]["gpudiag_gemm_tflops"]
                  if labels["host"] == "node004")
    assert gpus == [0, 1, 3, 4, 5, 6, 7]


def test_findings_host_status_and_the_last_run_are_series(swept):
    samples, document = swept["samples"], swept["document"]
    findings = {(labels["kind"], labels["Hostname"], labels["gpu"]): labels for labels, value in
                samples["gpudiag_finding"] if value == 1}
    assert len(samples["gpudiag_finding"]) == len(document["findings"])
    slow = findings[("slow_gpu", "node003", "5")]
    assert (slow["severity"], slow["action"], slow["metric"]) == ("fail", "drain", "gemm.tflops")
    assert slow["UUID"].startswith("GPU-") and slow["pci_bus_id"]
    assert ("missing_gpu", "node004", "2") in findings and ("unchecked", "node008", "") in findings
    assert findings[("slow_nic", "node006", "")]["severity"] == "fail"
    status = {labels["host"]: labels["status"] for labels, value in samples["gpudiag_host_status"] if value == 1}
    assert status == {f"node{i:03d}": "unreachable" if i == 8 else "ok" for i in range(1, 9)}
    assert samples["gpudiag_last_run_exit_code"] == [({}, float(swept["code"]))] and swept["code"] == 1
    finished = datetime.fromisoformat(document["finished_at"].replace("Z", "+00:00")).timestamp()
    assert samples["gpudiag_last_run_timestamp_seconds"] == [({}, finished)]
    assert samples["gpudiag_last_run_info"] == [({"sweep_id": document["sweep_id"]}, 1.0)]


def test_a_finding_with_a_figure_carries_its_value_and_reference_with_the_findings_labels(swept):
    samples, document = swept["samples"], swept["document"]
    figured = [finding for finding in document["findings"]
               if finding["value"] is not None and finding["reference"] is not None]
    assert {finding["kind"] for finding in figured} == {"slow_gpu", "slow_nic", "slow_link"}
    findings = [labels for labels, _ in samples["gpudiag_finding"]]
    for name, field in (("gpudiag_finding_value", "value"), ("gpudiag_finding_reference", "reference")):
        got = {(labels["kind"], labels["Hostname"], labels["gpu"], labels["peer"]): (labels, value)
               for labels, value in samples[name]}
        assert len(got) == len(samples[name]) == len(figured)
        for finding in figured:
            gpu = "" if finding["gpu"] is None else str(finding["gpu"])
            labels, value = got[(finding["kind"], finding["host"], gpu, finding["peer"] or "")]
            assert value == pytest.approx(finding[field], rel=1e-12)
            assert (labels["unit"], labels["reference_source"]) == (finding["unit"], finding["reference_source"])
            # the finding's own labels, so the two join with gpudiag_finding
            assert {key: labels[key] for key in findings[0]} in findings
    value = {labels["kind"]: v for labels, v in samples["gpudiag_finding_value"]}
    reference = {labels["kind"]: v for labels, v in samples["gpudiag_finding_reference"]}
    assert value["slow_gpu"] < 0.85 * reference["slow_gpu"] and value["slow_nic"] < 0.6 * reference["slow_nic"]


def test_each_pair_is_one_series_per_rail_with_the_mean_of_its_runs(swept):
    runs = defaultdict(list)
    for link in swept["document"]["links"]:
        if link["value"] is not None:
            runs[(*sorted((link["a"], link["b"])), str(link["rail"]), link["backend"])].append(link["value"])
    assert any(len(values) > 1 for values in runs.values())  # the slow link was tested again
    samples = swept["samples"]["gpudiag_link_gbps"]
    assert len(samples) == len(runs)
    for labels, value in samples:
        values = runs[(labels["Hostname"], labels["peer"], labels["rail"], labels["backend"])]
        assert value == pytest.approx(sum(values) / len(values))
    slow = [value for labels, value in samples if "node006" in (labels["Hostname"], labels["peer"])
            or (labels["Hostname"], labels["peer"]) == ("node001", "node002")]
    fine = [value for labels, value in samples if "node006" not in (labels["Hostname"], labels["peer"])
            and (labels["Hostname"], labels["peer"]) != ("node001", "node002")]
    assert slow and max(slow) < 0.6 * min(fine)


def test_the_file_is_replaced_whole_and_leaves_no_temporary_file(swept, tmp_path: Path):
    prom = tmp_path / "gpudiag.prom"
    prom.write_text("# stale\n")
    code, _ = _sweep(tmp_path, "--links", "none", "--prom-file", str(prom))
    assert code == 1
    assert sorted(os.listdir(tmp_path)) == ["fleet.json", "gpudiag.prom"]
    text = prom.read_text()
    assert "stale" not in text and text.endswith("\n")
    samples = _parse(prom)
    assert len(samples["gpudiag_gemm_tflops"]) == 55 and samples["gpudiag_link_gbps"] == []


def test_a_compact_sweep_document_gives_the_same_series(swept, tmp_path: Path):
    """write_prom_file takes any sweep document: a compact one's telemetry tables name the GPUs."""
    compact = tmp_path / "compact.json"
    code, _ = _sweep(tmp_path, "--links", "none", "--json", str(compact))
    assert code == 1
    document = json.loads(compact.read_text())
    assert "telemetry" in document["hosts"][0]  # the identity is in the table, not in records
    prom = tmp_path / "from-document.prom"
    write_prom_file(document, str(prom))
    got = {(name, tuple(sorted(labels.items()))) for name, samples in _parse(prom).items()
           for labels, _ in samples if name.endswith(("_tflops", "_membw_gbps", "_pcie_gbps"))}
    want = {(name, tuple(sorted(labels.items()))) for name, samples in swept["samples"].items()
            for labels, _ in samples if name.endswith(("_tflops", "_membw_gbps", "_pcie_gbps"))}
    assert got == want and len(got) == 4 * 55


def test_a_family_longer_than_a_chunk_reads_back_as_one(tmp_path: Path):
    hosts = [{"host": f"n{i:05d}", "status": "ok", "facts": {"hostname": f"n{i:05d}.example", "gpu_model": MODEL},
              "results": [{"probe": "gemm", "device": f"cuda:{g}", "gpu_uuid": f"GPU-{i}-{g}", "status": "ok",
                           "metric": "tflops", "value": 700.0 + g, "params": {"dtype": "fp16"}} for g in range(8)]}
             for i in range(CHUNK_SAMPLES // 8 + 3)]
    prom = tmp_path / "big.prom"
    write_prom_file({"sweep_id": "s", "finished_at": "2026-01-01T00:00:00Z", "hosts": iter(hosts),
                     "summary": {"exit_code": 0}}, str(prom))
    families = {family.name: family for family in text_string_to_metric_families(prom.read_text())}
    gemm = families["gpudiag_gemm_tflops"].samples
    assert len(gemm) == 8 * len(hosts) and prom.read_text().count("# TYPE gpudiag_gemm_tflops gauge") == 1
    # No telemetry: the GPU is named by its CUDA index and the host's model, its bus id unknown.
    assert gemm[-1].labels == {"host": "n01252", "Hostname": "n01252.example", "gpu": "7", "UUID": "GPU-1252-7",
                               "pci_bus_id": "", "modelName": MODEL, "dtype": "fp16"}
    assert gemm[-1].value == 707.0 and families["gpudiag_last_run_timestamp_seconds"].samples[0].value == 1767225600


def test_without_telemetry_the_gpu_label_is_nvmls_index_from_the_facts_map_never_cudas_shifted_number(
        tmp_path: Path):
    # NVML counts 8 GPUs, CUDA 7 (one lost): the facts map names cuda:2 as NVML's GPU 3; cuda:5 is
    # not in the map, so its NVML index is unknown and its label empty (CUDA's 5 would be a neighbour)
    facts = {"hostname": "n1.example", "gpu_model": MODEL, "gpu_count": 7, "nvml_gpu_count": 8,
             "gpus": [{"cuda_index": 2, "nvml_index": 3, "gpu_uuid": "GPU-b", "pci_bus_id": "00000000:3B:00.0"}]}
    results = [{"probe": "gemm", "device": f"cuda:{g}", "gpu_uuid": uuid, "status": "ok", "metric": "tflops",
                "value": 700.0, "params": {"dtype": "bf16"}} for g, uuid in ((2, "GPU-b"), (5, "GPU-e"))]
    prom = tmp_path / "lost.prom"
    write_prom_file({"sweep_id": "s", "finished_at": "2026-01-01T00:00:00Z",
                     "hosts": [{"host": "n1", "status": "ok", "facts": facts, "results": results}],
                     "summary": {"exit_code": 0}}, str(prom))
    families = {family.name: family for family in text_string_to_metric_families(prom.read_text())}
    labels = {sample.labels["UUID"]: sample.labels for sample in families["gpudiag_gemm_tflops"].samples}
    assert (labels["GPU-b"]["gpu"], labels["GPU-b"]["pci_bus_id"]) == ("3", "00000000:3B:00.0")
    assert labels["GPU-e"]["gpu"] == ""


@pytest.mark.parametrize(("path", "message"), [("metrics.txt", "reads only files ending in .prom"),
                                               ("missing/gpudiag.prom", "does not exist")])
def test_a_prom_file_that_could_not_be_used_is_refused_before_any_node_is_touched(tmp_path: Path, path: str,
                                                                                 message: str):
    document = tmp_path / "sweep.json"
    code, output = _sweep(tmp_path, "--prom-file", str(tmp_path / path), "--json", str(document))
    assert code == 2 and message in output and "--prom-file" in output
    assert not document.exists()
