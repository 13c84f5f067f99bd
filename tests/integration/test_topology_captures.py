"""gpudiag's topology readers on captures the real tools make at test time, each checked against the fabric the
test built:

* ``ibnetdiscover`` (infiniband-diags) run against ibsim's simulated InfiniBand subnets (``ibsim_fabric.py``):
  a leaf–spine fabric with parallel cables, an EDR cable and an EDR node among HDR ones, read on its own; and two
  rail-optimised subnets, each captured from its own HCA of one node and included by rail from a
  gpudiag.topology/1 file.
* ``lldpctl -f json`` of the real lldpd in network namespaces cabled with veths (``lldpd_fabric.py``): a leaf
  with two hosts and two cables to a spine; the captures of the leaf, the spine and a host merged by a
  gpudiag.topology/1 file, the leaf's alone beside its ``lldpcli show chassis``, and the host's through the
  node-side probe (probes/lldp.py) calling lldpctl itself.
* a topology.conf that the real slurmctld loaded (``slurm_topology.py``), against ``scontrol show topology``.

Each part skips, saying why, where its tools are missing (scripts/install-test-deps installs them) or where it
needs what the machine does not give (namespaces: root and CAP_NET_ADMIN; Slurm: root).

Time on the 2-core development machine, six runs (pytest --durations): the two ibsim tests 0.15–0.4 s together
(ibsim starts in 0.03 s, each ibnetdiscover takes about 0.05 s), the lldpd test 2.2–2.4 s (2.1–2.2 s of it until
every lldpd has heard its neighbours: the first frames and a transmit interval of 1 s), the Slurm test 1.3–1.5 s
(a four-node cluster up and down); the module 5.2–7.7 s in one process, with the interpreter's start 2–3 s
more.
"""

from __future__ import annotations

import json
import stat
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
from ibsim_fabric import IbCable, IbFabric, IbHca, IbSim, IbSwitch, ibsim_unavailable_reason
from lldpd_fabric import LldpCable, LldpFabric, lldpd_unavailable_reason
from netns_hosts import namespace_names, requires_netns
from slurm_cluster import requires_slurm
from slurm_topology import TopologyCluster
from sshd_hosts import running_after

from gpudiag.fabric.model import LEAF, SPINE, Plane, Topology
from gpudiag.fabric.readers import load_topology
from probes.lldp import LldpNeighbour, parse_lldpctl_json, read_lldp

requires_ibsim = pytest.mark.skipif(ibsim_unavailable_reason() is not None,
                                    reason=f"ibsim: {ibsim_unavailable_reason()}")
requires_lldpd = pytest.mark.skipif(lldpd_unavailable_reason() is not None,
                                    reason=f"lldpd: {lldpd_unavailable_reason()}")

# IBTA: a port's rate is its width times its speed's per-lane rate.
RATE_GBPS = {"4xHDR": 4 * 50.0, "4xEDR": 4 * 25.0}

# --- InfiniBand: ibsim + ibnetdiscover ----------------------------------------------------------------

# spine01 is named as NVIDIA switches name themselves, with ";", ":" and "/" in it.
SPINE01 = "MF0;spine01:MQM8790/U1"
LEAF_SPINE = IbFabric(
    switches=(IbSwitch("leaf01", 1), IbSwitch("leaf02", 2), IbSwitch("leaf03", 3), IbSwitch(SPINE01, 11),
              IbSwitch("spine02", 12)),
    hcas=tuple(IbHca(f"node{index:02d}", "mlx5_0", 40 + index) for index in range(1, 7)),
    cables=(
        IbCable("leaf01", 33, SPINE01, 1), IbCable("leaf01", 34, SPINE01, 2),  # two cables: one link
        IbCable("leaf01", 35, "spine02", 1),
        IbCable("leaf02", 33, SPINE01, 3),
        IbCable("leaf02", 35, "spine02", 3), IbCable("leaf02", 36, "spine02", 4),  # two cables: one link
        IbCable("leaf03", 33, SPINE01, 5),
        IbCable("leaf03", 35, "spine02", 5, "4xEDR"),  # trained at half the rate
        IbCable("leaf01", 1, "node01 mlx5_0", 1), IbCable("leaf01", 2, "node02 mlx5_0", 1),
        IbCable("leaf02", 1, "node03 mlx5_0", 1), IbCable("leaf02", 2, "node04 mlx5_0", 1),
        IbCable("leaf03", 1, "node05 mlx5_0", 1), IbCable("leaf03", 4, "node06 mlx5_0", 1, "4xEDR"),
    ))


