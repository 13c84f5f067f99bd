"""The topology readers on captures in their real formats (tests/data/topology): an ibnetdiscover
capture of a two-rail NDR fabric and one of a single HDR rail whose switches kept their vendor's
node description, and a Slurm topology.conf; then each broken as captures break (a block cut,
a port given twice, a line of garbage, the file cut short), each an InputError naming the file
and the line. gpudiag.topology/1 files and lldpctl captures: test_topology_json.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudiag.errors import InputError
from gpudiag.fabric.model import LEAF, SPINE
from gpudiag.fabric.readers import load_topology
from gpudiag.fabric.readers import source as source_module
from gpudiag.fabric.readers.ibnetdiscover import read_ibnetdiscover
from gpudiag.fabric.readers.source import natural_key

DATA = Path(__file__).resolve().parents[3] / "data" / "topology"
TWO_RAILS = DATA / "ib-two-rails-ndr.txt"
UNNAMED = DATA / "ib-one-rail-unnamed-hdr.txt"
SLURM = DATA / "topology.conf"
R0_LEAF01 = "MF0;ib-r0-leaf01:MQM9700/U1"
R0_LEAF02 = "MF0;ib-r0-leaf02:MQM9700/U1"
R0_SPINE01 = "MF0;ib-r0-spine01:MQM9700/U1"
R0_SPINE02 = "MF0;ib-r0-spine02:MQM9700/U1"


def _error(path: Path, text: str) -> str:
    """The one-line message of the InputError that reading ``text`` (written at ``path``) raises."""
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_topology([str(path)])
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def _line_of(text: str, needle: str) -> int:
    """The number of the first line of ``text`` that holds ``needle``."""
    return next(number for number, line in enumerate(text.split("\n"), start=1) if needle in line)


def _without_block(text: str, marker: str) -> str:
    """``text`` without the block (blank-line separated) that holds ``marker``."""
    return "\n\n".join(block for block in text.split("\n\n") if marker not in block)


# --- ibnetdiscover ---------------------------------------------------------------------------


def test_a_two_rail_capture_splits_into_one_plane_per_rail_by_the_hosts_hca_order():
    topology = load_topology([str(TWO_RAILS)])
    assert [plane.rail for plane in topology.planes] == [0, 1]
    rail0, rail1 = topology.planes
    assert {s.name: s.tier for s in rail0.switches} == {R0_SPINE01: SPINE, R0_SPINE02: SPINE, R0_LEAF01: LEAF,
                                                         R0_LEAF02: LEAF}
    assert rail0.hosts_under[R0_LEAF01] == ("gpu-a01", "gpu-a02")
    # gpu-a03's HCAs are mlx5_0 and mlx5_3: the second in its natural order is rail 1
    assert rail1.attachment_of["gpu-a03"].nic == "mlx5_3"
    assert rail0.attachment_of["gpu-a03"].nic == "mlx5_0"
    assert topology.notes == ()


def test_parallel_cables_group_into_one_link_with_ports_rates_lids_and_guids():
    rail0 = load_topology([str(TWO_RAILS)]).planes[0]
    link = rail0.link_by_key[(R0_LEAF01, R0_SPINE01)]
    assert [(c.port_a, c.port_b, c.rate_gbps) for c in link.cables] == [("33", "1", 400.0), ("34", "2", 400.0)]
    assert link.capacity_gbps == 800.0
    # the leaf02-spine02 cable trained at 4xHDR: 4 x 50 Gb/s
    assert rail0.link_by_key[(R0_LEAF02, R0_SPINE02)].capacity_gbps == 200.0
    leaf01 = rail0.switch_by_name[R0_LEAF01]
    assert (leaf01.lid, leaf01.guid) == (4, "0xb83fd20300a10201")
    attachment = rail0.attachment_of["gpu-a02"]
    assert (attachment.switch, attachment.port, attachment.rate_gbps) == (R0_LEAF01, "2", 400.0)
    assert rail0.oversubscription(R0_LEAF01) == pytest.approx(800 / 1200)
    assert rail0.oversubscription(R0_LEAF02) == pytest.approx(800 / 600)


def test_a_rails_map_overrides_the_natural_order_and_leaves_out_hcas_it_does_not_name():
    topology = load_topology([str(TWO_RAILS)], rails={"mlx5_0": 5, "mlx5_1": 6})
    assert [plane.rail for plane in topology.planes] == [5, 6]
    assert "gpu-a03" not in topology.planes[1].attachment_of  # its mlx5_3 has no rail in the map
    assert any("mlx5_3" in note for note in topology.notes)


def test_a_capture_of_one_hca_per_host_is_one_plane_for_every_rail_unless_a_rail_is_given():
    topology = load_topology([str(UNNAMED)])
    assert [plane.rail for plane in topology.planes] == [None]
    assert load_topology([str(UNNAMED)], rails={"mlx5_2": 2}).planes[0].rail == 2
    text = UNNAMED.read_text()
    assert read_ibnetdiscover(str(UNNAMED), text, rail=7).planes[0].rail == 7


def _dual_port(text: str) -> str:
    """``text`` with gpu-b03's CA given a second port, cabled to its leaf's port 4."""
    leaf = '[3]\t"H-b8cef60300027a3c"[1](b8cef60300027a3c) \t\t# "gpu-b03 mlx5_2" lid 26 4xHDR\n'
    ca = ('Ca\t1 "H-b8cef60300027a3c"\t\t# "gpu-b03 mlx5_2"\n[1](b8cef60300027a3c) \t"S-0c42a10300e84b30"[3]\t\t'
          '# lid 26 lmc 0 "Quantum Mellanox Technologies" lid 23 4xHDR\n')
    assert leaf in text and ca in text
    text = text.replace(leaf, leaf + leaf.replace("[3]", "[4]").replace("[1](", "[2](").replace("lid 26", "lid 27"))
    return text.replace(ca, ca.replace("Ca\t1", "Ca\t2") + ca.split("\n")[1].replace("[1](", "[2](").replace(
        '"[3]', '"[4]').replace("lid 26", "lid 27") + "\n")


@pytest.mark.parametrize("rails", [None, {"mlx5_2": 0}])
def test_a_dual_port_ca_is_one_nic_on_its_first_port_not_a_second_rail(tmp_path: Path, rails):
    path = tmp_path / "dual.txt"
    path.write_text(_dual_port(UNNAMED.read_text()))
    topology = load_topology([str(path)], rails=rails)
    (plane,) = topology.planes
    assert plane.rail == (None if rails is None else 0)
    assert sorted(plane.attachment_of) == ["gpu-b01", "gpu-b02", "gpu-b03"]
    assert (plane.attachment_of["gpu-b03"].port, plane.attachment_of["gpu-b03"].nic) == ("3", "mlx5_2")
    assert "1 further ports of multi-port CAs left out" in topology.notes


def test_switches_sharing_a_vendor_node_description_are_named_by_guid_with_a_note():
    topology = load_topology([str(UNNAMED)])
    plane = topology.planes[0]
    assert sorted(s.name for s in plane.switches) == ["S-0c42a10300e84a10", "S-0c42a10300e84b20",
                                                      "S-0c42a10300e84b30"]
    assert plane.leaf_of("gpu-b03") == "S-0c42a10300e84b30"
    assert "Quantum Mellanox Technologies" in topology.notes[0]


def test_rails_that_share_switches_each_get_the_whole_fabric_with_a_note():
    # a cable between the two rails' spine01s (port 60 of each): the rails are no longer apart
    lines = TWO_RAILS.read_text().split("\n")
    for rail, other in ((0, 1), (1, 0)):
        header = _line_of("\n".join(lines), f'"MF0;ib-r{rail}-spine01:MQM9700/U1" enhanced')
        lines.insert(header, f'[60]\t"S-b83fd20300a1{other}101"[60]\t\t# "MF0;ib-r{other}-spine01:MQM9700/U1" lid 2 '
                             "4xNDR")
    text = "\n".join(lines)
    topology = read_ibnetdiscover(str(TWO_RAILS), text)
    assert [(plane.rail, len(plane.switches), len(plane.attachments)) for plane in topology.planes] == [(0, 8, 4),
                                                                                                        (1, 8, 4)]
    assert topology.planes[0].switch_by_name["MF0;ib-r1-leaf01:MQM9700/U1"].tier == LEAF
    assert topology.notes == ("rails 0, 1 share switches (not rail-optimised): each rail's plane holds the switches "
                              "its HCAs reach, and a leaf's oversubscription counts only that rail's nodes",)


def test_a_capture_of_several_hcas_per_host_given_one_rail_is_refused(tmp_path: Path):
    with pytest.raises(InputError, match=r"ib-two-rails-ndr.txt:\d+: host gpu-a01 has 2 NICs"):
        read_ibnetdiscover(str(TWO_RAILS), TWO_RAILS.read_text(), rail=0)


def test_a_node_missing_from_the_capture_is_named_at_the_port_that_leads_to_it(tmp_path: Path):
    text = _without_block(TWO_RAILS.read_text(), '# "gpu-a02 mlx5_0"\n')
    message = _error(tmp_path / "cut.txt", text)
    line = _line_of(text, '"H-946dae0300f10100"')
    assert message.startswith(f"{tmp_path / 'cut.txt'}:{line}: port 2 of '{R0_LEAF01}'")
    assert "no Ca block: a node missing" in message


def test_a_switch_referenced_but_not_defined_is_named_at_the_port_that_leads_to_it(tmp_path: Path):
    text = _without_block(TWO_RAILS.read_text(), f'# "{R0_SPINE02}" enhanced port 0')
    message = _error(tmp_path / "cut.txt", text)
    assert message.startswith(f"{tmp_path / 'cut.txt'}:{_line_of(text, 'S-b83fd20300a10102')}: port 35 of")
    assert "which has no Switch block: a switch missing" in message


def test_two_nodes_on_one_port_are_refused_at_the_second(tmp_path: Path):
    good = TWO_RAILS.read_text()
    # gpu-a02's CA says it is on leaf01's port 1, where gpu-a01 is
    ca_line = '[1](946dae0300f10100) \t"S-b83fd20300a10201"'
    text = good.replace(f"{ca_line}[2]", f"{ca_line}[1]")
    assert text != good
    message = _error(tmp_path / "clash.txt", text)
    assert re.match(rf".*clash.txt:{_line_of(text, ca_line)}: port 1 of '{re.escape(R0_LEAF01)}' .* is cabled to "
                    rf"'gpu-a01 mlx5_0' .* port 1 at line {_line_of(text, 'H-946dae0300f10000')}, and here to "
                    rf"'gpu-a02 mlx5_0'", message)
    assert "one port holds one cable" in message


def test_a_garbage_line_is_named(tmp_path: Path):
    lines = TWO_RAILS.read_text().split("\n")
    lines.insert(12, "ibwarn: [4127] mad_rpc: _do_madrpc failed; dport (DR path slid 0; dlid 0; 0,1,33)")
    message = _error(tmp_path / "noisy.txt", "\n".join(lines))
    assert message.startswith(f"{tmp_path / 'noisy.txt'}:13: not a line of ibnetdiscover's output: 'ibwarn")


def test_a_capture_cut_short_mid_line_is_named_at_its_last_line(tmp_path: Path):
    good = TWO_RAILS.read_text()
    text = good[:good.index('"S-b83fd20300a10101"[1]') + 9]
    message = _error(tmp_path / "short.txt", text)
    assert message.startswith(f"{tmp_path / 'short.txt'}:{text.count(chr(10)) + 1}: not a line of ibnetdiscover")


def test_a_cable_from_a_switch_to_itself_is_refused(tmp_path: Path):
    good = TWO_RAILS.read_text()
    loop = f'[60]\t"S-b83fd20300a10101"[61]\t\t# "{R0_SPINE01}" lid 2 4xNDR'
    text = good.replace('"S-b83fd20300a10202"[33]\t\t# "MF0;ib-r0-leaf02:MQM9700/U1" lid 5 4xNDR\n',
                        f'"S-b83fd20300a10202"[33]\t\t# "MF0;ib-r0-leaf02:MQM9700/U1" lid 5 4xNDR\n{loop}\n', 1)
    message = _error(tmp_path / "loop.txt", text)
    assert message.startswith(f"{tmp_path / 'loop.txt'}:{_line_of(text, '[60]')}: a cable from switch "
                              f"'{R0_SPINE01}' to itself")


def test_a_switch_block_given_twice_is_a_duplicate_switch(tmp_path: Path):
    good = TWO_RAILS.read_text()
    block = next(b for b in good.split("\n\n") if f'"{R0_SPINE02}" enhanced' in b)
    text = good + "\n" + block + "\n"
    message = _error(tmp_path / "twice.txt", text)
    second = len(good.split("\n")) + 1 + _line_of(block, "Switch\t") - 1
    assert message.startswith(f"{tmp_path / 'twice.txt'}:{second}: duplicate switch: S-b83fd20300a10102")
    assert f"at line {_line_of(good, 'Switch' + chr(9) + '65 ' + chr(34) + 'S-b83fd20300a10102')} too" in message


def test_a_ca_that_kept_its_vendor_description_names_no_host(tmp_path: Path):
    text = UNNAMED.read_text().replace('# "gpu-b02 mlx5_2"\n', '# "MT4123 ConnectX6   Mellanox Technologies"\n')
    message = _error(tmp_path / "vendor.txt", text)
    assert "names no host" in message and "rdma-ndd" in message


@pytest.mark.parametrize(("data", "problem"), [
    (b"\x00\x01\x02 core dump", ":1: a NUL byte"),
    ("vendid=0x2c9\nSwitch\t36 \"S-1\"\t# \"caf\xe9\" enhanced port 0 lid 1 lmc 0\n".encode("latin-1"),
     ":2: not UTF-8 text"),
    (b"vendid=0x2c9\n" + b"x" * (70 * 1024) + b"\n", ":2: a line longer than 64 KiB"),
    (b"", ": no topology format gpudiag reads"),
    (b"hello world\n", ": no topology format gpudiag reads; give an ibnetdiscover capture, a Slurm"),
])
def test_bytes_that_are_no_topology_are_refused_in_one_line(tmp_path: Path, data: bytes, problem: str):
    path = tmp_path / "junk.txt"
    path.write_bytes(data)
    with pytest.raises(InputError) as caught:
        load_topology([str(path)])
    assert str(caught.value).startswith(f"{path}{problem}")


def test_a_file_over_the_size_bound_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(source_module, "MAX_FILE_BYTES", 1024)
    with pytest.raises(InputError, match="larger than"):
        load_topology([str(TWO_RAILS)])


def test_a_missing_file_and_a_folder_are_named():
    with pytest.raises(InputError, match=r"nothere.txt: cannot read it"):
        load_topology(["nothere.txt"])
    with pytest.raises(InputError, match=r"topology: not a regular file; give the path of a topology file"):
        load_topology([str(DATA)])


@given(cut=st.integers(min_value=0, max_value=6000), junk=st.text(max_size=40), where=st.integers(0, 6000))
def test_a_capture_broken_anywhere_is_a_topology_or_an_input_error(cut: int, junk: str, where: int):
    good = TWO_RAILS.read_text()
    text = good[:where] + junk + good[where:cut] if cut > where else good[:cut] + junk
    try:
        topology = read_ibnetdiscover("fuzz.txt", text)
    except InputError as error:
        assert str(error).startswith("fuzz.txt") and "\n" not in str(error)
    else:
        assert topology.planes


def test_natural_order_puts_mlx5_10_after_mlx5_9():
    assert sorted(["mlx5_10", "mlx5_2", "mlx5_9", "mlx5_0"], key=natural_key) == ["mlx5_0", "mlx5_2", "mlx5_9",
                                                                                   "mlx5_10"]


# --- Slurm topology.conf ---------------------------------------------------------------------


def test_a_topology_conf_is_one_plane_for_every_rail_with_tiers_from_the_tree():
    topology = load_topology([str(SLURM)])
    (plane,) = topology.planes
    assert plane.rail is None
    assert {s.name: s.tier for s in plane.switches} == {"ib-leaf01": 1, "ib-leaf02": 1, "ib-leaf03": 1,
                                                        "ib-spine01": 2, "ib-spine02": 2, "ib-top": 3}
    # the lowercase keys and the trailing comment of line 7, the continued line of ib-spine01
    assert plane.hosts_under["ib-leaf03"] == ("gpu-b009", "gpu-b010", "gpu-b011", "gpu-b013")
    assert plane.neighbours["ib-spine01"] == ("ib-leaf01", "ib-leaf02", "ib-leaf03", "ib-top")
    link = plane.link_by_key[("ib-leaf01", "ib-spine01")]
    assert (link.count, link.capacity_gbps, link.cables[0].port_a) == (1, None, None)  # LinkSpeed is no rate
    assert plane.oversubscription("ib-leaf01") is None
    assert plane.attachment_of["gpu-b001"].port is None


def test_a_topology_conf_with_a_rails_map_is_copied_to_each_rail():
    topology = load_topology([str(SLURM)], rails={"mlx5_0": 0, "mlx5_1": 1, "mlx5_4": 1})
    assert [plane.rail for plane in topology.planes] == [0, 1]
    assert topology.planes[0].switches == topology.planes[1].switches


GOOD_CONF = "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n[3-4]\nSwitchName=spine Switches=leaf[1-2]\n"


@pytest.mark.parametrize(("text", "line", "problem"), [
    (GOOD_CONF.replace("leaf[1-2]", "leaf[1-3]"), 3,
     "switch 'leaf3' is not defined by any SwitchName line; add one or remove it from Switches="),
    (GOOD_CONF + "SwitchName=leaf1 Nodes=n9\n", 4, "duplicate switch: 'leaf1' is defined at line 1 too"),
    (GOOD_CONF.replace("n[3-4]", "n[2-4]"), 2, "node n2 is cabled to leaf2 here and to leaf1 at line 1"),
    (GOOD_CONF + "Nodes=n9 this is garbage\n", 4, "not a topology.conf setting: 'this'"),
    (GOOD_CONF + "SwitchName=leaf9 Nodes=\n", 4, "Nodes= names nothing"),
    (GOOD_CONF + "SwitchName=leaf9\n", 4, "switch 'leaf9' has no Nodes= and no Switches="),
    (GOOD_CONF + "SwitchName=top Switches=spine,top\n", 4, "switches contain each other: top -> top"),
    (GOOD_CONF + "SwitchName=a Switches=b\nSwitchName=b Switches=a\n", 4, "switches contain each other"),
    (GOOD_CONF + "SwitchName=x Nodes=n[1-9999999]\n", 4, "Nodes=n[1-9999999] holds a range of more than"),
    (GOOD_CONF + "SwitchName=x Nodes=n[1-\n", 4, "Nodes=n[1- is no host list"),
    (GOOD_CONF + "SwitchName=x Nodes=n9 Switches=leaf1\n", 4, "switch 'x' has both Nodes= and Switches="),
    ("BlockName=b1 Nodes=n[1-4]\nSwitchName=s Nodes=n5\n", 1, "a topology/block line"),
    (GOOD_CONF[:-15], 3, "not a topology.conf setting: 'Swit'"),  # cut short in its last line
])
def test_a_broken_topology_conf_is_named_at_its_line(tmp_path: Path, text: str, line: int, problem: str):
    message = _error(tmp_path / "topology.conf", text)
    assert message.startswith(f"{tmp_path / 'topology.conf'}:{line}: {problem}"), message


def test_two_files_giving_one_rail_are_refused_and_different_rails_merge():
    with pytest.raises(InputError, match="rail 0 is given by .*ib-two-rails-ndr.txt too"):
        load_topology([str(TWO_RAILS), str(TWO_RAILS)])
    merged = load_topology([str(SLURM), str(TWO_RAILS)])
    assert [plane.rail for plane in merged.planes] == [None, 0, 1]
    assert merged.plane(5) is merged.planes[0]  # the shared plane serves a rail with none of its own
    assert merged.source == f"{SLURM}, {TWO_RAILS}"
