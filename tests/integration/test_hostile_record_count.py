"""A node that prints 40,000 records differing only in a parameter (each under the output caps) over
real SSH: the controller keeps none of them past the bound of records per probe, device and
metric, says so in one error record on that node (its GEMM on that GPU unchecked, exit 3, never a
pass), leaves the other host's verdict alone, writes no series twice in the textfile, and stays
small (the controller runs under an address-space limit and its peak memory is measured)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from limited_run import TRACED, run_limited
from sshd_hosts import SshdFleet

from gpudiag.records import MAX_RECORDS_PER_KEY

ROOT = Path(__file__).resolve().parents[2]
UUID = "GPU-11111111-2222-3333-4444-555555555555"
RECORDS = 40_000
# Measured with this test (alone; tracemalloc on): with every record kept, 618 MiB resident and 204 MiB
# allocated by Python at the peak, 27 s; with the bound, 176 MiB and 58 MiB, 3-6 s. In the suite the
# resident peak once read 281 MiB: the kernel's ru_maxrss counted the forking pytest worker's memory
# (limited_run now reads the controller's own VmHWM). The bound is held by what Python allocated, which no
# neighbour moves; the resident limit only keeps the machine safe.
TRACED_LIMIT_MIB = 100
PEAK_RSS_LIMIT_KIB = 400 * 1024


def _hostile_output(path: Path) -> Path:
    """A facts record of one H100 and RECORDS GEMM records of it that differ only in ``k``."""
    facts = {"hostname": "node01", "gpu_count": 1, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_uuids": [UUID]}
    lines = [json.dumps({"probe": "facts", "device": "host", "gpu_uuid": None, "metric": "gpu_count", "value": 1,
                         "unit": "count", "samples": 0, "cv": None, "status": "ok", "reason": None, "params": {},
                         "details": facts})]
    lines += [json.dumps({"probe": "gemm", "device": "cuda:0", "gpu_uuid": UUID, "metric": "tflops", "value": 700.0,
                          "unit": "TFLOP/s", "samples": 20, "cv": 0.004, "status": "ok", "reason": None,
                          "params": {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192 + i, "mode": "concurrent"},
                          "details": {}}) for i in range(RECORDS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _no_comparison(tmp_path: Path) -> Path:
    """Thresholds under which this machine's load is no finding of the honest host (whose real
    bundle finds no GPU: its GEMM is unchecked, as on any host without one)."""
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"schema": "gpudiag.thresholds/1", "host_load_per_cpu": {"value": 1e6, "unit": "ratio"},
                                "min_peers": {"value": 100000, "unit": "count"},
                                "small_fleet_min_hosts": {"value": 100000, "unit": "count"}}))
    return path


def _wrapper(tmp_path: Path, fleet: SshdFleet, output: Path) -> str:
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\ncase "$SSH_CONNECTION" in\n'
                       f'  *" {fleet.host("node01").address} "*) exec cat {output} ;;\n'
                       f'  *) exec {sys.executable} "$@" ;;\nesac\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_40000_records_differing_only_in_a_parameter_are_one_error_record_and_cost_little(make_sshd_fleet,
                                                                                          tmp_path: Path):
    assert RECORDS > MAX_RECORDS_PER_KEY
    fleet = make_sshd_fleet(2)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt")
    document, prom = tmp_path / "sweep.json", tmp_path / "sweep.prom"
    peak_file = tmp_path / "traced-peak"
    run = run_limited([sys.executable, "-c", TRACED, str(peak_file), "sweep", "--hosts", str(hosts),
                       "--ssh-config", str(config), "--known-hosts", str(known), "--python",
                       _wrapper(tmp_path, fleet, _hostile_output(tmp_path / "hostile.jsonl")),
                       "--probes", "facts,gemm", "--links", "none", "--no-store", "--json", str(document),
                       "--thresholds", str(_no_comparison(tmp_path)),
                       "--json-detail", "full", "--prom-file", str(prom), "-q"], timeout_s=240, cwd=ROOT)
    traced_mib = int(peak_file.read_text()) / 2**20
    print(f"controller: {run.wall_s:.1f} s, peak {run.peak_rss_kib / 1024:.0f} MiB, traced {traced_mib:.1f} MiB")
    assert run.returncode == 3, run.stdout[-3000:] + run.stderr[-3000:]
    swept = json.loads(document.read_text())
    hostile = next(host for host in swept["hosts"] if host["host"] == "node01")
    gemm = [record for record in hostile["results"] if record["probe"] == "gemm"]
    assert len(gemm) == 1 and gemm[0]["status"] == "error" and gemm[0]["value"] is None
    assert f"printed {RECORDS} gemm tflops records for cuda:0" in gemm[0]["reason"]
    hostile_findings = [finding for finding in swept["findings"] if finding["host"] == "node01"]
    assert [(f["kind"], f["gpu"]) for f in hostile_findings] == [("unchecked", 0)]  # its own verdict: no pass
    assert "40000 gemm tflops records" in hostile_findings[0]["evidence"]
    # the honest host is judged on its own records alone (no GPU here: its GEMM unchecked, nothing else)
    assert {(f["kind"], f["metric"]) for f in swept["findings"] if f["host"] == "node02"} <= {("unchecked", None),
                                                                                          ("unchecked", "gemm.tflops")}
    assert traced_mib < TRACED_LIMIT_MIB and run.peak_rss_kib < PEAK_RSS_LIMIT_KIB, (traced_mib, run.peak_rss_kib)
    series = [line for line in prom.read_text().splitlines() if line and not line.startswith("#")]
    assert not [line for line, count in Counter(line.rsplit(" ", 1)[0] for line in series).items() if count > 1]
    assert not [line for line in series if line.startswith("gpudiag_gemm_tflops")]
