"""LLDP neighbours in the node facts: lldpctl's JSON parsed from the captures in tests/data/lldp/
(see its README), each neighbour's rail, the bounds on what a neighbour sends, and the facts probe
with and without lldpctl."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from probes import hostfacts, lldp
from probes.context import ProbeContext
from probes.topology import IbPort, Rail

DATA = Path(__file__).resolve().parents[2] / "data" / "lldp"
ONE = DATA / "node-one-roce-neighbour.json"
FOUR = DATA / "node-four-neighbours.json"
NONE = DATA / "node-no-neighbour.json"


def test_every_capture_is_covered():
    assert set(DATA.glob("*.json")) == {ONE, FOUR, NONE}


def test_one_neighbour_the_interface_object_form():
    assert lldp.parse_lldpctl_json(ONE.read_text()) == [
        lldp.LldpNeighbour("ens1f0np0", "leaf-r0-07", "swp17s1", "10.20.0.107")]


def test_several_neighbours_the_list_form():
    neighbours = lldp.parse_lldpctl_json(FOUR.read_text())
    assert [n.to_dict() for n in neighbours] == [
        # a MAC port ID: its description names it; the management address that is not link-local
        {"interface": "eno1", "switch": "oob-sw-r07", "port": "Ethernet31", "mgmt_ip": "10.0.7.1", "rail": None},
        {"interface": "ens1f0np0", "switch": "leaf-r0-07", "port": "swp17s1", "mgmt_ip": "10.20.0.107", "rail": None},
        {"interface": "ens2f0np0", "switch": "leaf-r1-07", "port": "swp17s1", "mgmt_ip": "10.20.1.107", "rail": None},
        # no system name: its chassis is not keyed by one
        {"interface": "ens3f0np0", "switch": None, "port": "a0:88:c2:0e:55:10", "mgmt_ip": None, "rail": None},
    ]


def test_no_neighbour():
    assert lldp.parse_lldpctl_json(NONE.read_text()) == []
    assert lldp.parse_lldpctl_json('{"lldp": []}') == []


@pytest.mark.parametrize("text", ["", "lldpctl: unable to connect to lldpd daemon", "[1, 2]", '{"other": {}}',
                                  '{"lldp": "running"}'])
def test_output_that_is_not_lldpds_json_is_refused(text: str):
    with pytest.raises(lldp.LldpOutputError):
        lldp.parse_lldpctl_json(text)


def test_what_a_neighbour_sends_is_bounded():
    entry = {"chassis": {"s" * 10_000 + "\x1b[2J": {"mgmt-ip": ["not-an-address", "fe80::1"]}},
             "port": {"id": {"type": "ifname", "value": "p\nq"}, "descr": 5}}
    many = {"lldp": {"interface": [{f"eth{index}": entry} for index in range(500)]}}
    neighbours = lldp.parse_lldpctl_json(json.dumps(many))
    assert len(neighbours) == lldp.MAX_NEIGHBOURS
    first = neighbours[0]
    assert first.switch is not None and len(first.switch) == lldp.MAX_TEXT and first.switch.isprintable()
    assert (first.port, first.mgmt_ip) == ("p?q", "fe80::1")  # a link-local address when there is no other
    odd = {"lldp": {"interface": {"eth0": {"chassis": ["x", 7], "port": "gone"}, "eth1": "not an object"}}}
    assert lldp.parse_lldpctl_json(json.dumps(odd)) == [lldp.LldpNeighbour("eth0", None, None, None)]


def test_each_interface_of_a_rails_rdma_device_gets_that_rail():
    ports = [IbPort("mlx5_0", 1, 400.0, "ACTIVE", "Ethernet", ("ens1f0np0",)),
             IbPort("mlx5_1", 1, 400.0, "ACTIVE", "Ethernet", ("ens2f0np0",)),
             IbPort("mlx5_2", 1, 400.0, "ACTIVE", "Ethernet", ())]
    rails = [Rail(1, 1, "mlx5_1", 1, "PIX", 400.0), Rail(0, 0, "mlx5_0", 1, "PIX", 400.0),
             Rail(2, 2, "mlx5_0", 1, "NODE", 400.0, shared=True)]  # two rails on mlx5_0: the first counts
    rail_of = lldp.rails_by_interface(rails, ports)
    assert rail_of == {"ens1f0np0": 0, "ens2f0np0": 1}
    neighbours = lldp.with_rails(lldp.parse_lldpctl_json(FOUR.read_text()), rail_of)
    assert [(n.interface, n.rail) for n in neighbours] == [("eno1", None), ("ens1f0np0", 0), ("ens2f0np0", 1),
                                                          ("ens3f0np0", None)]


def _fake_lldpctl(tmp_path: Path, body: str) -> str:
    tool = tmp_path / "lldpctl"
    tool.write_text(f"#!{sys.executable}\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return str(tool)


def _roce_sysfs(root: Path) -> Path:
    for hca, netdev in (("mlx5_0", "ens1f0np0"), ("mlx5_1", "ens2f0np0")):
        port = root / "class" / "infiniband" / hca / "ports" / "1"
        port.mkdir(parents=True)
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "link_layer").write_text("Ethernet\n")
        (root / "class" / "infiniband" / hca / "device" / "net" / netdev).mkdir(parents=True)
    return root


def test_the_neighbours_of_a_node_without_gpus_get_one_rail_per_rdma_device(tmp_path: Path):
    tool = _fake_lldpctl(tmp_path, f"import sys; assert sys.argv[1:] == ['-f', 'json']; "
                                   f"print(open({str(FOUR)!r}).read())")
    sysfs = _roce_sysfs(tmp_path / "sys")
    assert [(n["interface"], n["switch"], n["rail"]) for n in lldp.read_lldp({}, 0, str(sysfs), tool) or []] == [
        ("eno1", "oob-sw-r07", None), ("ens1f0np0", "leaf-r0-07", 0), ("ens2f0np0", "leaf-r1-07", 1),
        ("ens3f0np0", None, None)]
    (record,) = list(hostfacts.run(ProbeContext(), sysfs_root=sysfs, lldpctl=tool))
    assert [n["switch"] for n in record.details["lldp"]] == ["oob-sw-r07", "leaf-r0-07", "leaf-r1-07", None]


@pytest.mark.parametrize("body", [
    "import sys; print('lldpctl: unable to connect to lldpd daemon'); sys.exit(1)",  # lldpd not running
    "print('not json')",
    "import time; time.sleep(30)",  # past its time
])
def test_a_failing_lldpctl_gives_no_neighbours(tmp_path: Path, body: str):
    started = time.monotonic()
    assert lldp.read_lldp({}, 0, str(tmp_path), _fake_lldpctl(tmp_path, body), timeout_s=0.5) is None
    assert time.monotonic() - started < 5


def test_a_failing_lldpctl_leaves_no_lldp_fact(tmp_path: Path):
    tool = _fake_lldpctl(tmp_path, "import sys; sys.exit(1)")
    assert "lldp" not in next(hostfacts.run(ProbeContext(), sysfs_root=tmp_path, lldpctl=tool)).details


def test_without_lldpctl_there_is_no_lldp_fact(tmp_path: Path):
    assert lldp.query_lldpctl(str(tmp_path / "no-lldpctl")) is None
    (record,) = list(hostfacts.run(ProbeContext(), sysfs_root=tmp_path, lldpctl=str(tmp_path / "no-lldpctl")))
    assert "lldp" not in record.details
