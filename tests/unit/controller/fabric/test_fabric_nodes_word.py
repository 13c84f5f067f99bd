"""What the nodes say of the fabric, and how far it is believed: traced hops named by the topology's
switch addresses (gpudiag.fabric.tracing) and LLDP neighbours that fill what a topology file leaves
out without overruling it (gpudiag.fabric.lldp); and the fleet file's fabric section, checked."""

from __future__ import annotations

import json

import pytest
from fabrics import clos_plane, topology_of

from gpudiag.errors import InputError
from gpudiag.fabric.lldp import with_lldp
from gpudiag.fabric.model import Attachment, Plane, Switch
from gpudiag.fabric.tracing import TopologyTracer
from gpudiag.sim.fleetfile import parse_fleet


def _addressed() -> Plane:
    plane = clos_plane(leaves=3, spines=2)
    switches = tuple(Switch(s.name, s.tier, addresses=(f"10.9.{i}.1", f"fd00::{i}")) for i, s in
                     enumerate(plane.switches, start=1))
    return Plane(None, switches, plane.links, plane.attachments)


def test_traced_hops_are_named_by_the_switches_addresses_and_a_hop_that_names_none_is_no_path():
    tracer = TopologyTracer(topology_of(_addressed()))
    assert tracer.hops_to_trace("n1", "n5") == 1 and tracer.hops_to_trace("n1", "n2") == 0
    spine2 = "10.9.5.1"  # leaf1..3 are 1..3, spine1 and spine2 4 and 5
    assert tracer.switches("n1", "n5", [spine2]) == ("leaf1", "spine2", "leaf3")
    assert tracer.switches("n1", "n5", ["fd00:0::5"]) == ("leaf1", "spine2", "leaf3")  # one address, two spellings
    assert tracer.switches("n1", "n5", [None]) is None
    assert tracer.switches("n1", "n5", ["10.99.0.1"]) is None and tracer.switches("n1", "n5", ["not an ip"]) is None


def test_without_switch_addresses_nothing_is_traced():
    assert TopologyTracer(topology_of(clos_plane(leaves=3, spines=2))).hops_to_trace("n1", "n5") == 0


def test_lldp_places_a_node_the_file_leaves_out_and_never_moves_one_it_places():
    plane = clos_plane(leaves=2, spines=2, hosts_per_leaf=2)
    left_out = Plane(None, plane.switches, plane.links, plane.attachments[:-1])  # n4 not in the file
    facts = [("n4", {"lldp": [{"interface": "eth2", "switch": "leaf2", "port": "7", "rail": None}]}),
             ("n1", {"lldp": [{"interface": "eth2", "switch": "leaf2", "port": "9", "rail": None}]}),
             ("n9", {"lldp": [{"interface": "eth2", "switch": "spine1", "port": "1", "rail": None}]})]
    topology, notes = with_lldp(topology_of(left_out), facts)
    plane = topology.planes[0]
    assert plane.attachment_of["n4"] == Attachment("n4", "leaf2", "7", nic="eth2")
    assert plane.leaf_of("n1") == "leaf1"  # the file stands
    assert any("n1: LLDP on eth2 names leaf2" in note for note in notes)
    assert any("n9: LLDP names spine1, which is no leaf" in note for note in notes) and "n9" not in plane.attachment_of


def test_lldp_that_would_put_two_nodes_on_one_port_places_neither_twice():
    plane = clos_plane(leaves=2, spines=2, hosts_per_leaf=2)  # n1 on leaf1 port 1
    facts = [("x", {"lldp": [{"interface": "eth0", "switch": "leaf1", "port": "1", "rail": None}]})]
    topology, notes = with_lldp(topology_of(plane), facts)
    assert "x" not in topology.planes[0].attachment_of and "cannot be placed" in notes[0]


def _fleet(fabric: dict, faults: list | None = None) -> dict:
    return {"nodes": 16, "fabric": fabric, "faults": faults or []}


@pytest.mark.parametrize(("fabric", "faults", "message"), [
    ({"leaves": 4}, None, "fabric.spines: missing"),
    ({"leaves": 4, "spines": 2, "pods": 2}, None, "fabric.cores: 2 pods need cores"),
    ({"leaves": 5, "spines": 2, "pods": 2, "cores": 1}, None, "do not split into 2 pods"),
    ({"leaves": 4, "spines": 2, "planes": "mesh"}, None, '"mesh" is not a plane layout'),
    ({"leaves": 4, "spines": 2}, [{"kind": "slow_uplink", "a": "r0-leaf09", "b": "r0-spine01", "factor": 0.5}],
     "faults[0].a: 'r0-leaf09' is no switch"),
    ({"leaves": 4, "spines": 2}, [{"kind": "slow_uplink", "a": "r0-leaf01", "b": "r0-leaf02", "factor": 0.5}],
     "no link joins r0-leaf01 and r0-leaf02"),
    ({"leaves": 4, "spines": 2}, [{"kind": "uplink_down", "a": "r0-leaf01", "b": "r0-spine01", "cables": 1}],
     "has one cable"),
    ({"leaves": 4, "spines": 2, "uplinks": 2},
     [{"kind": "uplink_down", "a": "r0-leaf01", "b": "r0-spine01", "cables": 2}], "out of range"),
])
def test_a_fleet_files_fabric_section_is_checked_with_one_line_naming_the_field(fabric, faults, message):
    with pytest.raises(InputError, match=None) as raised:
        parse_fleet(_fleet(fabric, faults), "fleet.json")
    assert message in str(raised.value) and str(raised.value).startswith("fleet.json: ")


def test_a_fabric_fault_needs_a_fabric_section():
    with pytest.raises(InputError, match="needs a fabric section"):
        parse_fleet({"nodes": 4, "faults": [{"kind": "slow_switch", "switch": "spine1", "factor": 0.5}]}, "f.json")


def test_a_fleets_fabric_is_a_topology_with_a_plane_per_rail_or_one_shared():
    per_rail = parse_fleet(_fleet({"leaves": 4, "spines": 2}), "f").topology
    assert [p.rail for p in per_rail.planes] == list(range(8)) and per_rail.plane(3).leaf_of("node005") == "r3-leaf02"
    shared = parse_fleet(_fleet({"leaves": 4, "spines": 2, "planes": "shared"}), "f").topology
    assert [p.rail for p in shared.planes] == [None] and shared.plane(5).leaf_of("node016") == "leaf04"
    assert json.dumps([s.name for s in shared.planes[0].switches]).count("spine") == 2
