"""``gpudiag history HOST``: the trend of a host's figures across stored simulated sweeps, slow
degradation flagged with its figures and sweeps, repairs recorded with ``--repaired`` that
restart the trend, and bad input refused with exit 2."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main

FAST = ("--probes", "gemm", "--duration", "0.2", "--links", "none", "-q")


def _run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner(env={"COLUMNS": "100", **(env or {})}).invoke(main, list(args), catch_exceptions=False)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _sweep(folder: Path, store: Path, factor: float | None, name: str) -> dict[str, Any]:
    """One simulated sweep of 4 nodes into ``store``, node002's GPU 3 at ``factor`` of its speed
    (None: healthy), with no noise; returns its sweep id and that GPU's GEMM figure."""
    faults = [] if factor is None else [{"kind": "slow_gpu", "host": "node002", "gpu": 3, "factor": factor}]
    fleet, document = folder / f"{name}.json", folder / f"{name}.out.json"
    fleet.write_text(json.dumps({"nodes": 4, "seed": 7, "noise": {"gemm_cv": 0.0}, "faults": faults}))
    result = _run("sweep", "--simulate", str(fleet), *FAST, "--store", str(store), "--json", str(document))
    assert result.exit_code in (0, 1), result.output
    data = json.loads(document.read_text())
    host = next(h for h in data["hosts"] if h["host"] == "node002")
    gpu3 = next(r["value"] for r in host["results"] if r["probe"] == "gemm" and r["device"] == "cuda:3")
    return {"sweep_id": data["sweep_id"], "gpu3": gpu3}


def _store(folder: Path, name: str, factors: list[float | None]) -> tuple[Path, list[dict[str, Any]]]:
    store = folder / f"{name}.db"
    return store, [_sweep(folder, store, factor, f"{name}{index}") for index, factor in enumerate(factors)]


@pytest.fixture(scope="module")
def declining(tmp_path_factory) -> tuple[Path, list[dict[str, Any]]]:
    """node002's GPU 3 loses 2 % of its GEMM speed a sweep: healthy, then 0.98, 0.96, 0.94."""
    return _store(tmp_path_factory.mktemp("declining"), "declining", [None, 0.98, 0.96, 0.94])


