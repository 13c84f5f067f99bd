"""``--suspects``: parsing hosts and ranks, choosing reference peers, and the schedule order."""

from __future__ import annotations

import pytest

from gpudiag.errors import InputError
from gpudiag.hosts import HostSpec
from gpudiag.pause import FocusRequest, focus_hosts
from gpudiag.pause.focus import choose_references, parse_suspects, schedule_order

HOSTS = [HostSpec(f"node{index:02d}") for index in range(12)]
LABELS = [host.label for host in HOSTS]


def test_references_are_spread_over_the_unsuspected_hosts_and_deterministic():
    assert choose_references(LABELS, ["node03"], 2) == ["node02", "node09"]
    assert choose_references(LABELS, ["node03", "node04"], 2) == ["node01", "node05", "node08", "node10"]
    assert choose_references(LABELS, LABELS[:10], 2) == ["node10", "node11"]  # fewer left than asked
    assert choose_references(LABELS, ["node00"], 0) == []


def test_each_suspect_comes_before_its_references():
    assert schedule_order(["s1", "s2"], ["a", "b", "c"], 2) == ["s1", "a", "b", "s2", "c"]
    assert schedule_order(["s1"], ["a", "b", "c"], 1) == ["s1", "a", "b", "c"]


def test_suspects_by_set_by_file_and_by_rank_in_host_list_order(tmp_path):
    assert parse_suspects("node[07,02]", HOSTS) == ["node02", "node07"]
    listed = tmp_path / "suspects.txt"
    listed.write_text("# from the job's straggler detector\nnode11\nnode05\n")
    assert parse_suspects(str(listed), HOSTS) == ["node05", "node11"]
    assert parse_suspects("rank:0-2,9", HOSTS) == ["node00", "node01", "node02", "node09"]


def test_a_suspect_named_without_its_user_or_port_matches_by_host_name():
    hosts = [HostSpec("gpu1", user="ops", port=2222), HostSpec("gpu2", port=2222)]
    assert parse_suspects("gpu2", hosts) == ["gpu2:2222"]


@pytest.mark.parametrize(("text", "says"), [
    ("node99", "node99 is not one of the 12 hosts swept (node[00-11])"),
    ("rank:12", "rank 12 is out of range"),
    ("rank:5-3", "rank 5-3 is out of range"),
    ("-", "stdin is --hosts'"),
    ("no/such/file", "no such hosts file"),
])
def test_bad_suspects_say_what_and_how_to_fix(text, says):
    with pytest.raises(InputError, match="--suspects") as raised:
        parse_suspects(text, HOSTS)
    assert says in str(raised.value)


def test_focus_hosts_keeps_every_host_without_suspects():
    assert focus_hosts(HOSTS, None) == (HOSTS, None)
    hosts, focus = focus_hosts(HOSTS, FocusRequest("node05", 1))
    assert [host.label for host in hosts] == ["node05", "node06"]
    assert focus is not None and focus.to_dict() == {"suspects": ["node05"], "references": ["node06"]}
