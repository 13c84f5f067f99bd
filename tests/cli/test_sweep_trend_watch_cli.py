"""A part sliding over stored sweeps: the sweep's own ``slow_degradation`` finding (a ``watch``)
when its store holds the earlier sweeps, ``gpudiag history``'s verdict, and a watch that never
fails a sweep nor drains. Real stores, built by ``gpudiag sweep --simulate ... --store``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main

FAST = ("--probes", "gemm", "--duration", "0.2", "--links", "none", "-q")


def _run(*args: str) -> Result:
    return CliRunner(env={"COLUMNS": "120"}).invoke(main, list(args), catch_exceptions=False)


def _sweeps(folder: Path, factors: list[float], seed: int, cv: float = 0.01,
            *options: str) -> tuple[Path, list[dict[str, Any]]]:
    """One simulated 8-node sweep per factor into one store, node003's GPU 2 at that factor, each
    sweep with fresh noise at ``cv`` and the sweep's further ``options``; the sweep documents."""
    store, documents = folder / "trend.db", []
    for index, factor in enumerate(factors):
        fleet, out = folder / f"fleet{index}.json", folder / f"sweep{index}.json"
        faults = [] if factor == 1 else [{"kind": "slow_gpu", "host": "node003", "gpu": 2, "factor": factor}]
        fleet.write_text(json.dumps({"nodes": 8, "name_format": "node{:03d}", "seed": 100 * seed + index,
                                     "noise": {"gemm_cv": cv}, "faults": faults}))
        result = _run("sweep", "--simulate", str(fleet), *FAST, *options, "--store", str(store), "--json", str(out))
        document = json.loads(out.read_text())
        assert result.exit_code == document["summary"]["exit_code"], result.output
        documents.append(document)
    return store, documents


@pytest.fixture(scope="module")
def sliding(tmp_path_factory) -> tuple[Path, list[dict[str, Any]]]:
    """The issue's case: a GPU at 1.00, 0.98, 0.96, 0.94 of its speed, CV 1 % a sweep."""
    return _sweeps(tmp_path_factory.mktemp("sliding"), [1.0, 0.98, 0.96, 0.94], seed=3)


def test_the_sliding_gpu_is_the_sweeps_own_watch_naming_its_slope_and_projection(sliding):
    _, documents = sliding
    latest = documents[-1]
    watches = [f for f in latest["findings"] if f["kind"] == "slow_degradation"]
    mine = [f for f in watches if (f["host"], f["gpu"]) == ("node003", 2)]
    assert len(mine) == 1, [f["evidence"] for f in watches]
    found = mine[0]
    assert (found["severity"], found["action"], found["basis"]) == ("watch", "watch", "history")
    # Watched against its siblings: its latest figure, their median then, and how far under it is.
    assert found["metric"] == "gemm.tflops" and found["reference_source"] == "siblings"
    assert found["deficit_pct"] > 3  # past deficit_warn at the latest sweep
    assert found["value"] == pytest.approx(found["reference"] * (1 - found["deficit_pct"] / 100), rel=1e-3)
    said = re.search(r"([0-9.]+) % under its siblings at the latest sweep", found["evidence"])
    assert said and abs(float(said.group(1)) - found["deficit_pct"]) <= 0.06, found["evidence"]
    evidence = found["evidence"]
    assert "% a sweep" in evidence and ("over 4 sweeps" in evidence or "over the 4 sweeps" in evidence), evidence
    # Its first sweeps had too few points before it for a line: no trend finding there.
    assert not [f for f in documents[0]["findings"] + documents[1]["findings"] if f["kind"] == "slow_degradation"]


def test_a_watch_never_fails_the_sweep_nor_keeps_a_node_out(sliding):
    _, documents = sliding
    for document in documents:
        others = [f for f in document["findings"] if f["severity"] != "watch"]
        fails = any(f["severity"] == "fail" for f in others)
        unchecked = any(f["kind"] in ("unchecked", "link_error") for f in others)
        assert document["summary"]["exit_code"] == (1 if fails else 3 if unchecked else 0)
        watched = {f["host"] for f in document["findings"] if f["severity"] == "watch"}
        kept_out = set(document["impact"]["exclude"])
        assert not (watched & kept_out) - {f["host"] for f in others if f["severity"] == "fail"}


def test_history_names_the_watch_or_the_slow_degradation_of_the_same_gpu(sliding):
    store, _ = sliding
    result = _run("history", "node003", "--store", str(store), "--json", "-")
    assert result.exit_code == 0
    trend = json.loads(result.output)["trend"]
    flagged = {(t["gpu"], t["verdict"]) for t in trend["degradations"] + trend["watches"]}
    assert (2, "watch") in flagged or (2, "fail") in flagged, flagged
    text = _run("history", "node003", "--store", str(store)).output
    assert "node003: GPU 2's gemm.tflops bf16 falls" in " ".join(text.split())


def test_a_sweep_without_enough_stored_sweeps_judges_no_trend(tmp_path):
    _, documents = _sweeps(tmp_path, [1.0, 0.9], seed=5)
    assert not [f for d in documents for f in d["findings"] if f["kind"] == "slow_degradation"]