def _history_json(store: Path, host: str = "node002", *extra: str) -> dict[str, Any]:
    result = _run("history", host, "--store", str(store), "--json", "-", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_gpu_losing_2_percent_a_sweep_is_flagged_with_its_figures_and_sweeps(declining):
    store, sweeps = declining
    result = _run("history", "node002", "--store", str(store))
    assert result.exit_code == 0  # information, not a failed run
    first, latest = sweeps[0], sweeps[3]
    assert latest["gpu3"] / first["gpu3"] == pytest.approx(0.94, abs=0.002)
    # No noise: every run gives the true figure (the latest sweep's re-test of the slide too), so
    # the line is exact.
    slope = (latest["gpu3"] - first["gpu3"]) / 3
    assert (f"slow degradation: node002: GPU 3's gemm.tflops bf16 falls 2.0 % a sweep ({-slope:.4g} TFLOP/s), a "
            f"fitted 6.0 % over the 4 sweeps it rests on (threshold 5 %), from {first['gpu3']:.4g} TFLOP/s (sweep "
            f"{first['sweep_id']}) to {latest['gpu3']:.4g} TFLOP/s (sweep {latest['sweep_id']}) on the fitted line; "
            f"per-sweep noise 0.1 %, so the slope is") in _flat(result.output)
    assert "times its uncertainty (real from 3)" in _flat(result.output)
    row = next(line for line in result.output.splitlines() if line.startswith("│ gemm.tflops bf16 TFLOP/s"))
    assert re.search(r"│ +3: -6\.0 % │ +4 │$", row), row  # the worst GPU's fitted change and the sweeps
    assert "slow degradation: GPU 3" in _flat(result.output.split("trend since the last repair")[1])

    trend = _history_json(store)["trend"]
    assert trend["degraded"] is True and (trend["threshold_pct"], trend["slope_z"]) == (5.0, 3.0)
    (flag,) = trend["degradations"]
    assert (flag["figure"], flag["gpu"], flag["sweeps"], flag["unit"]) == ("gemm.tflops bf16", 3, 4, "TFLOP/s")
    assert flag["change_pct"] == pytest.approx(-6.0, abs=0.2)
    fit = flag["fit"]
    assert fit["sweeps"] == 4 and fit["fitted_change_pct"] == pytest.approx(-6.0, abs=0.2)
    assert fit["slope_pct_per_sweep"] == pytest.approx(-2.0, abs=0.1) and fit["slope_z"] < -3
    assert (flag["first"]["sweep_id"], flag["latest"]["sweep_id"]) == (first["sweep_id"], latest["sweep_id"])
    (figure,) = trend["figures"]
    assert not figure["median"]["degraded"] and abs(figure["median"]["fit"]["fitted_change_pct"]) < 1
    assert figure["worst_gpu"]["gpu"] == 3 and trend["unfitted"] == []


def test_a_healthy_host_beside_it_and_a_short_window_are_not_flagged(declining):
    store, _ = declining
    healthy = _run("history", "node001", "--store", str(store))
    assert healthy.exit_code == 0
    assert ("no slow degradation: no figure of node001 shows a fitted fall of 5 % or more over 3 or more sweeps, "
            "its slope 3 times its noise, in the sweeps shown" in _flat(healthy.output))
    short = _run("history", "node002", "--store", str(store), "--limit", "2")
    assert short.exit_code == 0 and "slow degradation:" not in short.output.replace("(5 %", "")
    assert "no trend judged yet: 2 sweeps of node002 in the sweeps shown" in _flat(short.output)


def test_the_threshold_is_data(declining, tmp_path: Path):
    store, _ = declining
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(json.dumps({"schema": "gpudiag.thresholds/1",
                                      "history_degradation": {"value": 7, "unit": "percent"}}))
    assert _history_json(store, "node002", "--thresholds", str(thresholds))["trend"]["degraded"] is False
    thresholds.write_text(json.dumps({"schema": "gpudiag.thresholds/1",
                                      "history_min_sweeps": {"value": 2, "unit": "count"}}))
    refused = _run("history", "node002", "--store", str(store), "--thresholds", str(thresholds))
    assert refused.exit_code == 2 and "history_min_sweeps at least 3" in refused.output
    # the slope's bar is data too: a slope must be this many standard errors below flat
    assert _history_json(store, "node002")["trend"]["degraded"] is True
    thresholds.write_text(json.dumps({"schema": "gpudiag.thresholds/1",
                                      "history_slope_z": {"value": 1000, "unit": "sigma"}}))
    assert _history_json(store, "node002", "--thresholds", str(thresholds))["trend"]["degraded"] is False
    thresholds.write_text(json.dumps({"schema": "gpudiag.thresholds/1",
                                      "history_slope_z": {"value": 0, "unit": "sigma"}}))
    refused = _run("history", "node002", "--store", str(store), "--thresholds", str(thresholds))
    assert refused.exit_code == 2 and "history_slope_z must be above 0" in refused.output


def test_a_single_noisy_dip_is_not_a_slow_degradation(tmp_path: Path):
    store, sweeps = _store(tmp_path, "dip", [None, None, None, 0.93])
    result = _run("history", "node002", "--store", str(store))
    assert result.exit_code == 0
    assert "no slow degradation: no figure of node002 shows" in _flat(result.output)
    trend = _history_json(store)["trend"]
    gpu3 = next(t for t in trend["figures"][0]["gpus"] if t["gpu"] == 3)
    # It fell further than the declining GPU, but in one sweep: the line through all four is
    # shallower than the threshold, and the dip scatters far from it.
    assert gpu3["change_pct"] == pytest.approx(-7.0, abs=0.2) and gpu3["fit"]["fitted_change_pct"] > -5
    assert trend["degraded"] is False and sweeps[3]["gpu3"] < sweeps[2]["gpu3"]


def test_a_repair_restarts_the_trend_and_shows_in_the_timeline(declining, tmp_path: Path):
    source, sweeps = declining
    store = tmp_path / "repaired.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            shutil.copy(f"{source}{suffix}", f"{store}{suffix}")
    recorded = _run("history", "node002", "--repaired", "replaced GPU 3 (RMA 12345)", "--gpu", "3",
                    "--store", str(store), env={"LOGNAME": "alice"})
    assert recorded.exit_code == 0, recorded.output
    assert f"GPU 3's trend starts again with the sweeps after {sweeps[3]['sweep_id']}" in _flat(recorded.output)
    after = _history_json(store)
    assert after["trend"]["degraded"] is False
    (repair,) = after["repairs"]
    assert (repair["gpu"], repair["text"], repair["operator"]) == (3, "replaced GPU 3 (RMA 12345)", "alice")
    gpus = {t["gpu"]: t for t in after["trend"]["figures"][0]["gpus"]}
    assert gpus[3]["sweeps"] == 0 and gpus[0]["sweeps"] == 4  # a GPU's repair restarts that GPU alone
    assert after["trend"]["figures"][0]["median"]["sweeps"] == 4

    # The new GPU is healthy; the trend of GPU 3 runs from the sweep after the repair.
    new = _sweep(tmp_path, store, None, "after-repair")
    text = _run("history", "node002", "--store", str(store)).output
    assert (text.index(new["sweep_id"]) < text.index("repair of GPU 3: replaced GPU 3 (RMA 12345), by alice")
            < text.index(sweeps[3]["sweep_id"]))
    gpus = {t["gpu"]: t for t in _history_json(store)["trend"]["figures"][0]["gpus"]}
    assert gpus[3]["sweeps"] == 1 and gpus[3]["first"]["sweep_id"] == new["sweep_id"] and gpus[3]["fit"] is None
    assert "no slow degradation" in _flat(text) and "since its last repair" in _flat(text)
    # Its one sweep is too few to fit: said, not passed.
    assert ("not judged, too few sweeps to fit a trend (fewer than 3): node002: GPU 3's gemm.tflops bf16: 1 sweep "
            "since the repair of GPU 3: replaced GPU 3 (RMA 12345), by alice") in _flat(text)

    # A whole-host repair restarts every trend, the median's too; pruning sweeps keeps repairs.
    assert _run("history", "node002", "--repaired", "reseated the baseboard", "--store", str(store)).exit_code == 0
    assert _run("store", "prune", "--keep", "1", "--store", str(store)).exit_code == 0
    kept = _history_json(store)
    assert [r["text"] for r in kept["repairs"]] == ["replaced GPU 3 (RMA 12345)", "reseated the baseboard"]
    assert kept["trend"]["figures"][0]["median"]["sweeps"] == 0 and len(kept["sweeps"]) == 1


@pytest.mark.parametrize(("args", "message"), [
    (("node002", "--repaired", "   "), "--repaired: say what was done"),
    (("node999", "--repaired", "replaced the NIC"), "node999: no stored sweep has this host"),
    (("node002", "--repaired", "replaced GPU 8", "--gpu", "8"), "--gpu 8: node002 has 8 GPUs (0-7)"),
    (("node002", "--gpu", "3"), "--gpu goes with --repaired"),
    (("--repaired", "replaced GPU 3"), "--repaired needs the HOST"),
    (("node999",), "node999: not in any stored sweep"),
])
def test_bad_input_is_exit_2_with_a_clear_message_and_records_nothing(declining, tmp_path: Path, args, message):
    store, _ = declining
    result = _run("history", *args, "--store", str(store))
    assert result.exit_code == 2 and message in _flat(result.output), result.output
    assert _history_json(store)["repairs"] == []


def test_a_repair_into_a_store_that_does_not_exist_creates_none(tmp_path: Path):
    missing = tmp_path / "none.db"
    result = _run("history", "node002", "--repaired", "replaced GPU 3", "--store", str(missing))
    assert result.exit_code == 2 and "no store there yet" in result.output and not missing.exists()
