"""Report text on a terminal is wrapped to its width; through a pipe one finding is one line, so that
``grep node017`` finds all of it. ``gpudiag report`` as a process, its stdout a real pseudo-terminal
or a pipe."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

EVIDENCE = ("node017's GEMM fell 17 % below the fleet in both runs while every NVML reason stayed clear; "
            "its PCIe link trained at x16 gen5 and its SM clock held 1980 MHz")


def _document(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({
        "schema": "gpudiag.sweep/1", "sweep_id": "s1",
        "hosts": [{"host": "node017", "status": "ok"}, {"host": "node018", "status": "ok"}],
        "findings": [{"kind": "slow_gpu", "severity": "fail", "host": "node017", "gpu": 3, "metric": "gemm.tflops",
                      "value": 612.0, "unit": "TFLOP/s", "reference": 742.0, "reference_source": "fleet",
                      "deficit_pct": 17.5, "robust_z": -9.8, "confirmed": True, "basis": "retest",
                      "action": "drain", "action_detail": "drain the node and run gpudiag triage on it",
                      "evidence": EVIDENCE}]}))
    return path


def _env(columns: int) -> dict[str, str]:
    return {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb"}


def test_through_a_pipe_each_finding_is_one_line_whatever_the_width(tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "gpudiag", "report", str(_document(tmp_path))],
                          capture_output=True, text=True, env=_env(40), timeout=60, check=True)
    (line,) = [line for line in done.stdout.splitlines() if "node017" in line and "slow_gpu" in line]
    assert EVIDENCE in line and "612.0 TFLOP/s" in line and len(line) > 200


def test_on_a_terminal_findings_wrap_to_its_width_without_splitting_a_figure(tmp_path: Path):
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "gpudiag", "report", str(_document(tmp_path))],
                                   stdout=secondary, stderr=subprocess.PIPE, env=_env(60))
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal's other end closed: the process ended
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=60) == 0
    finally:
        os.close(primary)
    lines = b"".join(chunks).decode().replace("\r\n", "\n").splitlines()
    assert lines and max(len(line) for line in lines) <= 60
    start = next(i for i, line in enumerate(lines) if "slow_gpu" in line)
    finding = [lines[start]] + [line for line in lines[start + 1:start + 12] if line.startswith("      ")]
    assert len(finding) > 3  # wrapped, continuation lines indented under it
    joined = " ".join(line.strip() for line in finding)
    assert "612.0 TFLOP/s" in joined and "742.0 TFLOP/s" in joined and " ".join(EVIDENCE.split()) in joined
    assert all("612.0" not in line or "612.0 TFLOP/s" in line for line in finding)


def _on_terminal(argv: list[str], columns: int) -> tuple[int, str, str]:
    """``argv`` as a process whose stderr is a pseudo-terminal: (exit status, stdout, the terminal's text)."""
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=secondary, env=_env(columns), text=True)
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        stdout, _ = process.communicate(timeout=60)
    finally:
        os.close(primary)
    return process.returncode, stdout, b"".join(chunks).decode(errors="replace")


def test_a_triage_on_a_terminal_shows_its_probes_time_left(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 2}))
    code, stdout, terminal = _on_terminal([sys.executable, "-m", "gpudiag", "triage", "node001", "--simulate",
                                           str(fleet), "--no-store", "--duration", "30"], 120)
    assert code == 0 and "gpudiag triage node001: nothing found" in stdout
    assert "probing node001 (30 s of load per load probe): at most" in terminal
    assert "seconds of the probes' limit" in terminal
    assert re.search(r"\d:\d\d:\d\d", terminal)  # the bar's time columns
