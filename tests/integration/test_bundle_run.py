"""The probe bundle run for real, as a node runs it: ``python -m probes`` from the bundle root."""

import json
import subprocess
import sys
import time

import pytest
import torch

from gpudiag.bundle import locate_bundle
from probes.runner import DEADLINE_GRACE_S, EXIT_DEADLINE

NO_GPU = not torch.cuda.is_available()


def _run_bundle(*args: str, timeout_s: float = 120) -> tuple[subprocess.CompletedProcess, list[dict]]:
    done = subprocess.run([sys.executable, "-m", "probes", *args], cwd=locate_bundle().root,
                          capture_output=True, text=True, timeout=timeout_s)
    return done, [json.loads(line) for line in done.stdout.splitlines()]


def test_every_probe_reports_and_nothing_is_silently_missing():
    done, records = _run_bundle("--duration", "0.2")
    assert done.returncode == 0, done.stderr
    assert {r["probe"] for r in records} == {"facts", "telemetry", "gemm", "membw", "p2p", "pcie", "smclock"}
    for record in records:
        assert record["status"] in ("ok", "skipped", "error")
        if record["metric"] == "nic_port" and record["status"] == "ok":
            # a port read from sysfs: its value is its rate, None where it reports none (a virtual NIC,
            # a link that is down), and its state is always there
            assert record["value"] == record["details"]["rate_gbps"] and record["details"]["state"]
        else:
            assert (record["value"] is None) == (record["status"] != "ok")


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only path; this machine has a CUDA GPU")
def test_the_cpu_gemm_honours_its_duration():
    started = time.monotonic()
    done, records = _run_bundle("gemm", "--duration", "2")
    elapsed = time.monotonic() - started
    (gemm,) = records
    assert gemm["status"] == "ok" and gemm["device"] == "cpu"
    # calibration and warm-up come on top of the two timed seconds, however long a loaded machine
    # takes for them; the timed part is what the record's own figures add up to
    assert elapsed >= 2.0
    params, details = gemm["params"], gemm["details"]
    per_sample = 2 * params["m"] * params["n"] * params["k"] * details["runs_per_sample"] / 1e12  # TFLOP
    # the timed part is what the samples add up to: between all of them at the fastest sample's rate and all
    # at the slowest's, whatever a busy machine did to each; it ran at least the two seconds asked, and ended
    # with the sample that crossed them, less what the machine took between samples (an ignored --duration
    # falls outside one side or the other)
    fastest_s, slowest_s = (gemm["samples"] * per_sample / details[rate] for rate in ("tflops_max", "tflops_min"))
    assert fastest_s <= 2.0 + per_sample / details["tflops_min"] and slowest_s >= 1.6, (fastest_s, slowest_s)
    # the samples' spread is reported (its size is the machine's: two busy cores vary a lot)
    assert gemm["samples"] >= 5 and gemm["cv"] is not None and gemm["cv"] >= 0


def test_the_overall_deadline_bounds_the_run_and_later_probes_are_skipped():
    started = time.monotonic()
    done, records = _run_bundle("gemm", "membw", "--duration", "30", "--deadline", "1.5")
    elapsed = time.monotonic() - started
    if done.returncode == EXIT_DEADLINE:
        # Two busy cores: the CPU GEMM's first, uninterruptible matrix product outlived the
        # deadline and its grace, and the watchdog ended the run, naming the probe it stopped.
        (gemm,) = records
        assert gemm["status"] == "error" and "overall deadline passed" in gemm["reason"], gemm
        assert elapsed < 1.5 + DEADLINE_GRACE_S + 30  # the rest is the interpreter and torch starting
        return
    assert done.returncode == 0, done.stderr[-2000:]
    assert elapsed < 10.0  # 1.5 s of deadline; the rest is the interpreter and torch starting
    gemm, membw = records
    assert gemm["status"] == "ok" or "deadline" in gemm["reason"]
    assert membw["status"] == "skipped" and "deadline passed before this probe started" in membw["reason"]