def _rail(rail: int, cabling: dict[str, str], first_lid: int) -> IbFabric:
    """One rail-optimised rail: r<rail>-leaf01/02 under r<rail>-spine01, each host's mlx5_<rail> on the leaf
    ``cabling`` names (host -> leaf number), at the port of its host number (gpu03: port 3)."""
    prefix = f"r{rail}-"
    switches = (IbSwitch(f"{prefix}leaf01", first_lid), IbSwitch(f"{prefix}leaf02", first_lid + 1),
                IbSwitch(f"{prefix}spine01", first_lid + 2))
    hcas = tuple(IbHca(host, f"mlx5_{rail}", first_lid + 10 + index) for index, host in enumerate(cabling))
    cables = [IbCable(f"{prefix}leaf01", 33, f"{prefix}spine01", 1), IbCable(f"{prefix}leaf02", 33,
                                                                            f"{prefix}spine01", 2)]
    cables += [IbCable(f"{prefix}leaf{leaf}", int(host[3:]), f"{host} mlx5_{rail}", 1) for host, leaf in
               cabling.items()]
    return IbFabric(switches, hcas, tuple(cables))


RAIL0 = _rail(0, {"gpu01": "01", "gpu02": "01", "gpu03": "02", "gpu04": "02"}, 100)
RAIL1 = _rail(1, {"gpu01": "01", "gpu02": "02", "gpu03": "01", "gpu04": "02"}, 200)


def _subnets(*fabrics: IbFabric) -> IbFabric:
    """Subnets with no cable between them, served by one simulator: each is discovered from its own HCA."""
    return IbFabric(tuple(s for f in fabrics for s in f.switches), tuple(h for f in fabrics for h in f.hcas),
                    tuple(c for f in fabrics for c in f.cables))


@pytest.fixture(scope="module")
def ibsim() -> Iterator[IbSim]:
    """One simulator for the module serving every subnet; after its stop, fails if ibsim is still running."""
    with IbSim(_subnets(LEAF_SPINE, RAIL0, RAIL1)) as simulator:
        pids = simulator.process_ids()
        yield simulator
    assert not running_after(pids), f"ibsim still running after its stop: {pids}"


def _expected_plane(fabric: IbFabric) -> dict[str, object]:
    """What a reader must find in ``fabric`` (ports as strings, as ibnetdiscover numbers them): every switch's
    tier and LID, every link's cables as (leaf port, spine port, Gb/s) by (leaf, spine), and every host's
    (leaf, port, Gb/s, HCA)."""
    leaves = {cable.a for cable in fabric.cables if " " in cable.b}
    links: dict[tuple[str, str], list[tuple[str, str, float]]] = defaultdict(list)
    hosts = {}
    for cable in fabric.cables:
        if " " in cable.b:
            host, hca = cable.b.split()
            hosts[host] = (cable.a, str(cable.a_port), RATE_GBPS[cable.rate], hca)
        else:
            links[(cable.a, cable.b)].append((str(cable.a_port), str(cable.b_port), RATE_GBPS[cable.rate]))
    return {"switches": {s.name: (LEAF if s.name in leaves else SPINE, s.lid) for s in fabric.switches},
            "links": {key: sorted(cables) for key, cables in links.items()}, "hosts": hosts}


def _read_plane(plane: Plane) -> dict[str, object]:
    """The same of a plane gpudiag read."""
    return {"switches": {s.name: (s.tier, s.lid) for s in plane.switches},
            "links": {link.key: sorted((c.port_a, c.port_b, c.rate_gbps) for c in link.cables)
                      for link in plane.links},
            "hosts": {a.host: (a.switch, a.port, a.rate_gbps, a.nic) for a in plane.attachments}}


