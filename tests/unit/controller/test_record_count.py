"""Records a node prints that differ only in a parameter: at most MAX_RECORDS_PER_KEY of one probe,
device and metric are read; past it, none of them is kept and one error record says how many
there were (that measurement unchecked on that node). The textfile writes each series once, at
its lowest figure."""

from __future__ import annotations

import json
import re

from gpudiag.records import MAX_RECORDS_PER_KEY, read_probe_output
from gpudiag.report.prometheus import prom_text


def _gemm(k: int, value: float = 700.0, device: str = "cuda:0") -> dict:
    return {"probe": "gemm", "device": device, "gpu_uuid": None, "metric": "tflops", "value": value,
            "unit": "TFLOP/s", "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
            "params": {"dtype": "bf16", "m": 8192, "n": 8192, "k": k, "mode": "concurrent"}, "details": {}}


def _output(records: list[dict]) -> str:
    return "\n".join(json.dumps(record) for record in records) + "\n"


def test_up_to_the_bound_every_record_is_read():
    output = read_probe_output(_output([_gemm(k) for k in range(1, MAX_RECORDS_PER_KEY + 1)]), "node01")
    assert len(output.results) == MAX_RECORDS_PER_KEY and all(r.ok for r in output.results)


def test_past_the_bound_none_is_kept_and_one_error_record_names_the_count():
    flood = [_gemm(k) for k in range(1, MAX_RECORDS_PER_KEY + 2)]
    output = read_probe_output(_output([*flood, _gemm(1, device="cuda:1")]), "node01")
    (kept, error) = output.results
    assert (kept.device, kept.ok) == ("cuda:1", True)  # another GPU's measurement is its own
    assert (error.probe, error.device, error.metric, error.status, error.value) == (
        "gemm", "cuda:0", "tflops", "error", None)
    assert error.reason == (f"node01: the node printed {MAX_RECORDS_PER_KEY + 1} gemm tflops records for cuda:0, "
                            f"more than any node prints (at most {MAX_RECORDS_PER_KEY}): none is used")


def test_the_textfile_writes_each_series_once_at_its_lowest_figure():
    host = {"host": "node01", "status": "ok", "error": None, "facts": {"hostname": "node01"},
            "results": [_gemm(8192, 700.0), _gemm(4096, 610.0), _gemm(2048, 690.0)]}
    findings = [{"kind": "unchecked", "severity": "warn", "host": "node01", "action": "inspect"}] * 2
    text = "".join(prom_text({"sweep_id": "s", "hosts": [host], "links": [], "findings": findings,
                              "summary": {"exit_code": 3}}))
    gemm = [line for line in text.splitlines() if line.startswith("gpudiag_gemm_tflops{")]
    assert len(gemm) == 1 and gemm[0].endswith(" 610.0")
    samples = [re.sub(r" \S+$", "", line) for line in text.splitlines() if line and not line.startswith("#")]
    assert len(samples) == len(set(samples))
