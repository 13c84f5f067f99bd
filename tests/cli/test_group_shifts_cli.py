"""Groups that shift together, power policy and throttles, through the real pipeline (CLI, plan,
re-test, analysis) on simulated fleets: a group slow as a whole is one finding that drains no
node, a part is drained only for falling below its own group, a software regression names the
versions, a power cap explains only the clock it costs, and a throttle seen in a few samples
says so."""

import json
import re
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main

FAST = ("--probes", "gemm,telemetry", "--duration", "0.2")
NEW_DRIVER = "560.35.03"


def _fleet(tmp_path: Path, nodes: int, faults=(), name: str = "fleet.json", **fields) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"nodes": nodes, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                "faults": list(faults), **fields}))
    return str(path)


def _sweep(fleet: str, *args: str, store: Path | None = None) -> tuple[int, dict]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        storage = ("--store", str(store)) if store else ("--no-store",)
        result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "-q", "--json", str(out), *storage, *FAST,
                                           *args], catch_exceptions=False)
        return result.exit_code, json.loads(out.read_text())


def _slow(hosts, factor: float) -> list[dict]:
    return [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": factor} for host in hosts for gpu in range(8)]


def _drained(document: dict) -> list[tuple]:
    return [(f["kind"], f["host"], f["gpu"]) for f in document["findings"] if f["action"] == "drain"]


def _names(first: int, last: int) -> list[str]:
    return [f"node{n:03d}" for n in range(first, last + 1)]


def test_a_whole_fleet_eight_percent_slow_is_one_fleet_shift_and_drains_no_node(tmp_path: Path):
    code, document = _sweep(_fleet(tmp_path, 32, _slow(_names(1, 32), 0.92)))
    (shift,) = document["findings"]
    assert (shift["kind"], shift["host"], shift["action"], shift["reference_source"]) == \
        ("fleet_shift", "node[001-032]", "inspect", "sku")
    assert code == 1 and shift["severity"] == "fail" and 7 < shift["deficit_pct"] < 9 and shift["share_pct"] == 100
    assert "no throttle reason" in shift["evidence"] and document["impact"]["exclude"] == []


def test_a_fleet_most_of_whose_nodes_fell_names_those_in_its_shift_and_not_the_rest(tmp_path: Path):
    # 20 of 32 nodes 10 % slow: the fleet's level is theirs, and the shift once said "32 of 32
    # hosts shifted together", sending an operator to the 12 that still measure at the SKU figure.
    slow = _names(1, 20)
    code, document = _sweep(_fleet(tmp_path, 32, _slow(slow, 0.9)))
    (shift,) = document["findings"]
    assert (shift["kind"], shift["host"], shift["action"]) == ("fleet_shift", "node[001-020]", "inspect")
    assert code == 1 and shift["share_pct"] == 62.5 and shift["evidence"].startswith("20 of 32 hosts")
    assert "12 hosts of the group measure at the sku reference and are not part of it: node[021-032]" \
        in shift["evidence"]


def test_a_driver_group_slow_is_one_software_regression_and_its_slow_gpu_is_found_against_its_level(tmp_path: Path):
    group = _names(49, 64)
    faults = _slow(group, 0.92)
    faults[8 * 3 + 5]["factor"] = 0.92 * 0.85  # node052's GPU 5: 15 % below its own group
    fleet = _fleet(tmp_path, 64, faults, overrides=[{"hosts": "node[049-064]", "driver": NEW_DRIVER}])
    code, document = _sweep(fleet)
    regressions = [f for f in document["findings"] if f["kind"] == "software_regression"]
    assert code == 1 and len(regressions) == 1
    (regression,) = regressions
    assert regression["host"] == "node[049-064]" and regression["action"] == "inspect"
    assert f"driver 550.54.15 -> {NEW_DRIVER}" in regression["evidence"] and 7 < regression["deficit_pct"] < 9
    assert _drained(document) == [("slow_gpu", "node052", 5)]
    (slow,) = [f for f in document["findings"] if f["kind"] == "slow_gpu"]
    assert slow["reference_source"] == "fleet" and 13 < slow["deficit_pct"] < 17  # against its group's level
    assert {f["kind"] for f in document["findings"]} == {"software_regression", "slow_gpu"}


@pytest.mark.parametrize("seed", [6, 20])
def test_a_driver_group_slow_at_3_pct_noise_is_told_from_the_other_drivers_level_not_a_parts_spread(
        tmp_path: Path, seed: int):
    # 16 hosts 10 % slow are 3.3 sigma of one GPU below the other 48: judged so, the group fell
    # through to the SKU figure as a fleet_shift, the driver unnamed, in 3 sweeps of 40.
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 64, "seed": seed, "noise": {"gemm_cv": 0.03, "membw_cv": 0.03},
                                 "faults": _slow(_names(49, 64), 0.9),
                                 "overrides": [{"hosts": "node[049-064]", "driver": NEW_DRIVER}]}))
    code, document = _sweep(str(fleet))
    assert [(f["kind"], f["host"]) for f in document["findings"]] == [("software_regression", "node[049-064]")]
    assert f"driver 550.54.15 -> {NEW_DRIVER}" in document["findings"][0]["evidence"] and code == 1


