"""Small jobs and paused jobs: a slow link part is never exit 0 (issue 16).

Simulated fleets of 2 to 4 nodes swept whole (``gpudiag sweep`` and ``gpudiag preflight`` with
``--simulate``), and paused jobs narrowed to ``--suspects`` and their reference peers. A NIC
slow with every healthy host a small job has is confirmed and drained alone; hosts slow only
with each other cannot be told apart and are each ``unchecked`` (exit 3), the healthy one never
blamed; a suspect slow on every GPU against its reference peers is one ``slow_node``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.exitcodes import ExitCode
from gpudiag.hosts import fold_hosts
from gpudiag.links import LinkResult, attribute_links
from gpudiag.links.linkfindings import link_findings

NO_JOB = {"SLURM_JOB_NODELIST": "", "SLURM_NODELIST": ""}
LINK_BLAME = ("slow_nic", "slow_link")


def _fleet(tmp_path: Path, nodes: int, *faults: dict[str, Any]) -> str:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": nodes, "name_format": "n{}", "seed": 3, "faults": list(faults)}))
    return str(path)


def _sweep(tmp_path: Path, fleet: str, *args: str) -> tuple[int, dict, str]:
    document = tmp_path / "sweep.json"
    result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "--no-store", "-q", "--json", str(document),
                                       *args], catch_exceptions=False)
    return result.exit_code, json.loads(document.read_text()), result.output


def _preflight(tmp_path: Path, fleet: str, *args: str) -> tuple[int, dict, str]:
    document = tmp_path / "preflight.json"
    result = CliRunner().invoke(main, ["preflight", "--no-store", "-q", "--simulate", fleet, "--json", str(document),
                                       *args], catch_exceptions=False, env=NO_JOB)
    return result.exit_code, json.loads(document.read_text()), result.stdout


def _named(document: dict, *kinds: str) -> set[tuple[str, str, str | None]]:
    return {(f["kind"], f["host"], f["peer"]) for f in document["findings"] if f["kind"] in kinds}


def _slow_nic(host: str, factor: float = 0.6) -> dict[str, Any]:
    return {"kind": "slow_nic", "host": host, "factor": factor}


def _job(tmp_path: Path, nodes: int, seed: int, link_cv: float, *faults: dict[str, Any], names: str = "n{}") -> str:
    """A simulated job of ``nodes`` at ``link_cv`` link noise (1 % GPU noise) with ``faults``."""
    path = tmp_path / f"fleet{seed}.json"
    path.write_text(json.dumps({"nodes": nodes, "name_format": names, "seed": seed,
                                "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": link_cv},
                                "faults": list(faults)}))
    return str(path)


def test_a_slow_nic_in_a_three_node_job_is_confirmed_with_both_healthy_hosts_and_drained_alone(tmp_path):
    code, document, output = _preflight(tmp_path, _fleet(tmp_path, 3, _slow_nic("n1")))
    assert code == ExitCode.FAIL, output
    assert _named(document, *LINK_BLAME, "unchecked") == {("slow_nic", "n1", None)}
    (nic,) = [f for f in document["findings"] if f["kind"] == "slow_nic"]
    assert (nic["severity"], nic["action"], nic["confirmed"]) == ("fail", "drain", True)
    assert [drain["command"].split("NodeName=")[1].split()[0] for drain in document["preflight"]["drain"]] == ["n1"]


def test_two_slow_nics_of_three_are_the_jobs_network_as_a_whole_and_no_node_is_blamed_or_kept_out(tmp_path):
    # every pair runs alike at 60 % of the line rate: the fabric or the NICs of the job, which cannot be told
    fleet = _fleet(tmp_path, 3, _slow_nic("n1", 0.6), _slow_nic("n2", 0.6))
    code, document, output = _preflight(tmp_path, fleet)
    assert code == ExitCode.FAIL, output
    assert _named(document, *LINK_BLAME, "unchecked") == set()
    (network,) = [f for f in document["findings"] if f["kind"] == "slow_network"]
    assert (network["severity"], network["host"], network["action"], network["confirmed"]) == (
        "fail", None, "inspect", True)
    assert document["preflight"]["drain"] == [] and document["impact"]["exclude"] == []
    assert document["impact"]["network_slowdown_pct"] > 30


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_two_slow_nics_of_three_around_the_floor_are_never_a_pass_never_the_healthy_one_and_never_every_node(
        tmp_path, seed):
    # at 0.9 every pair sits around the 90 % line-rate floor, and noise lifts one or another over it:
    # which of them is slow often cannot be told, and a job kept off all three is no answer
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 3, "name_format": "n{}", "seed": seed,
                                "faults": [_slow_nic("n1", 0.9), _slow_nic("n2", 0.9)]}))
    code, document, output = _preflight(tmp_path, str(path))
    assert code in (ExitCode.UNCHECKED, ExitCode.FAIL), output  # never 0
    assert not {host for _, host, _ in _named(document, *LINK_BLAME)} - {"n1", "n2"}, output
    assert "NodeName=n3" not in json.dumps(document["preflight"]["drain"])
    assert len(document["impact"]["exclude"]) < 3
    network = [f for f in document["findings"] if f["kind"] == "slow_network"]
    assert all(f["host"] is None for f in network)
    if code == ExitCode.FAIL:  # the pairs ran alike below the floor: the network as a whole
        assert [f["confirmed"] for f in network] == [True], output


def test_two_slow_nics_of_four_are_each_confirmed_against_the_two_healthy_hosts(tmp_path):
    code, document, output = _sweep(tmp_path, _fleet(tmp_path, 4, _slow_nic("n1"), _slow_nic("n2")))
    assert code == ExitCode.FAIL, output
    assert _named(document, *LINK_BLAME, "unchecked") == {("slow_nic", "n1", None), ("slow_nic", "n2", None)}
    assert all(f["confirmed"] and f["action"] == "drain" for f in document["findings"] if f["kind"] == "slow_nic")


def test_a_slow_nic_in_a_two_node_job_fails_its_network_and_drains_or_keeps_out_neither_end(tmp_path):
    # one pair is all a 2-node job has: its network as a whole, the fabric or either NIC
    code, document, output = _preflight(tmp_path, _fleet(tmp_path, 2, _slow_nic("n2")))
    assert code == ExitCode.FAIL, output
    assert _named(document, *LINK_BLAME, "unchecked", "slow_network") == {("slow_network", None, None)}
    assert document["preflight"]["drain"] == [] and document["impact"]["exclude"] == []


def test_preflight_judges_tcp_links_against_the_line_rate_given_and_without_one_leaves_them_unchecked(tmp_path):
    fleet = _fleet(tmp_path, 3, _slow_nic("n3"))
    code, document, output = _preflight(tmp_path, fleet, "--net-backend", "tcp", "--net-line-rate", "400")
    assert code == ExitCode.FAIL, output
    assert _named(document, *LINK_BLAME, "unchecked") == {("slow_nic", "n3", None)}
    assert {link["backend"] for link in document["links"]} == {"tcp"}
    assert {link["line_rate_gbps"] for link in document["links"]} == {400.0}
    code, document, output = _preflight(tmp_path, fleet, "--net-backend", "tcp")
    assert code == ExitCode.UNCHECKED, output  # three tcp hosts, no baseline, no line rate: nothing to compare
    assert _named(document, *LINK_BLAME) == set()
    assert any("not compared, not passed" in f["evidence"] for f in document["findings"] if f["kind"] == "unchecked")


def test_a_suspect_slow_on_every_gpu_against_its_reference_peers_is_one_slow_node(tmp_path):
    fleet = _fleet(tmp_path, 8, *({"kind": "slow_gpu", "host": "n5", "gpu": gpu, "factor": 0.92} for gpu in range(8)))
    code, document, output = _sweep(tmp_path, fleet, "--pause", "--suspects", "n5", "--links", "none")
    assert document["focus"]["suspects"] == ["n5"] and len(document["focus"]["references"]) == 2
    assert code == ExitCode.FAIL, output
    fails = {(f["kind"], f["host"], f["gpu"], f["action"]) for f in document["findings"] if f["severity"] == "fail"}
    assert fails == {("slow_node", "n5", None, "drain")}  # no per-GPU drains, no shift of a 3-host "fleet"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_at_2_pct_noise_a_suspect_10_pct_slow_on_every_gpu_is_its_slow_node_not_a_pass(tmp_path, seed):
    # Kept in the spread, the suspect's own values widened it to 3.8 %: its GPUs were only screened
    # (a noisy key), their runs' means judged at that spread, and seeds 1 and 2 exited 0, silent.
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 8, "name_format": "node{:04d}", "seed": seed,
                                "noise": {"gemm_cv": 0.02, "membw_cv": 0.02, "link_cv": 0.04},
                                "faults": [{"kind": "slow_gpu", "host": "node0005", "gpu": gpu, "factor": 0.9}
                                           for gpu in range(8)]}))
    code, document, output = _sweep(tmp_path, str(path), "--pause", "--suspects", "node0005", "--links", "none",
                                    "--probes", "facts,telemetry,gemm,membw,pcie")
    assert code == ExitCode.FAIL, output
    fails = {(f["kind"], f["host"], f["gpu"], f["action"]) for f in document["findings"] if f["severity"] == "fail"}
    assert fails == {("slow_node", "node0005", None, "drain")}


def test_a_healthy_suspect_beside_a_slow_reference_peer_is_not_blamed(tmp_path):
    # --suspects n5 picks n2 and n7 as reference peers; n7's NIC is slow
    code, document, output = _sweep(tmp_path, _fleet(tmp_path, 8, _slow_nic("n7")), "--pause", "--suspects", "n5")
    assert {key: document["focus"][key] for key in ("suspects", "references")} == {"suspects": ["n5"],
                                                                                   "references": ["n2", "n7"]}
    assert document["focus"]["extra_peers"]["pair_tests"] == 0  # n2 decided it: no further peer
    assert code == ExitCode.FAIL, output
    assert _named(document, *LINK_BLAME, "unchecked") == {("slow_nic", "n7", None)}


def test_a_low_run_its_re_tests_did_not_repeat_is_judged_by_the_runs_that_did():
    # the re-tests ran because the first run was low: from three runs on that one no longer decides
    cleared = [LinkResult("n1", "n2", "perftest", None, gbps, 400.0) for gbps in (300.0, 380.0, 385.0)]
    assert link_findings(attribute_links(cleared), 7.0) == []
    repeated = [LinkResult("n1", "n2", "perftest", None, gbps, 400.0) for gbps in (300.0, 310.0)]
    [finding] = link_findings(attribute_links(repeated), 7.0)
    assert (finding.kind, finding.severity, finding.confirmed, finding.host) == ("slow_network", "fail", True, None)


def test_a_pair_slow_in_two_runs_of_three_is_judged_on_their_median():
    runs = [LinkResult("n1", "n2", "perftest", None, gbps, 400.0) for gbps in (300.0, 370.0, 310.0)]
    [finding] = link_findings(attribute_links(runs), 7.0)
    assert (finding.kind, finding.severity, finding.confirmed) == ("slow_network", "fail", True)
    assert finding.value == 310.0


@pytest.mark.parametrize("nodes", [3, 4])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_nic_8_percent_slow_in_a_small_job_is_found_and_drained_alone(tmp_path, nodes, seed):
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": nodes, "name_format": "n{}", "seed": seed,
                                "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": 0.02},
                                "faults": [_slow_nic(f"n{nodes}", 0.92)]}))
    code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
    assert code == ExitCode.FAIL, output
    # one finding on the NIC, its rails folded into it; no pair of it taken for a slow link
    assert _named(document, *LINK_BLAME, "unchecked") == {("slow_nic", f"n{nodes}", None)}
    [nic] = [f for f in document["findings"] if f["kind"] == "slow_nic"]
    # on its rails, or across them together (a rail's pairs judged against the rails' own noise)
    assert nic["severity"] == "fail" and nic["action"] == "drain"
    assert re.match(r"on ([2-8] rails|all its rails together)", nic["evidence"]), nic["evidence"]


@pytest.mark.parametrize("seed", [1, 8])
def test_a_nic_10_pct_slow_half_way_below_in_a_4_node_job_is_paired_further_never_passed(tmp_path, seed):
    # At 6 % link noise the screen paired node0004 with two partners: its best pair 3.0 sigma of
    # the rails' noise below the others' (the bar: 3), and the job passed, exit 0. Half-way below
    # with a partner not yet paired, it is a suspect: paired with it, it is found (seed 1), or
    # said unchecked (seed 8), never passed.
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 4, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": seed,
                                "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.06},
                                "faults": [_slow_nic("node0004", 0.9)]}))
    code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
    assert code in (ExitCode.FAIL, ExitCode.UNCHECKED), output
    assert {f["host"] for f in document["findings"] if f["severity"] != "info"} == {"node0004"}, output


@pytest.mark.parametrize(("nodes", "link_cv"), [(3, 0.03), (4, 0.03), (3, 0.06), (4, 0.06), (5, 0.06)])
def test_a_healthy_small_job_on_a_noisy_fabric_blames_nothing(tmp_path, nodes, link_cv):
    # at 6 % a pair's figure is often under the floor: a suspect is unchecked, never blamed. (4
    # nodes, seed 5: one pair ran 5.6 % over the line rate on its eight rails, the best of both
    # its ends, and n4 was drained as slow across its rails against it.)
    for seed in range(1, 6):
        path = tmp_path / "fleet.json"
        path.write_text(json.dumps({"nodes": nodes, "name_format": "n{}", "seed": seed,
                                    "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": link_cv}, "faults": []}))
        code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
        assert not [f for f in document["findings"] if f["kind"] in LINK_BLAME], output
        assert code in ((ExitCode.OK,) if link_cv < 0.05 else (ExitCode.OK, ExitCode.UNCHECKED)), output


@pytest.mark.parametrize(("seed", "cv"), [(8, 0.02), (12, 0.02), (9, 0.03)])
def test_the_four_400_gbps_hosts_of_a_healthy_6_node_fleet_blame_nothing(tmp_path, seed, cv):
    # Two H100, two H200 (400 Gb/s a rail) and two A100 (200): the four fast hosts are judged
    # against their own level. Its spread was the 1 % floor (their few re-runs too few to measure
    # a noise), and a healthy pair whose re-run read 6.6 % low failed as a slow link (seed 12), or
    # two hosts were left unchecked, exit 3 (seed 8). Their rails show the noise: 4 %. At 6 %
    # (seed 9) a 400 Gb/s host paired only with the 200 Gb/s ones read half-way slow among them,
    # and was left unchecked though its NIC was shown good at 400.
    names = [f"node{i:04d}" for i in range(1, 7)]
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({
        "nodes": 6, "name_format": "node{:04d}", "seed": seed,
        "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": [],
        "overrides": [{"hosts": names[2:4], "gpu_model": "NVIDIA H200"},
                      {"hosts": names[4:], "gpu_model": "NVIDIA A100-SXM4-80GB"}]}))
    code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
    assert code == ExitCode.OK and not [f for f in document["findings"] if f["severity"] != "info"], output


def test_a_400_gbps_host_half_way_below_meets_another_400_gbps_host_not_only_the_one_that_passed(tmp_path):
    # One H100 pair, one H200 and one A100 (200 Gb/s) among five hosts at 6 % link noise: the one
    # host that passed every rail was the A100, and the H200, half-way below on its one 400 Gb/s
    # pair, was re-paired with it three times (at 200) and left unchecked, exit 3. A host good on
    # some rail at its line rate is a partner too, and one at its rate comes first.
    names = [f"node{i:04d}" for i in range(1, 6)]
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({
        "nodes": 5, "name_format": "node{:04d}", "seed": 11, "gpus_per_node": 8,
        "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.06}, "faults": [],
        "overrides": [{"hosts": names[1:2], "gpu_model": "NVIDIA H200"},
                      {"hosts": names[2:3], "gpu_model": "NVIDIA A100-SXM4-80GB"}]}))
    code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
    assert code == ExitCode.OK and not [f for f in document["findings"] if f["severity"] != "info"], output
    with_h200 = {link["b"] if link["a"] == "node0002" else link["a"] for link in document["links"]
                 if "node0002" in (link["a"], link["b"]) and link["line_rate_gbps"] == 400}
    assert len(with_h200) >= 2, with_h200


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_two_reference_peers_10_pct_slow_never_get_the_healthy_suspect_blamed(tmp_path, seed):
    # Every pair of n5, n2 and n7 runs at about 87 % of the line rate, around the 90 % floor.
    # A pair of the two slow references that noise lifted just over the floor showed both their
    # NICs good, and the healthy suspect n5, slow with both, was drained as a slow_nic.
    fleet = _job(tmp_path, 8, seed, 0.02, _slow_nic("n2", 0.9), _slow_nic("n7", 0.9))
    code, document, output = _sweep(tmp_path, fleet, "--pause", "--suspects", "n5", "--probes", "facts")
    focus = document["focus"]
    assert {key: focus[key] for key in ("suspects", "references")} == {"suspects": ["n5"], "references": ["n2", "n7"]}
    # Which two of three cannot be told from them alone: the job's other nodes are brought in, within
    # the stated bound, and either name the slow references or leave it unsettled; never 0, never n5.
    assert 0 < focus["extra_peers"]["pair_tests"] <= focus["extra_peers"]["max_pair_tests"]
    assert code in (ExitCode.UNCHECKED, ExitCode.FAIL), output
    assert _named(document, *LINK_BLAME) <= {("slow_nic", "n2", None), ("slow_nic", "n7", None)}
    assert {f["host"] for f in document["findings"] if f["action"] == "drain"} <= {"n2", "n7"}


@pytest.mark.parametrize(("nodes", "factor"), [(3, 0.92), (3, 0.9), (4, 0.9)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_at_4_pct_link_noise_a_slow_nic_is_found_across_the_jobs_rails(tmp_path, nodes, factor, seed):
    # Pair by pair at 4 % noise a NIC 8-10 % slow sits around the 90 % line-rate floor: a 3-node
    # job passed it (exit 0) more often than not. Its pairs over eight rails have a third of the noise.
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": nodes, "name_format": "n{}", "seed": seed,
                                "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": 0.04},
                                "faults": [_slow_nic("n1", factor)]}))
    code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
    assert code in (ExitCode.FAIL, ExitCode.OK if factor > 0.9 else ExitCode.FAIL), output
    nics = [f for f in document["findings"] if f["kind"] == "slow_nic"]
    assert [f["host"] for f in nics] == ["n1"] and nics[0]["confirmed"], output
    assert not [f for f in document["findings"] if f["action"] == "drain" and f["host"] != "n1"]


@pytest.mark.parametrize("nodes, slower", [(3, ("n2",)), (4, ("n3",)), (5, ("n1", "n4"))])
def test_a_job_network_below_its_line_rate_with_a_nic_slower_still_names_both_and_drains_only_that_nic(
        tmp_path, nodes, slower):
    # every NIC at 58 % of the line rate, the slower ones at 46 %: the three others were left
    # unchecked and the network unnamed, where the job's level is clear from most of its hosts
    faults = [_slow_nic(f"n{index}", 0.47 if f"n{index}" in slower else 0.59) for index in range(1, nodes + 1)]
    code, document, output = _preflight(tmp_path, _fleet(tmp_path, nodes, *faults))
    assert code == ExitCode.FAIL, output
    assert _named(document, *LINK_BLAME, "unchecked") == {("slow_nic", host, None) for host in slower}, output
    (network,) = [f for f in document["findings"] if f["kind"] == "slow_network"]
    assert (network["severity"], network["host"], network["confirmed"]) == ("fail", None, True)
    assert sorted(document["impact"]["exclude"]) == sorted(slower)
    assert [drain["command"].split("NodeName=")[1].split()[0].strip("'") for drain in document["preflight"]["drain"]] \
        == [fold_hosts(slower)]


@pytest.mark.parametrize(("nodes", "seed"), [(3, 3), (5, 2), (5, 4)])
def test_a_whole_rail_20_pct_slow_in_a_small_job_at_4_pct_link_noise_is_its_network_on_that_rail(
        tmp_path, nodes, seed):
    # Every NIC 20 % slow on rail 3 alone. Judged pair by pair against its other rails, one pair of
    # five sat within chance now and then and the job passed, exit 0; and the rail's own dip,
    # near the outlier clip, widened the noise it was judged by (7 % for 4 %): a 3-node job passed.
    names = [f"node{i:04d}" for i in range(1, nodes + 1)]
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({
        "nodes": nodes, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": seed,
        "noise": {"gemm_cv": 0.02, "membw_cv": 0.02, "link_cv": 0.04},
        "faults": [{"kind": "slow_nic", "host": host, "rail": 3, "factor": 0.8} for host in names]}))
    code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
    assert code == ExitCode.FAIL, output
    (network,) = [f for f in document["findings"] if f["kind"] == "slow_network"]
    assert (network["severity"], network["metric"]) == ("fail", "link.perftest.rail3"), network
    assert not [f for f in document["findings"] if f["host"] is not None and f["severity"] != "info"], output


def test_a_2_node_jobs_pair_dipping_under_the_floor_on_one_rail_at_6_pct_link_noise_fails_no_network(tmp_path):
    # One pair is all a 2-node job has: its rails' noise rests on seven degrees of freedom, and a
    # dip 3.1 of such sigmas deep on rail 7 failed the network as a whole. The Student bar holds it.
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({
        "nodes": 2, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": 10,
        "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.06}, "faults": []}))
    code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
    assert not [f for f in document["findings"] if f["kind"] == "slow_network"], output
    assert code == ExitCode.OK, output


def _link_runs(document: dict) -> dict[tuple[str, str], int]:
    """How many times each pair ran (one run measures every rail: rail 0's figures counted)."""
    runs: dict[tuple[str, str], int] = {}
    for link in document["links"]:
        if link["rail"] == 0:
            pair = (link["a"], link["b"])
            runs[pair] = runs.get(pair, 0) + 1
    return runs


def test_at_6_pct_link_noise_a_small_job_runs_its_pairs_again_until_a_nic_10_pct_slow_is_found(tmp_path):
    # One run of a 3-node job at 6 % link noise puts a NIC 10 % slow about 3 sigma under its one
    # healthy pair, at a bar of 3.3: such jobs passed, exit 0, in 3 of 20 (6 of 20 not failed).
    # Too noisy for one run to find a NIC twice the link deficit slow, the job runs every pair
    # again (three runs at most), and the NIC is found on them all.
    found, runs = 0, []
    for seed in range(1, 21):
        fleet = _job(tmp_path, 3, seed, 0.06, _slow_nic("n3", 0.9))
        code, document, output = _sweep(tmp_path, fleet, "--probes", "facts")
        assert code != ExitCode.OK, output  # never a pass
        assert not {f["host"] for f in document["findings"] if f["action"] == "drain"} - {"n3"}, output
        found += code == ExitCode.FAIL and _named(document, *LINK_BLAME) == {("slow_nic", "n3", None)}
        runs.append(min(_link_runs(document).values()))
    assert found >= 19, found
    assert max(runs) >= 3 and min(runs) >= 2, runs  # every pair again, the healthy one too (the NIC's level)


def test_a_quiet_small_job_runs_each_pair_once_and_a_noisy_healthy_one_runs_them_again_naming_nothing(tmp_path):
    for seed, link_cv in ((1, 0.01), (2, 0.01), (1, 0.06), (2, 0.06), (3, 0.06)):
        code, document, output = _sweep(tmp_path, _job(tmp_path, 3, seed, link_cv), "--probes", "facts")
        assert code == ExitCode.OK and not [f for f in document["findings"] if f["severity"] != "info"], output
        runs = _link_runs(document)
        assert set(runs.values()) == {1} if link_cv < 0.02 else min(runs.values()) >= 2, runs


@pytest.mark.parametrize("seed", range(1, 11))
def test_a_paused_jobs_hosts_all_at_the_line_rate_floor_bring_in_further_peers(tmp_path, seed):
    # Two references with NICs 10 % slow at 6 % link noise: every pair of the suspect and its
    # references runs at 88 % of the line rate, around the 90 % floor, and alike. The three hosts
    # showed nothing below their own level, and the suspect and both references passed, exit 0
    # (seed 7). With every pair at the floor no host is shown good: the job's other nodes decide.
    fleet = _job(tmp_path, 16, seed, 0.06, _slow_nic("node004", 0.9), _slow_nic("node013", 0.9), names="node{:03d}")
    code, document, output = _sweep(tmp_path, fleet, "--pause", "--suspects", "node005", "--probes", "facts")
    assert document["focus"]["references"] == ["node004", "node013"]
    assert code in (ExitCode.FAIL, ExitCode.UNCHECKED), output
    assert 0 < document["focus"]["extra_peers"]["pair_tests"] <= document["focus"]["extra_peers"]["max_pair_tests"]
    assert "node005" not in {f["host"] for f in document["findings"] if f["severity"] != "info"}, output
    assert {f["host"] for f in document["findings"] if f["action"] == "drain"} <= {"node004", "node013"}
    assert _named(document, *LINK_BLAME) == {("slow_nic", "node004", None), ("slow_nic", "node013", None)}


def test_a_paused_job_with_no_further_peer_and_every_pair_at_the_floor_is_unsettled_not_passed(tmp_path):
    fleet = _job(tmp_path, 3, 4, 0.02, _slow_nic("n1", 0.9), _slow_nic("n3", 0.9))
    code, document, output = _sweep(tmp_path, fleet, "--pause", "--suspects", "n2", "--probes", "facts")
    assert code == ExitCode.UNCHECKED, output
    assert not [f for f in document["findings"] if f["action"] == "drain"], output
    assert "no further peer" in " ".join(output.split())


@pytest.mark.parametrize("nodes", [3, 4])
def test_a_small_jobs_network_at_85_pct_of_its_line_rate_is_its_network_never_one_nic(tmp_path, nodes):
    # Every NIC alike at 85 % of the line rate, the floor at 90 %, 4 % link noise: rail by rail a
    # handful of pairs straddle the floor, and on a third of the rails some pair read over it. Those
    # rails judged the equally slow NICs against each other: one was drained as a slow_nic in 3 of
    # 10 such 4-node jobs, and hosts were left unchecked. Over the eight rails every pair is under it.
    factor = round(0.85 * 400 / 392, 4)
    for seed in range(1, 9):
        fleet = _job(tmp_path, nodes, seed, 0.04, *(_slow_nic(f"n{i}", factor) for i in range(1, nodes + 1)))
        code, document, output = _sweep(tmp_path, fleet, "--probes", "facts")
        flagged = {(f["kind"], f["severity"]) for f in document["findings"] if f["severity"] in ("warn", "fail")}
        assert code == ExitCode.FAIL and flagged == {("slow_network", "fail")}, output
        assert not [f for f in document["findings"] if f["action"] == "drain"], output


@pytest.mark.parametrize("nodes", [8, 16])
def test_a_fleets_network_at_85_pct_of_its_line_rate_is_its_network_on_every_rail(tmp_path, nodes):
    # The same in a fleet (6 hosts or more): rail by rail its hosts' best pairs reached over the
    # floor by chance, and an 8-node sweep passed, exit 0, while 16 nodes were slow_network on a
    # few rails only, a warning, exit 3.
    factor = round(0.85 * 400 / 392, 4)
    for seed in (2, 4, 6):
        fleet = _job(tmp_path, nodes, seed, 0.04, *(_slow_nic(f"n{i}", factor) for i in range(1, nodes + 1)))
        code, document, output = _sweep(tmp_path, fleet, "--probes", "facts")
        assert code == ExitCode.FAIL, output
        assert all(group["below_floor"] for group in document["link_groups"]), document["link_groups"]
        assert not [f for f in document["findings"] if f["action"] == "drain"], output


def test_a_16_node_networks_confirm_rounds_at_6_pct_link_noise_never_lift_it_over_its_floor(tmp_path):
    # 85 % of the line rate on every NIC, the floor at 90 %, 6 % link noise (seed 16 of the
    # detection benchmark's jobnet 16n@85 at CV 3 %): the screen found the family below its floor;
    # its confirm rounds gave the hosts more pairs, the upper half of their best pairs (each the
    # highest of more pair means) read 0.1 % over the floor, and the job passed, exit 0, nothing said.
    factor = round(0.85 * 400 / 392, 4)
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 16, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": 16,
                                "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.06},
                                "faults": [_slow_nic(f"node{i:04d}", factor) for i in range(1, 17)]}))
    code, document, output = _sweep(tmp_path, str(path), "--probes", "facts")
    assert code == ExitCode.FAIL and {f["kind"] for f in document["findings"]} == {"slow_network"}, output
    assert not [f for f in document["findings"] if f["action"] == "drain"], output