def test_the_issues_slide_is_watched_in_every_fleet_and_a_flat_part_seldom(tmp_path):
    # 1.00, 0.98, 0.96, 0.94 at CV 1 % in 8 fleets of 8 nodes, each fleet's sweeps back to back
    # into one store: the sliding GPU is named in every fleet, and a flat part (a GPU, or a
    # node's median) is watched in at most one. A GPU is judged against its siblings with the
    # whole fleet's scatter at 3.5 sigma; at the watch's own 2.5 with each host's noise alone, a
    # flat GPU was watched in about half such fleets.
    found, elsewhere = 0, []
    for seed in range(11, 19):
        (tmp_path / f"seed{seed}").mkdir()
        _, documents = _sweeps(tmp_path / f"seed{seed}", [1.0, 0.98, 0.96, 0.94], seed=seed)
        latest = documents[-1]["findings"]
        found += ("node003", 2) in {(f["host"], f["gpu"]) for f in latest}
        others = sorted({(f["host"], f["gpu"]) for f in latest if f["kind"] == "slow_degradation"} - {("node003", 2)},
                        key=str)
        elsewhere += [others] if others else []
    assert found == 8 and len(elsewhere) <= 1, elsewhere


def _trend_named(folder: Path, seeds: range, cv: float, *options: str) -> tuple[int, list[Any], list[str]]:
    """Of fleets sliding as the issue's at ``cv``: in how many the sweep's own trend names the
    sliding GPU, the flat parts watched (per fleet that has any) and the sliding GPU's watches' evidence."""
    found, elsewhere, evidence = 0, [], []
    for seed in seeds:
        (folder / f"seed{seed}").mkdir()
        _, documents = _sweeps(folder / f"seed{seed}", [1.0, 0.98, 0.96, 0.94], seed, cv, *options)
        trends = [f for f in documents[-1]["findings"] if f["kind"] == "slow_degradation"]
        mine = [f for f in trends if (f["host"], f["gpu"]) == ("node003", 2)]
        found += bool(mine)
        evidence += [f["evidence"] for f in mine]
        others = sorted({(f["host"], f["gpu"]) for f in trends} - {("node003", 2)}, key=str)
        elsewhere += [others] if others else []
    return found, elsewhere, evidence


def test_at_2_pct_noise_the_sweep_re_tests_a_slide_its_first_runs_cannot_settle(tmp_path):
    # The issue's slide at CV 2 %: on first runs alone its slope against its siblings is 3.4
    # standard errors, and the 3.5 bar found it in 3 of these 16 fleets. A slide past 1 of them
    # has its host's GEMM run 3 times more, and the mean weighs three runs: found in 13 (in 45 of
    # the 50 fleets of seeds 11-60, where a screen at 2 found 41).
    for folder in ("retest", "first"):
        (tmp_path / folder).mkdir()
    found, elsewhere, evidence = _trend_named(tmp_path / "retest", range(11, 27), 0.02)
    alone, alone_elsewhere, _ = _trend_named(tmp_path / "first", range(11, 27), 0.02, "--no-retest")
    assert found >= 13 and found >= alone + 8, (found, alone)
    assert len(elsewhere) <= max(1, len(alone_elsewhere)), (elsewhere, alone_elsewhere)
    assert any("under its siblings at the latest sweep (the mean of 3 re-test runs)" in text for text in evidence)


def test_history_judges_the_re_tested_sweep_as_the_sweep_did(tmp_path):
    store, documents = _sweeps(tmp_path, [1.0, 0.98, 0.96, 0.94], 11, 0.02)
    assert ("node003", 2) in {(f["host"], f["gpu"]) for f in documents[-1]["findings"]
                              if f["kind"] == "slow_degradation"}
    shown = json.loads(_run("history", "node003", "--store", str(store), "--json", "-").output)
    latest = shown["sweeps"][0]
    (gemm,) = [figure for figure in latest["figures"] if figure["metric"] == "gemm.tflops"]
    assert gemm["retest"]["runs"] == 3 and len(gemm["retest"]["per_gpu"]) == 8  # every GPU: the siblings too
    trend = shown["trend"]
    assert 2 in {t["gpu"] for t in trend["degradations"] + trend["watches"]}, trend


def test_a_sweep_within_a_budget_leaves_its_time_to_its_planned_checks(tmp_path):
    store, documents = _sweeps(tmp_path, [1.0, 0.98, 0.96, 0.94], 11, 0.02, "--budget", "120")
    shown = json.loads(_run("history", "node003", "--store", str(store), "--json", "-").output)
    assert not any("retest" in figure for sweep in shown["sweeps"] for figure in sweep["figures"])
    assert not any("at the latest sweep (the mean of" in f["evidence"] for f in documents[-1]["findings"])


def test_a_slide_whose_re_test_measures_nothing_is_said_and_judged_on_its_first_run(tmp_path):
    # node003's GEMM fails after its first pass in the latest sweep (from call 1, its first re-test):
    # the slide's re-test measures nothing there, and the sweep says so
    store, documents = _sweeps(tmp_path, [1.0, 0.98, 0.96], 11, 0.02)
    fleet, out = tmp_path / "last.json", tmp_path / "last.out.json"
    fleet.write_text(json.dumps({"nodes": 8, "name_format": "node{:03d}", "seed": 1103, "noise": {"gemm_cv": 0.02},
                                 "faults": [{"kind": "slow_gpu", "host": "node003", "gpu": 2, "factor": 0.94},
                                            {"kind": "probe_error", "host": "node003", "probe": "gemm",
                                             "from_call": 1, "reason": "CUDA error: unspecified launch failure"}]}))
    _run("sweep", "--simulate", str(fleet), *FAST, "--store", str(store), "--json", str(out))
    document = json.loads(out.read_text())
    assert any(w == "the re-test of sliding GPUs measured nothing on node003: their trends are judged on the first run"
               for w in document["warnings"]), document["warnings"]
    shown = json.loads(_run("history", "node003", "--store", str(store), "--json", "-").output)
    assert not any("retest" in figure for figure in shown["sweeps"][0]["figures"])
