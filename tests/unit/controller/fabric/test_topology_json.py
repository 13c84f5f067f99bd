"""gpudiag.topology/1 files and the lldpctl -f json captures they include (tests/data/topology):
planes written out, captures of other formats included on their rails, lldpctl captures of
switches and a node merged into one plane; each broken (a link to a switch no plane has, a key
twice, a rail given twice, a node on a port taken, a capture cut short) an InputError naming
the file, the line and the JSON path. And the document gpudiag.fabric.render writes, which
reads back as the same topology."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from gpudiag.errors import InputError
from gpudiag.fabric.readers import load_rails_map, load_topology
from gpudiag.fabric.render import topology_document, topology_text

DATA = Path(__file__).resolve().parents[3] / "data" / "topology"
POD = DATA / "pod.topology.json"
ROCE = DATA / "roce.topology.json"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A copy of the captures, to break."""
    copy = tmp_path / "topology"
    shutil.copytree(DATA, copy)
    return copy


def _error(path: Path) -> str:
    with pytest.raises(InputError) as caught:
        load_topology([str(path)])
    message = str(caught.value)
    assert "\n" not in message
    return message


def _edit(path: Path, change) -> None:
    """Rewrite the JSON file at ``path`` as ``change`` (a function of its value) leaves it."""
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value, indent=2))


def _line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().split("\n"), start=1) if needle in line)


# --- gpudiag.topology/1 ----------------------------------------------------------------------


def test_a_pod_file_includes_a_capture_by_the_rails_map_a_conf_on_two_rails_and_a_plane_of_its_own():
    topology = load_topology([str(POD)])
    assert [plane.rail for plane in topology.planes] == [0, 1, 2, 3, 4]
    assert topology.planes[1].attachment_of["gpu-a03"].nic == "mlx5_3"  # "rails": mlx5_3 is rail 1
    assert topology.planes[2].switches == topology.planes[3].switches  # topology.conf copied to rails 2 and 3
    rail4 = topology.planes[4]
    assert {s.name: s.tier for s in rail4.switches} == {"r4-leaf01": 1, "r4-leaf02": 1, "r4-spine01": 2}
    # a link given in canonical order or not, by its cables or by a count
    assert [(c.port_a, c.port_b) for c in rail4.link_by_key[("r4-leaf01", "r4-spine01")].cables] == [("33", "1"),
                                                                                                     ("34", "2")]
    counted = rail4.link_by_key[("r4-leaf02", "r4-spine01")]
    assert (counted.count, counted.capacity_gbps) == (2, 800.0)
    assert rail4.attachment_of["gpu-a01"].port == "1"
    assert rail4.switch_by_name["r4-spine01"].lid == 40


def test_lldp_captures_of_switches_and_a_node_merge_into_the_files_own_plane():
    (plane,) = load_topology([str(ROCE)]).planes
    assert plane.rail == 0
    assert plane.hosts_under == {"roce-leaf01": ("gpu-c01", "gpu-c02"), "roce-leaf02": ("gpu-c03", "gpu-c04")}
    # leaf02's uplinks come from its own capture and spine01's, each cable once
    assert [(c.port_a, c.port_b) for c in plane.link_by_key[("roce-leaf02", "roce-spine01")].cables] == [
        ("swp31", "swp2")]
    assert plane.attachment_of["gpu-c04"].port == "swp2"  # from the node's own capture
    assert plane.attachment_of["gpu-c03"].nic == "ens1f0np0"  # a host's port id is its MAC: its descr names it
    # the file's addresses and those the captures' neighbours advertise, together
    assert plane.address_owner["fe80::9e05:91ff:feb2:11"] == "roce-spine01"
    assert plane.address_owner["10.30.2.1"] == "roce-leaf02"
    assert plane.oversubscription("roce-leaf01") == 1.0
    assert plane.oversubscription("roce-leaf02") is None  # LLDP gives no rates


def _content(topology) -> list[tuple]:
    """What a topology says, without the source lines its parts were read from."""
    return [(p.rail, sorted((s.name, s.tier, s.lid, s.guid, s.addresses) for s in p.switches),
             [(link.a, link.b, link.cables) for link in p.links],
             sorted((a.host, a.switch, a.port, a.rate_gbps, a.nic) for a in p.attachments)) for p in topology.planes]


def test_the_document_reads_back_as_the_same_topology(tmp_path: Path):
    for source in (POD, ROCE, DATA / "ib-one-rail-unnamed-hdr.txt"):
        topology = load_topology([str(source)])
        saved = tmp_path / f"{source.stem}.json"
        saved.write_text(json.dumps(topology_document(topology), allow_nan=False))
        assert _content(load_topology([str(saved)])) == _content(topology)


