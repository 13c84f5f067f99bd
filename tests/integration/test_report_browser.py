"""The HTML report in a real headless browser (Debian's chromium): it loads from a file with no
network, renders to a non-blank screenshot of the requested size, and its DOM holds the heat map and
the findings."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from html_tables import HtmlTables

from gpudiag.report import render_report, write_report

CHROMIUM_TIMEOUT_S = 60
WINDOW = (1400, 1000)
HOSTS = [f"gpu{n:02d}" for n in range(1, 13)]
SLOW_HOST, SLOW_GPU, SLOW_TFLOPS = "gpu04", 6, 629.9
DOWN_HOST = "gpu11"
SLOW_UUID, SLOW_BUS_ID = "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "00000000:9A:00.0"


def gemm(gpu: int, value: float) -> dict[str, Any]:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "metric": "tflops", "value": value, "unit": "TFLOP/s",
            "samples": 20, "cv": 0.004, "status": "ok"}


def make_document() -> dict[str, Any]:
    """Twelve hosts of 8 GPUs, one GPU at 85 %, one host unreachable, a slow link, an impact estimate."""
    hosts = []
    for name in HOSTS:
        if name == DOWN_HOST:
            hosts.append({"host": name, "status": "unreachable", "error": "No route to host", "duration_s": 3.0,
                          "facts": {}, "results": []})
            continue
        values = [741.0 + (gpu * 3 + len(hosts)) % 5 * 0.4 for gpu in range(8)]
        if name == SLOW_HOST:
            values[SLOW_GPU] = SLOW_TFLOPS
        hosts.append({"host": name, "status": "ok", "error": None, "duration_s": 12.0,
                      "facts": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8},
                      "results": [gemm(gpu, value) for gpu, value in enumerate(values)]})
    links = [{"a": a, "b": b, "rail": 0, "backend": "tcp", "metric": "gbps", "phase": "screen",
              "value": 5.3 if (a, b) == ("gpu01", "gpu02") else 9.4}
             for a, b in zip(HOSTS[:6], HOSTS[1:6] + HOSTS[:1], strict=True)]
    # One finding of the current shape; the others as documents stored before it still hold them.
    findings = [
        {"kind": "slow_gpu", "severity": "fail", "host": SLOW_HOST, "peer": None, "gpu": SLOW_GPU, "peer_gpu": None,
         "gpu_uuid": SLOW_UUID, "pci_bus_id": SLOW_BUS_ID, "metric": "gemm.tflops", "value": SLOW_TFLOPS,
         "reference": 741.4, "unit": "TFLOP/s", "reference_source": "fleet", "deficit_pct": 15.0, "robust_z": -9.8,
         "share_pct": None, "confirmed": True, "basis": "retest",
         "evidence": "HW thermal slowdown active; SM clock 1410 of 1980 MHz", "action": "drain",
         "action_detail": "drain the node and run dcgmi diag -r 3; replace the GPU if it repeats"},
        {"kind": "slow_link", "severity": "fail", "host": "gpu01", "peer": "gpu02", "gpu": None,
         "metric": "net.gbps", "value": 5.3, "reference": 9.4, "deficit_pct": 43.6, "robust_z": -12.0,
         "confirmed": True, "evidence": "both ends fine with other partners", "action": "check the cable"},
        {"kind": "unchecked", "severity": "warn", "host": DOWN_HOST, "peer": None, "gpu": None, "metric": None,
         "value": None, "reference": None, "deficit_pct": None, "robust_z": None, "confirmed": True,
         "evidence": "unreachable: No route to host", "action": "check that the node is up"},
    ]
    return {"schema": "gpudiag.sweep/1", "sweep_id": "20261121T101500Z-beef", "started_at": "2026-11-21T10:15:00Z",
            "finished_at": "2026-11-21T10:15:41Z", "hosts": hosts, "links": links, "findings": findings,
            "summary": {"hosts_total": 12, "hosts_ok": 11, "findings": 3, "exit_code": 1, "unchecked": 1,
                        "results_compared": 80, "results_not_compared": 8},
            "impact": {"slowdown_pct": 15.0, "recovered_pct": 14.9, "exclude": [SLOW_HOST], "hosts_total": 12,
                       "slowest": {"host": SLOW_HOST, "gpu": SLOW_GPU, "metric": "gemm.tflops",
                                   "value": SLOW_TFLOPS, "reference": 741.4}}}


def chromium() -> str:
    # A missing browser fails rather than skips: a skipped test checks nothing.
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is not installed; run scripts/install-test-deps as root first")
    return path


def run_chromium(report: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Chromium headless on the report file, cut off from the network, with a throwaway profile."""
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
               *extra, report.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=False,
                          cwd=profile)


def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, payload) of every chunk of a PNG; asserts the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    chunks, offset = [], 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset:offset + 4])
        chunks.append((data[offset + 4:offset + 8], data[offset + 8:offset + 8 + length]))
        offset += 12 + length
    return chunks


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(render_report(make_document(), "html"), path)
    return path


def test_the_report_renders_to_a_screenshot_of_the_window_size_that_is_not_blank(report_file: Path,
                                                                                  tmp_path: Path):
    screenshot = tmp_path / "report.png"
    done = run_chromium(report_file, tmp_path, f"--screenshot={screenshot}")
    assert screenshot.is_file(), f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    data = screenshot.read_bytes()
    chunks = png_chunks(data)
    assert chunks[0][0] == b"IHDR"
    width, height = struct.unpack(">II", chunks[0][1][:8])
    assert (width, height) == WINDOW
    # A flat page compresses to almost nothing; tables, text and colours do not.
    assert len(data) > 20_000
    pixels = zlib.decompress(b"".join(payload for kind, payload in chunks if kind == b"IDAT"))
    assert len(set(pixels)) > 64


def test_the_rendered_dom_holds_the_heatmap_rows_and_the_findings(report_file: Path, tmp_path: Path):
    done = run_chromium(report_file, tmp_path, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    parser = HtmlTables()
    parser.feed(done.stdout)
    heatmap = parser.tables["gemm-heatmap"]
    assert len(heatmap) == 1 + len(HOSTS)
    rows = {row[0]: row[1:] for row in heatmap[1:]}
    assert rows[SLOW_HOST][SLOW_GPU] == f"{SLOW_TFLOPS:.1f}"
    assert rows[DOWN_HOST] == ["unreachable: No route to host"]
    findings = parser.tables["findings-table"][1:]
    assert [(row[2], row[3]) for row in findings] == [
        ("slow_link", "gpu01 ↔ gpu02"), ("slow_gpu", f"{SLOW_HOST}:{SLOW_GPU} ({SLOW_UUID}, {SLOW_BUS_ID})"),
        ("unchecked", DOWN_HOST)]
    assert findings[1][1] == "drain" and findings[1][5:7] == [f"{SLOW_TFLOPS:.1f} TFLOP/s", "fleet 741.4 TFLOP/s"]
    assert findings[1][9] == "confirmed by re-test" and findings[0][1] == "check the cable"
    assert len(parser.tables["link-matrix"]) == 1 + 6
    assert "job slowdown 15.0 %, excluding gpu04 recovers 14.9 %" in done.stdout
    assert "3 findings (2 fail, 1 unchecked)" in done.stdout
    assert "8 results could not be compared (no peers, baseline or SKU figure)</strong>" in done.stdout
