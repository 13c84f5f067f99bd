"""Slurm node lists ($SLURM_JOB_NODELIST) and node states (scontrol show node -o, captured from Slurm 22.05)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpudiag.errors import InputError
from gpudiag.slurm.nodelist import expand_nodelist, in_slurm_job, job_hosts, job_nodelist
from gpudiag.slurm.nodes import (
    NodeState,
    ReasonStamp,
    configured_gpus,
    launch_problems,
    parse_show_node,
    query_nodes,
)

SHOW_NODE = (Path(__file__).parents[3] / "data" / "slurm" / "scontrol-show-node.txt").read_text()
SHOW_NODE_GRES = (Path(__file__).parents[3] / "data" / "slurm" / "scontrol-show-node-gres.txt").read_text()


@pytest.mark.parametrize(("nodelist", "nodes"), [
    ("gpu[001-004,010],cpu1", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010", "cpu1"]),
    ("n[1-2],n[7-8]", ["n1", "n2", "n7", "n8"]),
    ("node-ib[09-11]", ["node-ib09", "node-ib10", "node-ib11"]),
    ("rack[1-2]-gpu[1-2]", ["rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]),
    ("single", ["single"]),
])
def test_folded_node_lists_expand_in_their_order(nodelist: str, nodes: list[str]) -> None:
    assert expand_nodelist(nodelist) == nodes


def test_a_node_list_that_names_a_file_here_is_still_a_node_list(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "n1").write_text("not-a-host\n")
    assert expand_nodelist("n1") == ["n1"]


@pytest.mark.parametrize("nodelist", ["gpu[1-", "gpu[3-1]", "a,,b"])
def test_a_bad_node_list_is_an_input_error_naming_it(nodelist: str) -> None:
    with pytest.raises(InputError, match="not a valid Slurm node list"):
        expand_nodelist(nodelist)


def test_the_job_hosts_come_from_slurm_job_nodelist_then_slurm_nodelist() -> None:
    assert [h.host for h in job_hosts({"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_NODELIST": "x"})] == [
        "gpu01", "gpu02"]
    assert job_nodelist({"SLURM_NODELIST": "cpu[1-2]"}) == "cpu[1-2]"
    assert job_nodelist({}) is None
    with pytest.raises(InputError, match=r"\$SLURM_JOB_NODELIST is not set"):
        job_hosts({"SLURM_JOB_NODELIST": "  "})


def test_scontrol_show_node_gives_state_reason_and_address() -> None:
    nodes = parse_show_node(SHOW_NODE)
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]  # "Node n9 not found" is no node
    assert nodes["n1"] == NodeState("n1", "IDLE", None, "vm")
    # the reason is everything after Reason= ('=' signs too), less Slurm's [user@time] stamp, kept apart
    stamp = nodes["n2"].stamp
    assert nodes["n2"] == NodeState("n2", "IDLE+DRAIN", "gpudiag: slow_gpu GPU 3 gemm.tflops -18%: value=611 of 742",
                                    "vm", stamp)
    assert stamp is not None and (stamp.user, stamp.text) == ("root", "root@2026-11-25T01:30:40")
    assert stamp.epoch == time.mktime((2026, 11, 25, 1, 30, 40, 0, 0, -1))  # this machine's time zone, as scontrol's
    assert nodes["n2"].drained and not nodes["n1"].drained
    assert nodes["n3"].reason == "cable pulled" and nodes["n3"].words == {"DOWN"}


def test_each_nodes_configured_gpus_come_from_its_gres_and_mig_slices_are_no_gpus() -> None:
    nodes = parse_show_node(SHOW_NODE_GRES)
    assert {name: (node.gres, node.gpus) for name, node in nodes.items()} == {
        "n1": ("gpu:h100:8(S:0)", 8), "n2": ("gpu:8", 8), "n3": ("gpu:a100:2,gpu:h100:2", 4),
        "n4": ("gpu:1g.10gb:7,shard:1g.10gb:16", None)}  # seven MIG slices: not seven GPUs
    assert {node.gpus for node in parse_show_node(SHOW_NODE).values()} == {None}  # Gres=(null)
    assert nodes["n1"].state == "IDLE" and nodes["n1"].address == "vm"


@pytest.mark.parametrize(("gres", "gpus"), [
    ("gpu:h100:4(S:0,2),gpu:h100:4(S:1,3)", 8), ("gpu", 1), ("shard:8", None), ("gpu:no_consume:4", 4),
    ("gpu:4K", None), ("gpu:3g.40gb:2,gpu:a100:1", None), ("mps:200,gpu:2(S:0-1)", 2), (None, None), ("", None)])
def test_configured_gpus_read_every_form_of_gres(gres: str | None, gpus: int | None) -> None:
    assert configured_gpus(gres) == gpus


def test_a_job_or_its_prolog_is_told_by_slurm_job_id() -> None:
    assert in_slurm_job({"SLURM_JOB_ID": "42"}) and not in_slurm_job({"SLURM_JOB_ID": " "})
    assert not in_slurm_job({"SLURM_NODELIST": "n1"})


def test_what_keeps_srun_off_a_node_depends_on_the_allocation() -> None:
    nodes = parse_show_node(SHOW_NODE)
    outside = launch_problems(["n1", "n2", "n3", "n9"], nodes, allocation=None)
    assert sorted(outside) == ["n2", "n3", "n9"]
    assert outside["n3"] == 'n3 is DOWN in Slurm (reason: "cable pulled"): srun cannot start a task there'
    assert "a new job cannot start there" in outside["n2"]
    assert outside["n9"] == "Slurm knows no node called n9"
    # inside a job that holds the draining node, a step still runs there; a node outside the job is refused
    inside = launch_problems(["n1", "n2", "n4"], nodes, allocation=frozenset({"n1", "n2"}))
    assert list(inside) == ["n4"] and "not in this job's allocation (n[1-2])" in inside["n4"]


@pytest.mark.parametrize(("state", "usable"), [
    ("IDLE", True), ("MIXED", True), ("ALLOCATED", True), ("IDLE+DRAIN", False), ("DOWN+NOT_RESPONDING", False),
    ("IDLE+NOT_RESPONDING", False), ("IDLE+POWERED_DOWN", False), ("MIXED+DRAIN", False), ("FUTURE", False),
])
def test_states_outside_an_allocation(state: str, usable: bool) -> None:
    assert (NodeState("g1", state).launch_problem(None) is None) == usable


@pytest.mark.parametrize(("line", "reason", "stamp"), [
    # SLURM_TIME_FORMAT=%s, as gpudiag asks: seconds since the epoch
    ("NodeName=n1 State=IDLE+DRAIN Reason=gpudiag: gemm: x [root@1795944394]", "gpudiag: gemm: x",
     ReasonStamp("root", 1795944394.0, "root@1795944394")),
    # a reason that itself ends in brackets: only Slurm's own last stamp is taken off
    ("NodeName=n1 State=IDLE+DRAIN Reason=moved [a@b] [alice@1795944394]", "moved [a@b]",
     ReasonStamp("alice", 1795944394.0, "alice@1795944394")),
    # a time in a form gpudiag did not ask for (SLURM_TIME_FORMAT=relative in a wrapper): no time
    ("NodeName=n1 State=IDLE+DRAIN Reason=x [root@Tomorr 10:00]", "x", ReasonStamp("root", None, "root@Tomorr 10:00")),
    ("NodeName=n1 State=IDLE+DRAIN Reason=no stamp at all", "no stamp at all", None),
    ("NodeName=n1 State=IDLE Reason=(null)", None, None),
])
def test_the_reason_s_stamp_says_who_set_it_and_when(line: str, reason: str | None, stamp: ReasonStamp | None) -> None:
    node = parse_show_node(line)["n1"]
    assert (node.reason, node.stamp) == (reason, stamp)


def test_gpudiag_asks_scontrol_for_times_in_seconds_since_the_epoch(tmp_path: Path) -> None:
    scontrol = tmp_path / "scontrol"
    scontrol.write_text('#!/bin/sh\n[ "$SLURM_TIME_FORMAT" = %s ] && when=1795944394 || when=2026-11-29T10:00:00\n'
                        'echo "NodeName=n1 State=IDLE+DRAIN Reason=x [root@$when]"\n')
    scontrol.chmod(0o755)
    stamp = query_nodes(["n1"], scontrol=str(scontrol))["n1"].stamp
    assert stamp is not None and stamp.epoch == 1795944394.0
