"""``gpudiag probe`` on this machine, through click's CliRunner: exit codes, JSON and tables."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from gpudiag.cli.main import main

NO_GPU = not torch.cuda.is_available()


def _invoke(*args: str):
    return CliRunner().invoke(main, ["probe", *args], catch_exceptions=False)


def _records(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only path; this machine has a CUDA GPU")
def test_without_a_gpu_gemm_and_membw_run_on_the_cpu_and_gpu_probes_say_why_they_skipped():
    result = _invoke("--jsonl", "-", "--duration", "0.3")
    assert result.exit_code == 0, result.output
    records = _records(result.output)
    # telemetry's NIC port records (what this machine's network interfaces are) stand apart from its GPU ones
    by_probe = {r["probe"]: r for r in records if r["metric"] != "nic_port"}
    assert set(by_probe) == {"facts", "telemetry", "gemm", "membw", "p2p", "pcie", "smclock"}
    for probe in ("gemm", "membw"):
        assert by_probe[probe]["status"] == "ok" and by_probe[probe]["device"] == "cpu"
        assert by_probe[probe]["value"] > 0 and by_probe[probe]["samples"] >= 3
    assert by_probe["gemm"]["params"]["dtype"] == "fp32"
    for probe in ("telemetry", "p2p", "pcie", "smclock"):
        assert by_probe[probe]["status"] == "skipped" and by_probe[probe]["reason"]
        assert by_probe[probe]["value"] is None


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only path; this machine has a CUDA GPU")
def test_pause_without_a_gpu_runs_the_probes_as_usual():
    result = _invoke("--jsonl", "-", "--duration", "0.1", "--pause", "gemm", "pcie")
    assert result.exit_code == 0, result.output
    assert [(r["probe"], r["status"]) for r in _records(result.output)] == [("gemm", "ok"), ("pcie", "skipped")]


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only path; this machine has a CUDA GPU")
def test_the_table_shows_the_cpu_measurements_and_each_skip_reason():
    result = _invoke("gemm", "membw", "p2p", "--duration", "0.2")
    assert result.exit_code == 0, result.output
    assert "TFLOP/s" in result.output and "GB/s" in result.output
    assert "skipped: p2p.bandwidth on host: no CUDA device is visible" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["gemm", "nvlinks"], "unknown probe 'nvlinks'"),
        (["--duration", "0"], "--duration"),
        (["--max-gpu-mem", "0"], "--max-gpu-mem"),
        (["--dtype", "int8"], "--dtype"),
        (["--python", "/nonexistent/python3"], "--python"),
    ],
)
def test_bad_options_exit_2_with_one_line_naming_the_option(args, message):
    result = CliRunner().invoke(main, ["probe", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_a_python_without_torch_reports_the_torch_probes_as_skipped(tmp_path: Path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare_python = tmp_path / "bare" / "bin" / "python"
    result = _invoke("--jsonl", "-", "--python", str(bare_python), "gemm", "membw", "facts")
    assert result.exit_code == 0, result.output
    records = {r["probe"]: r for r in _records(result.output)}
    for probe in ("gemm", "membw"):
        assert records[probe]["status"] == "skipped"
        assert "torch is not importable" in records[probe]["reason"]
        assert str(bare_python) in records[probe]["reason"] and "gpudiag --python" in records[probe]["reason"]
    assert records["facts"]["status"] == "ok" and records["facts"]["details"]["torch_version"] is None


def test_a_bundle_that_prints_garbage_is_an_error_not_a_pass(tmp_path: Path):
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'Illegal instruction (core dumped)'\nexit 0\n")
    fake_python.chmod(0o755)
    result = CliRunner().invoke(main, ["probe", "--python", str(fake_python)])
    assert result.exit_code == 3
    assert "localhost line 1: not a JSON record" in result.output


def test_a_relative_python_path_is_taken_from_the_current_folder_not_the_bundles(tmp_path: Path, monkeypatch):
    (tmp_path / "py").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["probe", "--jsonl", "-", "--python", "./py", "facts"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[0])["status"] == "ok"
