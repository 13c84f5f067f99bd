"""Findings an operator can trust, through the real pipeline (CLI, plan, re-test, analysis, store,
report) on simulated fleets: nothing that was not measured or compared passes, a regression the
whole fleet shares and a 2-node job are judged against baselines and SKU figures, and each
finding has the right cause and action."""

import json
import tempfile
from pathlib import Path

from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.store.store import Store

FAST = ("--probes", "gemm,telemetry", "--duration", "0.2")


def _fleet(tmp_path: Path, nodes: int = 16, faults=(), name: str = "fleet.json", **fields) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"nodes": nodes, "seed": 3, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                "faults": list(faults), **fields}))
    return str(path)


def _sweep(fleet: str, *args: str, store: Path | None = None) -> tuple[int, dict, str]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        storage = ("--store", str(store)) if store else ("--no-store",)
        result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "-q", "--json", str(out), *storage, *args],
                                    catch_exceptions=False)
        document = json.loads(out.read_text())
    return result.exit_code, document, result.output


def _found(document: dict, *kinds: str) -> set[tuple]:
    return {(f["kind"], f["host"], f["gpu"]) for f in document["findings"] if not kinds or f["kind"] in kinds}


def test_gemm_refused_everywhere_is_unchecked_and_never_a_pass(tmp_path: Path):
    code, document, output = _sweep(_fleet(tmp_path), *FAST, "--max-gpu-mem", "50")
    assert code == 3
    unchecked = [f for f in document["findings"] if f["kind"] == "unchecked"]
    assert len(unchecked) == 16 * 8 and {f["metric"] for f in unchecked} == {"gemm.tflops"}
    assert "needs at least" in unchecked[0]["evidence"] and unchecked[0]["gpu"] is not None
    assert document["summary"]["unchecked"] == 128 and "128 unchecked" in " ".join(output.split())
    assert document["impact"]["slowdown_pct"] is None  # nothing measured is not "0 % slowdown"
    assert "job slowdown" not in output


def test_a_shrunken_gemm_is_judged_against_its_own_shape(tmp_path: Path):
    code, document, _ = _sweep(_fleet(tmp_path, nodes=2), *FAST, "--max-gpu-mem", "150")
    gemm = [r for h in document["hosts"] for r in h["results"] if r["probe"] == "gemm"]
    assert {r["params"]["m"] for r in gemm} == {2048}
    assert code == 0 and document["findings"] == []  # 2 hosts, no baseline: the SKU figure of 2048³ judges
    # 16 GEMM figures, and the one pair on its 8 rails (perftest: against its line rate)
    assert document["summary"]["results_compared"] == 16 + 8


def test_a_lost_gpu_and_a_missing_gpu_are_fail_findings(tmp_path: Path):
    faults = [{"kind": "gpu_lost", "host": "node004", "gpu": 2}, {"kind": "gpu_missing", "host": "node009", "gpu": 7}]
    code, document, _ = _sweep(_fleet(tmp_path, faults=faults), *FAST)
    assert code == 1
    assert _found(document) == {("missing_gpu", "node004", 2), ("missing_gpu", "node009", None)}
    assert all(f["severity"] == "fail" and f["action"] == "reboot" for f in document["findings"])
    assert "node004" in document["impact"]["exclude"] and "node009" in document["impact"]["exclude"]


def test_an_error_record_is_unchecked_and_a_retest_that_errors_keeps_the_suspect(tmp_path: Path):
    faults = [{"kind": "probe_error", "host": "node002", "probe": "gemm", "gpu": 1},
              {"kind": "slow_gpu", "host": "node006", "gpu": 3, "factor": 0.8},
              {"kind": "probe_error", "host": "node006", "probe": "gemm", "gpu": 3, "from_call": 1,
               "reason": "CUBLAS_STATUS_EXECUTION_FAILED (Xid 31)"}]
    code, document, _ = _sweep(_fleet(tmp_path, faults=faults), *FAST)
    assert code == 3
    found = {(f["kind"], f["host"], f["gpu"]): f for f in document["findings"]}
    assert "Xid 13" in found[("unchecked", "node002", 1)]["evidence"]
    slow = found[("slow_gpu", "node006", 3)]
    assert not slow["confirmed"] and slow["severity"] == "warn"
    assert "re-test failed: CUBLAS_STATUS_EXECUTION_FAILED (Xid 31)" in slow["evidence"]
    assert ("unchecked", "node006", 3) in found