@requires_ibsim
def test_ibnetdiscover_of_a_simulated_leaf_spine_fabric_reads_back_as_the_fabric_that_was_cabled(
        ibsim: IbSim, tmp_path: Path):
    capture = tmp_path / "fabric.txt"
    capture.write_text(ibsim.discover("node01 mlx5_0"))

    topology = load_topology([str(capture)])

    (plane,) = topology.planes
    assert plane.rail is None and topology.notes == (), capture.read_text()
    assert _read_plane(plane) == _expected_plane(LEAF_SPINE), capture.read_text()
    assert plane.link_by_key[("leaf01", SPINE01)].count == 2
    assert plane.link_by_key[("leaf03", "spine02")].capacity_gbps == 100.0
    assert plane.attachment_of["node06"].rate_gbps == 100.0
    assert plane.oversubscription("leaf01") == pytest.approx(400 / 600)
    assert all(s.guid and s.guid.startswith("0x") and int(s.guid, 16) for s in plane.switches)


@requires_ibsim
def test_two_rails_each_discovered_from_its_own_hca_and_included_by_rail_make_one_plane_each(
        ibsim: IbSim, tmp_path: Path):
    for rail in (0, 1):
        (tmp_path / f"rail{rail}.txt").write_text(ibsim.discover(f"gpu01 mlx5_{rail}"))
    document = tmp_path / "pod.topology.json"
    document.write_text(json.dumps({"schema": "gpudiag.topology/1",
                                    "include": [{"file": "rail0.txt", "rail": 0}, {"file": "rail1.txt", "rail": 1}]}))

    topology = load_topology([str(document)])

    assert [plane.rail for plane in topology.planes] == [0, 1]
    for plane, fabric in zip(topology.planes, (RAIL0, RAIL1), strict=True):
        assert _read_plane(plane) == _expected_plane(fabric), (tmp_path / f"rail{plane.rail}.txt").read_text()
    assert topology.group_of("gpu02") == ("r0-leaf01", "r1-leaf02")
    assert topology.hosts == ("gpu01", "gpu02", "gpu03", "gpu04")


# --- Ethernet: lldpd + lldpctl ---------------------------------------------------------------------------

LLDP_CABLES = (LldpCable("leaf01", "swp1", "node01", "eth0"), LldpCable("leaf01", "swp2", "node02", "eth0"),
               LldpCable("leaf01", "swp31", "spine01", "swp1"), LldpCable("leaf01", "swp32", "spine01", "swp2"))


@pytest.fixture
def lldp_fabric() -> Iterator[LldpFabric]:
    """leaf01 and spine01 with two cables between them, node01 and node02 on leaf01, each running lldpd; after
    the stop, fails if a process or namespace of it is left."""
    fabric = LldpFabric(["leaf01", "spine01"], ["node01", "node02"], LLDP_CABLES).start()
    pids = fabric.process_ids()
    yield fabric
    fabric.stop()
    assert not running_after(pids), f"lldpd processes still running after the stop: {pids}"
    assert not set(fabric.namespaces()) & namespace_names(), "namespaces left after the stop"


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return path.name


def _lldp_topology(fabric: LldpFabric, folder: Path) -> Topology:
    """The captures of leaf01, spine01 and node01 merged by a gpudiag.topology/1 file."""
    include = [{"file": _write(folder / "leaf01.lldp.json", fabric.capture("leaf01")), "switch": "leaf01"},
               {"file": _write(folder / "spine01.lldp.json", fabric.capture("spine01")), "switch": "spine01"},
               {"file": _write(folder / "node01.lldp.json", fabric.capture("node01")), "host": "node01"}]
    document = folder / "roce.topology.json"
    document.write_text(json.dumps({"schema": "gpudiag.topology/1", "include": include}))
    return load_topology([str(document)])