@pytest.mark.parametrize("factor", [1.0, 0.98])
def test_a_driver_group_at_or_a_little_under_the_others_level_is_no_regression(tmp_path: Path, factor: float):
    # the two levels' own errors are small; the deficit (deficit_warn) still has to be there
    fleet = _fleet(tmp_path, 64, _slow(_names(49, 64), factor) if factor < 1 else (),
                   overrides=[{"hosts": "node[049-064]", "driver": NEW_DRIVER}])
    code, document = _sweep(fleet)
    assert document["findings"] == [] and code == 0


def test_a_baseline_on_the_old_driver_is_consulted_for_the_same_hardware_on_the_new_one(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    assert _sweep(_fleet(tmp_path, 16, name="old.json"), store=store)[0] == 0
    built = CliRunner().invoke(main, ["baseline", "build", "--last", "1", "--name", "default", "--store", str(store)])
    assert built.exit_code == 0, built.output
    upgraded = _fleet(tmp_path, 16, _slow(_names(1, 16), 0.92), name="new.json", driver=NEW_DRIVER)
    code, document = _sweep(upgraded, store=store)  # every node upgraded: only the old baseline can tell
    (regression,) = document["findings"]
    assert (regression["kind"], regression["host"], regression["reference_source"]) == \
        ("software_regression", "node[001-016]", "baseline")
    assert code == 1 and f"driver 550.54.15 -> {NEW_DRIVER}" in regression["evidence"]
    # A group on the new driver beside the old: the same, with or without the baseline.
    mixed = _fleet(tmp_path, 32, _slow(_names(17, 32), 0.92), name="mixed.json",
                   overrides=[{"hosts": "node[017-032]", "driver": NEW_DRIVER}])
    for storage in (store, None):
        code, document = _sweep(mixed, store=storage)
        assert code == 1 and [(f["kind"], f["host"]) for f in document["findings"]] == \
            [("software_regression", "node[017-032]")]


def test_five_nodes_of_another_model_slow_together_are_one_group_finding(tmp_path: Path):
    group = _names(28, 32)
    fleet = _fleet(tmp_path, 32, _slow(group, 0.92), overrides=[{"hosts": group, "gpu_model": "NVIDIA H200"}])
    code, document = _sweep(fleet)
    (shift,) = document["findings"]
    assert (shift["kind"], shift["host"], shift["action"]) == ("fleet_shift", "node[028-032]", "inspect")
    assert code == 1 and "NVIDIA H200" in shift["evidence"] and shift["share_pct"] == round(100 * 5 / 32, 1)


def test_a_fleet_wide_power_cap_does_not_explain_a_gpu_fifteen_percent_slow(tmp_path: Path):
    faults = [{"kind": "throttled", "host": host, "gpu": gpu, "reason": "sw_power_cap", "factor": 0.97}
              for host in _names(1, 16) for gpu in range(8)]
    faults.append({"kind": "slow_gpu", "host": "node007", "gpu": 2, "factor": 0.85})
    code, document = _sweep(_fleet(tmp_path, 16, faults))
    (finding,) = document["findings"]
    assert (finding["kind"], finding["host"], finding["gpu"], finding["action"]) == ("slow_gpu", "node007", 2, "drain")
    assert code == 1 and "SW power cap active in 100 %" in finding["evidence"]
    assert "explains 0.0 % of the" in finding["evidence"]
    # The same cap alone on one GPU, costing its 15 %: the cap explains it (restore the power limit).
    capped = [{"kind": "throttled", "host": "node007", "gpu": 2, "reason": "sw_power_cap", "factor": 0.85}]
    code, document = _sweep(_fleet(tmp_path, 16, capped, name="capped.json"))
    (finding,) = document["findings"]
    assert (finding["kind"], finding["gpu"], finding["action"]) == ("throttled", 2, "inspect")
    assert "power limit" in finding["action_detail"]


def test_a_gpu_eight_percent_slow_under_a_fleet_wide_cap_fails_in_every_trial(tmp_path: Path):
    # Its two runs' mean lands anywhere within about 1 % of 8 % at CV 1 %: a fail line at 7 % let
    # one trial in ten through as a warning (exit 0 for a real 8 % fault); at 6 % none.
    faults = [{"kind": "throttled", "host": host, "gpu": gpu, "reason": "sw_power_cap", "factor": 0.97}
              for host in _names(1, 16) for gpu in range(8)]
    faults.append({"kind": "slow_gpu", "host": "node011", "gpu": 4, "factor": 0.92})
    for seed in range(4):
        code, document = _sweep(_fleet(tmp_path, 16, faults, name=f"seed{seed}.json", seed=seed))
        (finding,) = document["findings"]
        assert (finding["kind"], finding["host"], finding["gpu"]) == ("slow_gpu", "node011", 4), seed
        assert finding["severity"] == "fail" and code == 1, (seed, finding["deficit_pct"])


def test_a_preflight_whose_every_node_shares_a_power_cap_drains_none(tmp_path: Path):
    fleet = tmp_path / "site.json"
    faults = [{"kind": "throttled", "host": f"n{n}", "gpu": g, "reason": "sw_power_cap", "factor": 0.8}
              for n in range(1, 9) for g in range(8)]
    fleet.write_text(json.dumps({"nodes": 8, "name_format": "n{}", "faults": faults}))
    result = CliRunner().invoke(main, ["preflight", "--no-store", "-q", "--simulate", str(fleet), "--json", "-"],
                                catch_exceptions=False, env={"SLURM_JOB_NODELIST": "", "SLURM_NODELIST": ""})
    assert result.exit_code == 1, result.output  # a fail the job shares: not a pass, but no node to blame
    assert "would run" not in result.output and "scontrol" not in result.output
    document = json.loads(result.output[result.output.index("{"):result.output.rindex("}") + 1])
    (shift,) = [f for f in document["findings"] if f["kind"] != "slow_link"]
    assert (shift["kind"], shift["host"], shift["action"]) == ("fleet_shift", "n[1-8]", "inspect")
    assert "SW power cap active on 64 of 64 GPUs" in shift["evidence"] and "power policy" in shift["evidence"]
    assert document["preflight"]["drain"] == [] and document["impact"]["exclude"] == []


def test_a_hw_slowdown_in_a_fifth_of_the_samples_says_its_share_and_is_throttled(tmp_path: Path):
    fault = {"kind": "throttled", "host": "node004", "gpu": 6, "reason": "hw_slowdown", "share": 0.2, "factor": 0.5}
    code, document = _sweep(_fleet(tmp_path, 16, [fault]))
    (finding,) = document["findings"]
    assert (finding["kind"], finding["host"], finding["gpu"], finding["severity"]) == \
        ("throttled", "node004", 6, "fail")
    share = re.search(r"HW slowdown active in (\d+) % of \d+ loaded samples", finding["evidence"])
    # below throttle_share, and said
    assert share and int(share.group(1)) < 25 and "no throttle reason" not in finding["evidence"]
    assert code == 1 and "the clock drop beyond its peers' explains" in finding["evidence"]