def test_mixed_models_and_drivers_are_never_pooled(tmp_path: Path):
    overrides = [{"hosts": "node[001-008]", "gpu_model": "NVIDIA A100-SXM4-80GB", "driver": "535.104.05"},
                 {"hosts": "node[009-012]", "driver": "560.35.03"}]
    faults = [{"kind": "slow_gpu", "host": "node003", "gpu": 5, "factor": 0.85}]
    code, document, _ = _sweep(_fleet(tmp_path, nodes=24, faults=faults, overrides=overrides), *FAST)
    assert code == 1 and _found(document) == {("slow_gpu", "node003", 5)}
    finding = document["findings"][0]
    assert finding["reference_source"] == "fleet" and 270 < finding["reference"] < 290  # A100 peers, not H100s


def test_a_two_node_job_with_a_slow_node_fails_with_or_without_a_baseline(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    healthy = _fleet(tmp_path, nodes=16, name="healthy.json")
    assert _sweep(healthy, *FAST, store=store)[0] == 0
    runner = CliRunner()
    built = runner.invoke(main, ["baseline", "build", "--last", "1", "--name", "default", "--store", str(store)])
    assert built.exit_code == 0, built.output
    job = _fleet(tmp_path, nodes=2, name="job.json",
                 faults=[{"kind": "slow_gpu", "host": "node002", "gpu": g, "factor": 0.6} for g in range(8)])
    code, document, _ = _sweep(job, *FAST)
    assert code == 1 and _found(document) == {("slow_node", "node002", None)}
    assert document["findings"][0]["reference_source"] == "sku"
    code, document, _ = _sweep(job, *FAST, store=store)
    assert code == 1 and _found(document) == {("slow_node", "node002", None)}
    assert document["findings"][0]["reference_source"] == "baseline"


def test_a_sweep_where_nothing_could_be_compared_says_so_and_exits_3(tmp_path: Path):
    # membw with a 128 MiB buffer (a tight --max-gpu-mem) has no SKU figure; 2 hosts, no baseline.
    code, document, output = _sweep(_fleet(tmp_path, nodes=2), "--probes", "membw", "--max-gpu-mem", "300",
                                    "--links", "none")
    assert code == 3
    assert document["summary"]["results_compared"] == 0 and document["summary"]["results_not_compared"] == 16
    (finding,) = document["findings"]
    assert (finding["kind"], finding["host"], finding["basis"]) == ("unchecked", "node[001-002]", "comparison")
    assert "no result could be compared" in " ".join(output.split())


def test_facts_always_run_so_results_are_keyed(tmp_path: Path):
    code, document, _ = _sweep(_fleet(tmp_path), "--probes", "gemm", "--duration", "0.2")
    assert code == 0 and all(h["facts"]["gpu_model"] == "NVIDIA H100 80GB HBM3" for h in document["hosts"])


def test_a_power_capped_fleet_is_one_power_policy_shift_with_its_cost_not_a_cpu_governor(tmp_path: Path):
    faults = [{"kind": "throttled", "host": f"node{n:03d}", "gpu": g, "reason": "sw_power_cap", "factor": 0.7}
              for n in range(1, 33) for g in range(8)]
    code, document, _ = _sweep(_fleet(tmp_path, nodes=32, faults=faults), *FAST)
    assert code == 1
    (shift,) = document["findings"]  # a cause every node shares drains none
    assert (shift["kind"], shift["host"], shift["action"], shift["severity"]) == ("fleet_shift", "node[001-032]",
                                                                                  "inspect", "fail")
    assert "power limit" in shift["action_detail"] and "SW power cap active on 256 of 256 GPUs" in shift["evidence"]
    assert 28 < document["impact"]["slowdown_pct"] < 32 and document["impact"]["exclude"] == []


def test_half_a_fleet_starved_is_found_node_by_node(tmp_path: Path):
    faults = [{"kind": "slow_node", "host": f"node{n:03d}", "factor": 0.6} for n in range(1, 33)]
    code, document, _ = _sweep(_fleet(tmp_path, nodes=64, faults=faults), "--probes", "gemm,pcie,telemetry",
                               "--duration", "0.2")
    assert code == 1
    assert _found(document, "slow_node") == {("slow_node", f"node{n:03d}", None) for n in range(1, 33)}
    assert not _found(document, "degraded_pcie", "slow_gpu")
    shifts = [f for f in document["findings"] if f["kind"] == "fleet_shift"]
    assert {f["metric"] for f in shifts} == {"gemm.tflops", "pcie.bandwidth"}
    assert all(f["share_pct"] == 50.0 and f["host"] == "node[001-032]" for f in shifts)


def test_the_retest_runs_in_the_first_pass_mode_so_full_load_faults_repeat(tmp_path: Path):
    faults = [{"kind": "throttled", "host": "node005", "gpu": 6, "reason": "hw_power_brake", "factor": 0.85,
               "full_load_only": True}]
    code, document, _ = _sweep(_fleet(tmp_path, faults=faults), *FAST)
    assert code == 1
    (finding,) = document["findings"]
    assert (finding["kind"], finding["host"], finding["gpu"], finding["confirmed"]) == ("throttled", "node005", 6, True)


def test_a_single_throttle_sample_is_not_a_finding(tmp_path: Path):
    faults = [{"kind": "throttled", "host": "node005", "gpu": 6, "reason": "hw_slowdown", "factor": 1.0,
               "share": 0.05}]
    code, document, _ = _sweep(_fleet(tmp_path, faults=faults), *FAST)
    assert code == 0 and document["findings"] == []


def test_a_bad_data_address_setting_is_refused_before_any_node_is_touched(tmp_path: Path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("node01 net=10.2.0.1\nnode02 net=10.2.0.2 rack=7\n")
    result = CliRunner().invoke(main, ["sweep", "--hosts", str(hosts), "--no-store", "-q"])
    assert result.exit_code == 2
    assert f"{hosts}:2:" in result.output and "unknown field 'rack=7'" in result.output
    hosts.write_text("node01 net=10.2.0.1\n")
    result = CliRunner().invoke(main, ["sweep", "--hosts", str(hosts), "--net-address", "eth0", "--no-store", "-q"])
    assert result.exit_code == 2 and "expected auto, field, ssh or iface:NAME" in result.output


def test_a_screen_over_a_simulated_fleet_names_a_slow_nic_and_an_unreachable_partner_is_not_tested(tmp_path: Path):
    faults = [{"kind": "slow_nic", "host": "node007", "factor": 0.5}, {"kind": "unreachable", "host": "node003"}]
    code, document, _ = _sweep(_fleet(tmp_path, faults=faults), *FAST, "--links", "screen")
    assert code == 1
    assert _found(document, "slow_nic", "slow_link", "link_error") == {("slow_nic", "node007", None)}
    assert not any("node003" in (link["a"], link["b"]) for link in document["links"])  # left out of the rounds
    assert {link["phase"] for link in document["links"]} >= {"screen", "confirm"}


def test_successive_screens_move_their_stride_so_a_slow_link_off_the_first_cycle_is_found_next(tmp_path: Path):
    # node003-node005 are two apart: the stride-1 cycle never pairs them, the stride-2 one does.
    faults = [{"kind": "slow_link", "a": "node003", "b": "node005", "factor": 0.5}]
    fleet, store = _fleet(tmp_path, faults=faults), tmp_path / "gpudiag.db"
    code, first, _ = _sweep(fleet, "--probes", "facts", "--links", "screen", store=store)
    assert code == 0 and _found(first, "slow_link", "slow_nic") == set()
    code, second, _ = _sweep(fleet, "--probes", "facts", "--links", "screen", store=store)
    assert code == 1
    (link,) = [f for f in second["findings"] if f["kind"] == "slow_link"]
    assert {link["host"], link["peer"]} == {"node003", "node005"}
    screened = [{tuple(sorted((x["a"], x["b"]))) for x in doc["links"] if x["phase"] == "screen"}
                for doc in (first, second)]
    assert ("node001", "node002") in screened[0] and ("node001", "node003") in screened[1]
    assert not screened[0] & screened[1]
    # both started within a second here, so the stored order may tie: the strides are what count
    assert sorted(sweep["options"]["screen_stride"] for sweep in Store.open(store).list_sweeps()) == [1, 2]


def _link_thresholds(tmp_path: Path) -> str:
    # A line-rate floor of 50 %: only the stored baseline can see a fabric 20 % below its usual figure.
    path = tmp_path / "thresholds.json"
    path.write_text('{"schema": "gpudiag.thresholds/1", "link_line_rate_efficiency": {"value": 50, "unit": "percent"}}')
    return str(path)


def test_a_fabric_wide_link_drop_is_a_fleet_shift_against_the_stored_baseline_and_unseen_without_it(tmp_path: Path):
    store, thresholds = tmp_path / "gpudiag.db", _link_thresholds(tmp_path)
    healthy = _fleet(tmp_path, nodes=8, name="healthy.json")
    code, first, _ = _sweep(healthy, "--probes", "facts", "--links", "full", "--thresholds", thresholds, store=store)
    assert code == 0 and first["findings"] == []
    built = CliRunner().invoke(main, ["baseline", "build", "--last", "1", "--name", "default", "--store", str(store)])
    assert built.exit_code == 0, built.output
    every_nic = [{"kind": "slow_nic", "host": f"node{i:03d}", "factor": 0.8} for i in range(1, 9)]
    slower = _fleet(tmp_path, nodes=8, faults=every_nic, name="slower.json")
    args = ("--probes", "facts", "--links", "full", "--thresholds", thresholds)
    code, judged, _ = _sweep(slower, *args, store=store)
    shifts = [f for f in judged["findings"] if f["kind"] == "fleet_shift"]
    assert code == 1 and len(shifts) == 1, judged["findings"]
    (shift,) = shifts
    assert shift["reference_source"] == "baseline" and 17 <= shift["deficit_pct"] <= 23
    assert "baseline default" in shift["evidence"]
    assert not _found(judged, "slow_nic", "slow_link")  # every NIC alike: the fabric's, not one node's
    code, unseen, _ = _sweep(slower, *args)  # no store, no baseline: the fleet agrees with itself
    assert code == 0 and unseen["findings"] == []


def test_a_two_node_job_is_judged_against_the_stored_link_baseline(tmp_path: Path):
    store, thresholds = tmp_path / "gpudiag.db", _link_thresholds(tmp_path)
    code, _, _ = _sweep(_fleet(tmp_path, nodes=8, name="healthy.json"), "--probes", "facts", "--links", "full",
                        "--thresholds", thresholds, store=store)
    assert code == 0
    assert CliRunner().invoke(main, ["baseline", "build", "--last", "1", "--store", str(store)]).exit_code == 0
    # a pair 10 % slow, above the line-rate floor: the baseline alone sees it
    job = _fleet(tmp_path, nodes=3, faults=[{"kind": "slow_nic", "host": "node002", "factor": 0.9}], name="job.json")
    code, document, _ = _sweep(job, "--probes", "facts", "--links", "full", "--thresholds", thresholds, store=store)
    slow = [f for f in document["findings"] if f["kind"] in ("slow_link", "slow_nic")]
    assert code in (1, 3) and slow, document["findings"]
    assert {f["reference_source"] for f in slow} == {"baseline"}
    assert {f["host"] for f in slow} == {"node002"}