def test_the_document_holds_each_leafs_nodes_folded_and_its_oversubscription():
    document = topology_document(load_topology([str(POD)]))
    assert document["schema"] == "gpudiag.topology/1"
    rail0 = document["planes"][0]
    assert [s["tier"] for s in rail0["switches"]] == [2, 2, 1, 1]  # top tier first
    leaf = rail0["leaves"][0]
    assert (leaf["name"], leaf["nodes"], leaf["node_gbps"], leaf["uplink_gbps"]) == (
        "MF0;ib-r0-leaf01:MQM9700/U1", "gpu-a[01-02]", 800.0, 1200.0)
    assert leaf["oversubscription"] == pytest.approx(2 / 3)
    link = rail0["links"][0]
    assert link == {"a": "MF0;ib-r0-leaf01:MQM9700/U1", "b": "MF0;ib-r0-spine01:MQM9700/U1", "count": 2,
                    "capacity_gbps": 800.0, "cables": [{"ports": ["33", "1"], "rate_gbps": 400.0},
                                                       {"ports": ["34", "2"], "rate_gbps": 400.0}]}


def test_the_text_shows_tiers_top_first_leaves_nodes_and_links():
    text = topology_text(load_topology([str(POD)]))
    assert text.startswith(f"{POD}: 5 planes (rails 0, 1, 2, 3, 4), 17 switches, 16 nodes\n")
    rail0 = text.split("\n\nrail 0:")[1].split("\n\n")[0]
    assert rail0.index("spine  MF0;ib-r0-spine01") < rail0.index("leaf   MF0;ib-r0-leaf01")
    assert "lid 4  guid 0xb83fd20300a10201" in rail0
    assert "nodes gpu-a[03-04] (2 × 400 Gb/s); oversubscription 1.33:1 (800 / 600 Gb/s up)" in rail0
    assert ("MF0;ib-r0-leaf01:MQM9700/U1 – MF0;ib-r0-spine01:MQM9700/U1: 2 cables × 400 Gb/s = 800 Gb/s; "
            "ports 33–1, 34–2") in rail0
    assert "core   ib-top" in text and "ib-leaf01 – ib-spine01: 1 cable, rate unknown" in text


def test_a_link_to_a_switch_no_plane_has_is_named_by_its_json_path_and_line(data: Path):
    path = data / "pod.topology.json"
    link = '{"a": "r4-spine01", "b": '
    path.write_text(path.read_text().replace(f'{link}"r4-leaf02"', f'{link}"spine9"'))
    assert _error(path) == (f"{path}:{_line_of(path, 'spine9')}: planes[0].links[1].b: 'spine9' is no switch of "
                            "rail 4; define it under switches, or fix it")


@pytest.mark.parametrize(("change", "pointer", "problem"), [
    (lambda v: v["planes"][0]["nodes"][1].pop("host"), "planes[0].nodes[1].host", 'no "host"'),
    (lambda v: v["planes"][0]["nodes"][1].update(port=1), "planes[0].nodes[1]",
     "port 1 of r4-leaf01 holds both node gpu-a01 (at line"),
    (lambda v: v["planes"][0]["switches"].append({"name": "r4-leaf02"}), "planes[0].switches[3]",
     "switch 'r4-leaf02' is defined twice (first at line"),
    (lambda v: v["planes"][0]["links"].append({"a": "r4-leaf01", "b": "r4-leaf01", "count": 1}),
     "planes[0].links[2]", "a cable from switch 'r4-leaf01' to itself"),
    (lambda v: v["planes"][0]["nodes"].append({"host": "gpu-a01", "switch": "r4-leaf02"}), "planes[0].nodes[4]",
     "node gpu-a01 is cabled to r4-leaf02 here and to r4-leaf01 at line"),
    (lambda v: v["planes"][0].update(rail=1), "include[0]", "rail 1 is given twice: by include[0]"),
    (lambda v: v["planes"][0]["switches"][0].update(tier="leaf"), "planes[0].switches[0].tier", "'leaf' is no tier"),
    (lambda v: v["planes"][0].update(swtiches=[]), "planes[0]", "unknown key 'swtiches'"),
    (lambda v: v["planes"][0]["links"][0]["cables"][0].update(rate_gbps=-1), "planes[0].links[0].cables[0].rate_gbps",
     "-1 is no rate"),
    (lambda v: v["include"][1].update(file="nothere.conf"), None, "nothere.conf: cannot read it"),
    (lambda v: v["include"].append({"file": "roce.topology.json"}), "include[2]",
     "roce.topology.json is a gpudiag.topology/1 file itself"),
    (lambda v: v["include"].append({"file": "roce-leaf01.lldp.json"}), "include[2]",
     "roce-leaf01.lldp.json is an lldpctl capture: say which switch or host"),
    (lambda v: v.update(rails={"mlx5_0": "zero"}), "rails.mlx5_0", "'zero' is no rail number"),
])
def test_a_broken_topology_file_is_named_by_line_and_json_path(data: Path, change, pointer: str | None,
                                                                problem: str):
    path = data / "pod.topology.json"
    _edit(path, change)
    message = _error(path)
    if pointer is None:
        assert problem in message, message
    else:
        assert re.match(rf"{re.escape(str(path))}:\d+: {re.escape(pointer)}: {re.escape(problem)}", message), message