@requires_netns
@requires_lldpd
def test_lldpctl_captures_of_real_lldpd_read_back_as_the_cabled_switches_ports_and_nodes(
        lldp_fabric: LldpFabric, tmp_path: Path):
    topology = _lldp_topology(lldp_fabric, tmp_path)

    (plane,) = topology.planes
    assert {s.name: (s.tier, s.addresses) for s in plane.switches} == {
        "leaf01": (LEAF, lldp_fabric.management_addresses("leaf01")),
        "spine01": (SPINE, lldp_fabric.management_addresses("spine01"))}
    (link,) = plane.links
    assert link.key == ("leaf01", "spine01")
    assert sorted((c.port_a, c.port_b) for c in link.cables) == [("swp31", "swp1"), ("swp32", "swp2")]
    assert {a.host: (a.switch, a.port, a.nic) for a in plane.attachments} == {
        "node01": ("leaf01", "swp1", "eth0"), "node02": ("leaf01", "swp2", "eth0")}

    # the leaf's capture on its own, with what lldpd says of the leaf itself beside it
    alone = tmp_path / "leaf01.alone.json"
    alone.write_text(json.dumps({**json.loads(lldp_fabric.capture("leaf01")),
                                 **json.loads(lldp_fabric.local_chassis("leaf01"))}))
    (leaf_plane,) = load_topology([str(alone)]).planes
    assert leaf_plane.hosts_under == {"leaf01": ("node01", "node02")}
    assert leaf_plane.link_by_key[("leaf01", "spine01")].count == 2

    # the node's side: its capture parsed, and the probe calling lldpctl itself (no RDMA device: no rail)
    leaf_ipv4 = lldp_fabric.management_addresses("leaf01")[0]
    expected = [LldpNeighbour("eth0", "leaf01", "swp1", leaf_ipv4)]
    assert parse_lldpctl_json(lldp_fabric.capture("node01")) == expected
    lldpctl = tmp_path / "lldpctl"
    lldpctl.write_text(f'#!/bin/sh\nexec /usr/sbin/lldpctl -u {lldp_fabric.socket("node02")} "$@"\n')
    lldpctl.chmod(lldpctl.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "sys").mkdir()
    assert read_lldp({}, 0, sysfs_root=str(tmp_path / "sys"), executable=str(lldpctl)) == [
        {"interface": "eth0", "switch": "leaf01", "port": "swp2", "mgmt_ip": leaf_ipv4, "rail": None}]


# --- Slurm: topology.conf loaded by slurmctld ------------------------------------------------------------

TOPOLOGY_CONF = """\
# three tiers, as a Slurm site writes them
SwitchName=leaf1 Nodes=n[1-2]
switchname=leaf2 nodes=n3    # keys in any case
SwitchName=leaf3 Nodes=n4 LinkSpeed=200
SwitchName=spine1 Switches=leaf[1-2]
SwitchName=spine2 Switches=leaf3
SwitchName=core \\
    Switches=spine[1-2]
"""


def _slurm_view(plane: Plane) -> dict[str, tuple[int, set[str], set[str]]]:
    """A plane as ``scontrol show topology`` shows a tree: each switch's level (0: leaf), every node below it,
    and the switches one tier below it."""
    children = {s.name: {n for n in plane.neighbours[s.name] if plane.switch_by_name[n].tier < s.tier}
                for s in plane.switches}
    below: dict[str, set[str]] = {}
    for switch in sorted(plane.switches, key=lambda s: s.tier):  # a switch's children come before it
        below[switch.name] = set(plane.hosts_under.get(switch.name, ())).union(
            *(below[child] for child in children[switch.name]))
    return {s.name: (s.tier - 1, below[s.name], children[s.name]) for s in plane.switches}


def _host_set(hostlist: str | None) -> set[str]:
    return set(NodeSet(hostlist or "", resolver=RESOLVER_NOGROUP))


@requires_slurm
def test_a_topology_conf_slurmctld_loaded_reads_as_scontrol_shows_the_tree():
    cluster = TopologyCluster(4, TOPOLOGY_CONF).start()
    try:
        shown = cluster.show_topology()
        (plane,) = load_topology([str(cluster.topology_path)]).planes
    finally:
        pids = cluster.process_ids()
        cluster.stop()
    assert not running_after(pids), f"processes of the slurm cluster still running after its stop: {pids}"

    assert {name: (level, _host_set(nodes), _host_set(switches))
            for name, (level, nodes, switches) in shown.items()} == _slurm_view(plane)
    assert plane.hosts_under == {"leaf1": ("n1", "n2"), "leaf2": ("n3",), "leaf3": ("n4",)}