@pytest.mark.parametrize(("text", "problem"), [
    ('{"schema": "gpudiag.topology/1", "planes": [], "planes": []}', ":1: the key 'planes' is given twice"),
    ('{"schema": "gpudiag.topology/1",\n "planes": [{"rail": NaN}]}', ": not strict JSON: NaN is no JSON number"),
    ('{"schema": "gpudiag.topology/1",\n "planes": [{"rail": 0, "switches": [', ":2: not valid JSON"),
    ('{"schema": "gpudiag.topology/2"}', ":1: the schema 'gpudiag.topology/2' is not gpudiag.topology/1"),
    ('{"schema": "gpudiag.topology/1"}', ": no plane: neither planes nor include give one"),
    ('{"schema": "gpudiag.topology/1"} {}', ":1: more after the JSON value"),
    ('[\n' * 100000, ": JSON this reader refuses"),
    ('{"a": ' * 70 + '1' + '}' * 70, ": JSON this reader refuses: objects nested more than 64 deep"),
    ('{"hosts": ["n1"]}', ":1: JSON of no topology format gpudiag reads"),
])
def test_json_that_is_no_topology_is_refused_in_one_line(tmp_path: Path, text: str, problem: str):
    path = tmp_path / "topo.json"
    path.write_text(text)
    assert _error(path).startswith(f"{path}{problem}")


def test_a_rails_map_file_is_read_strictly(tmp_path: Path):
    path = tmp_path / "rails.json"
    path.write_text('{"mlx5_0": 0, "mlx5_1": 1}')
    assert load_rails_map(str(path)) == {"mlx5_0": 0, "mlx5_1": 1}
    path.write_text('{"mlx5_0": 0, "mlx5_0": 1}')
    with pytest.raises(InputError, match=r"rails.json:1: the key 'mlx5_0' is given twice"):
        load_rails_map(str(path))
    path.write_text('{"mlx5_0": true}')
    with pytest.raises(InputError, match=r"rails.json:1: mlx5_0: True is no rail number"):
        load_rails_map(str(path))


# --- lldpctl -f json -------------------------------------------------------------------------


def _roce_with(data: Path, name: str, change) -> Path:
    _edit(data / name, change)
    return data / "roce.topology.json"


def test_an_lldp_capture_on_its_own_is_refused_with_the_include_that_names_its_system():
    message = _error(DATA / "roce-leaf01.lldp.json")
    assert message.startswith(f"{DATA / 'roce-leaf01.lldp.json'}:1: an lldpctl capture on its own; it does not say")
    assert '"include": [{"file": "leaf01.lldp.json", "switch": "leaf01"}]' in message


def test_an_lldp_capture_beside_its_local_chassis_names_its_own_switch(data: Path):
    path = data / "roce-leaf01.lldp.json"
    _edit(path, lambda v: v.update({"local-chassis": {"chassis": {"roce-leaf01": {
        "capability": [{"type": "Bridge", "enabled": True}]}}}}))
    (plane,) = load_topology([str(path)]).planes
    assert plane.hosts_under == {"roce-leaf01": ("gpu-c01", "gpu-c02")}
    assert plane.neighbours["roce-leaf01"] == ("roce-spine01", "roce-spine02")


def test_a_nodes_capture_of_several_neighbours_needs_the_rails_map(data: Path):
    def add_management_switch(value):
        leaf = value["lldp"]["interface"]["ens1f0np0"]
        oob = json.loads(json.dumps(leaf).replace("roce-leaf02", "oob-sw-r07").replace("swp2", "Ethernet31"))
        value["lldp"]["interface"] = [{"eno1": oob}, {"ens1f0np0": leaf}]
    _edit(data / "gpu-c04.lldp.json", add_management_switch)
    roce = data / "roce.topology.json"
    _edit(roce, lambda v: v["include"][3].pop("rail"))
    message = _error(roce)
    assert re.match(rf"{re.escape(str(data / 'gpu-c04.lldp.json'))}:\d+: host gpu-c04 has 2 neighbours \(eno1, "
                    r"ens1f0np0\), and nothing says which interface is on which rail; give \"rails\"", message), message
    _edit(roce, lambda v: v.update(rails={"ens1f0np0": 0}))
    topology = load_topology([str(roce)])
    assert topology.planes[0].attachment_of["gpu-c04"].switch == "roce-leaf02"
    assert "oob-sw-r07" not in topology.planes[0].switch_by_name
    assert topology.notes == ("gpu-c04: NICs eno1 left out: the rails map gives them no rail",)


def test_two_neighbours_on_one_interface_are_two_on_one_port(data: Path):
    path = _roce_with(data, "roce-leaf02.lldp.json",
                      lambda v: v["lldp"]["interface"].append({"swp1": v["lldp"]["interface"][1]["swp31"]}))
    message = _error(path)
    capture = data / "roce-leaf02.lldp.json"
    assert re.match(rf"{re.escape(str(capture))}:\d+: two neighbours on swp1: gpu-c03 \(line \d+\) and roce-spine01",
                    message), message


def test_a_neighbour_that_sends_no_system_name_is_named(data: Path):
    def unname(value):
        value["lldp"]["interface"][0]["swp1"]["chassis"] = {"id": {"type": "mac", "value": "b8:3f:d2:4a:30:01"}}
    message = _error(_roce_with(data, "roce-leaf02.lldp.json", unname))
    assert "the neighbour on swp1 sends no system name (chassis id b8:3f:d2:4a:30:01)" in message


def test_a_switch_that_sees_itself_is_a_link_to_itself(data: Path):
    def loop(value):
        interface = value["lldp"]["interface"][0]["swp1"]
        interface["chassis"] = {"roce-spine01": interface["chassis"]["roce-leaf01"]}
    message = _error(_roce_with(data, "roce-spine01.lldp.json", loop))
    assert re.search(r"roce-spine01.lldp.json:\d+: a cable from switch 'roce-spine01' to itself", message), message


@pytest.mark.parametrize("spine_first", [False, True])
def test_a_port_advertised_under_an_alias_is_the_port_its_own_capture_names(data: Path, spine_first: bool):
    """A switch may advertise a port by an alias (a "local" port id, as SONiC sends): the switch's
    own capture names the port, whichever capture is read first, and the cable is one."""
    def alias(value):  # leaf02 advertises its swp31 as Ethernet1/2
        value["lldp"]["interface"][1]["swp2"]["port"] = {"id": {"type": "local", "value": "Ethernet1/2"},
                                                         "descr": "uplink to roce-spine01"}
    _edit(data / "roce-spine01.lldp.json", alias)
    if spine_first:
        def reorder(value):
            value["include"].sort(key=lambda entry: entry["file"] != "roce-spine01.lldp.json")
        _edit(data / "roce.topology.json", reorder)
    (plane,) = load_topology([str(data / "roce.topology.json")]).planes
    assert [(c.port_a, c.port_b) for c in plane.link_by_key[("roce-leaf02", "roce-spine01")].cables] == [
        ("swp31", "swp2")]


def test_captures_that_disagree_on_a_port_are_refused(data: Path):
    def move(value):
        value["lldp"]["interface"][1]["swp2"]["port"]["id"]["value"] = "swp32"  # leaf02's capture says swp31
    message = _error(_roce_with(data, "roce-spine01.lldp.json", move))
    expected = (r"roce-spine01.lldp.json:\d+: port swp2 of roce-spine01 holds both a cable to roce-leaf02 port swp31 "
                r"\(at .*roce-leaf02.lldp.json:\d+\) and a cable to roce-leaf02 port swp32")
    assert re.search(expected, message), message


@pytest.mark.parametrize(("text", "problem"), [
    ('{"lldp": [{"interface": []}]}', ":1: lldpctl's json0 format"),
    ('{"lldp": {"interface": "swp1"}}', ":1: \"interface\" is neither an object nor a list"),
    ('{"lldp": {"interface": {"swp1": {"chassis": {"a": {}, "b": {}}}}}}', ":1: the neighbour on swp1 has 2 chassis"),
    ('{"lldp": {"interface": {"swp1": {"chassis": {"sp": {"mgmt-ip": "10.0.0.300"}}}}}}',
     ":1: the neighbour on swp1 has the management address '10.0.0.300', no IP address"),
    ('{"lldp": {"interface": {"swp1": {"via": "LLDP", "chassis": {"spine01": {', ":1: not valid JSON"),
])
def test_a_broken_lldp_capture_is_named(data: Path, text: str, problem: str):
    capture = data / "roce-leaf02.lldp.json"
    capture.write_text(text)
    assert _error(data / "roce.topology.json").startswith(f"{capture}{problem}")
