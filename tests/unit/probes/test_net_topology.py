"""Rails: ``nvidia-smi topo -m`` parsed from the real capture in tests/data/nvidia-smi/, the GPU to
nearest-NIC map, PCIe distances and line rates read from temporary sysfs trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from probes import topology
from probes.topology import IbPort, NicChoice

TOPO_8X_6NIC = Path(__file__).resolve().parents[2] / "data" / "nvidia-smi" / "topo-m-8x-h100-6nic.txt"
NICS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5")


def _matrix() -> topology.TopologyMatrix:
    return topology.parse_topology(TOPO_8X_6NIC.read_text())


def test_the_capture_has_eight_gpus_and_six_named_nics():
    matrix = _matrix()
    assert matrix.gpu_count == 8
    assert matrix.nics == NICS  # named by the NIC Legend, not NIC0..NIC5
    assert matrix.levels[0] == {"mlx5_0": "PIX", "mlx5_1": "PIX", "mlx5_2": "NODE", "mlx5_3": "NODE",
                                "mlx5_4": "NODE", "mlx5_5": "NODE"}
    assert matrix.levels[3]["mlx5_2"] == "PIX"
    assert matrix.levels[4]["mlx5_3"] == matrix.levels[4]["mlx5_4"] == "PIX"
    assert matrix.levels[6]["mlx5_5"] == "PIX"
    assert set(matrix.levels[1].values()) == {"NODE"}


def test_spaces_instead_of_tabs_parse_the_same():
    spaced = TOPO_8X_6NIC.read_text().replace("\t", "    ")
    assert topology.parse_topology(spaced).levels == _matrix().levels


def test_output_without_a_matrix_is_refused():
    with pytest.raises(topology.TopologyUnavailable):
        topology.parse_topology("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_nearest_nic_per_gpu_of_the_capture():
    choices = topology.nearest_nics(_matrix().levels, NICS)
    # The PIX pairs first, one NIC per GPU: GPU0 takes mlx5_0 (its second PIX port mlx5_1 stays free),
    # GPU4 mlx5_3. GPUs with only NODE NICs take the free ones, then share, least shared first.
    assert {gpu: (c.nic, c.level) for gpu, c in choices.items()} == {
        0: ("mlx5_0", "PIX"), 1: ("mlx5_1", "NODE"), 2: ("mlx5_4", "NODE"), 3: ("mlx5_2", "PIX"),
        4: ("mlx5_3", "PIX"), 5: ("mlx5_0", "NODE"), 6: ("mlx5_5", "PIX"), 7: ("mlx5_1", "NODE")}
    assert [gpu for gpu, c in choices.items() if c.shared] == [0, 1, 5, 7]


def test_nearest_nic_is_one_to_one_when_each_gpu_has_its_own():
    levels = {gpu: {f"mlx5_{nic}": ("PIX" if nic == gpu else "SYS" if (nic < 2) != (gpu < 2) else "NODE")
                    for nic in range(4)} for gpu in range(4)}
    choices = topology.nearest_nics(levels)
    assert choices == {gpu: NicChoice(gpu, f"mlx5_{gpu}", "PIX") for gpu in range(4)}


def test_rails_use_only_rdma_devices_and_carry_their_rate():
    ports = [IbPort(name, 1, 400.0, "ACTIVE", "InfiniBand") for name in ("mlx5_0", "mlx5_2", "mlx5_3", "mlx5_5")]
    rails = topology.plan_rails(8, ports, _matrix().levels, NICS)
    assert [(rail.index, rail.gpu, rail.hca) for rail in rails] == [
        (0, 0, "mlx5_0"), (1, 1, "mlx5_0"), (2, 2, "mlx5_2"), (3, 3, "mlx5_2"),
        (4, 4, "mlx5_3"), (5, 5, "mlx5_3"), (6, 6, "mlx5_5"), (7, 7, "mlx5_5")]
    assert (rails[0].level, rails[0].shared, rails[3].level, rails[3].shared) == ("PIX", True, "PIX", True)
    assert {rail.line_rate_gbps for rail in rails} == {400.0}


def test_rails_without_topology_pair_by_name_and_without_gpus_one_per_hca():
    ports = [IbPort(name, 1, 200.0, "ACTIVE", "InfiniBand") for name in ("mlx5_0", "mlx5_1")]
    by_order = topology.plan_rails(2, ports, None)
    assert [(rail.gpu, rail.hca, rail.level) for rail in by_order] == [(0, "mlx5_0", "order"), (1, "mlx5_1", "order")]
    no_gpu = topology.plan_rails(0, ports, None)
    assert [(rail.index, rail.gpu, rail.hca) for rail in no_gpu] == [(0, None, "mlx5_0"), (1, None, "mlx5_1")]
    no_hca = topology.plan_rails(2, [], None)
    assert [(rail.gpu, rail.hca) for rail in no_hca] == [(0, None), (1, None)]


@pytest.mark.parametrize(("text", "gbps"), [
    ("400 Gb/sec (4X NDR)", 400.0), ("200 Gb/sec (4X HDR)", 200.0), ("100 Gb/sec (4X EDR)", 100.0),
    ("56 Gb/sec (4X FDR)", 56.0), ("2.5 Gb/sec (1X SDR)", 2.5), ("", None), ("invalid", None)])
def test_ib_fixed(text: str, gbps: float | None):
    assert topology.parse_ib_rate_gbps(text) == gbps


def _ib_tree(root: Path, hca: str, rate: str, state: str = "4: ACTIVE", layer: str = "InfiniBand",
             port: int = 1) -> None:
    folder = root / "class" / "infiniband" / hca / "ports" / str(port)
    folder.mkdir(parents=True)
    (folder / "rate").write_text(rate + "\n")
    (folder / "state").write_text(state + "\n")
    (folder / "link_layer").write_text(layer + "\n")


def test_ib_ports_and_rates_from_sysfs(tmp_path: Path):
    _ib_tree(tmp_path, "mlx5_10", "400 Gb/sec (4X NDR)")
    _ib_tree(tmp_path, "mlx5_2", "200 Gb/sec (4X HDR)", state="1: DOWN")
    _ib_tree(tmp_path, "mlx5_bond_0", "100 Gb/sec (4X EDR)", layer="Ethernet")
    (tmp_path / "class" / "infiniband" / "mlx5_bond_0" / "device" / "net" / "bond0").mkdir(parents=True)
    ports = topology.list_ib_ports(tmp_path)
    assert [(p.hca, p.port, p.rate_gbps, p.state, p.link_layer) for p in ports] == [
        ("mlx5_2", 1, 200.0, "DOWN", "InfiniBand"), ("mlx5_10", 1, 400.0, "ACTIVE", "InfiniBand"),
        ("mlx5_bond_0", 1, 100.0, "ACTIVE", "Ethernet")]
    assert ports[2].netdevs == ("bond0",)
    assert topology.read_ib_rate_gbps("mlx5_10", 1, tmp_path) == 400.0
    assert topology.read_ib_rate_gbps("mlx5_10", 2, tmp_path) is None
    assert topology.list_ib_ports(tmp_path / "nothing") == []


def test_first_active_port_of_each_hca(tmp_path: Path):
    _ib_tree(tmp_path, "mlx5_0", "200 Gb/sec (4X HDR)", state="1: DOWN", port=1)
    _ib_tree(tmp_path, "mlx5_0", "400 Gb/sec (4X NDR)", port=2)
    chosen = topology.first_port_per_hca(topology.list_ib_ports(tmp_path))
    assert (chosen["mlx5_0"].port, chosen["mlx5_0"].rate_gbps) == (2, 400.0)


def test_ethernet_speed_in_gbit(tmp_path: Path):
    for name, text in (("eth0", "25000"), ("eth1", "-1"), ("eth2", "")):
        (tmp_path / "class" / "net" / name).mkdir(parents=True)
        (tmp_path / "class" / "net" / name / "speed").write_text(text + "\n")
    assert topology.read_ethernet_speed_gbps("eth0", tmp_path) == 25.0
    assert topology.read_ethernet_speed_gbps("eth1", tmp_path) is None  # link down or unknown
    assert topology.read_ethernet_speed_gbps("eth2", tmp_path) is None
    assert topology.read_ethernet_speed_gbps("lo", tmp_path) is None  # no speed file


def _pci_device(root: Path, path: str, numa: int = 0) -> None:
    """A PCI function at ``devices/<path>`` with its ``bus/pci/devices`` link."""
    folder = root / "devices" / path
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "numa_node").write_text(f"{numa}\n")
    link = root / "bus" / "pci" / "devices" / folder.name
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(folder, link)


def test_pcie_distance_from_sysfs_paths(tmp_path: Path):
    switch = "pci0000:00/0000:00:01.0/0000:01:00.0"
    _pci_device(tmp_path, f"{switch}/0000:02:00.0/0000:03:00.0")  # GPU behind the switch
    _pci_device(tmp_path, f"{switch}/0000:02:01.0/0000:04:00.0")  # NIC behind the same switch
    _pci_device(tmp_path, f"{switch}/0000:02:02.0/0000:05:00.0/0000:06:00.0/0000:07:00.0")  # behind a second switch
    _pci_device(tmp_path, "pci0000:00/0000:00:02.0/0000:08:00.0")  # another root port
    _pci_device(tmp_path, "pci0000:40/0000:40:01.0/0000:41:00.0", numa=0)  # another host bridge, same NUMA node
    _pci_device(tmp_path, "pci0000:80/0000:80:01.0/0000:81:00.0", numa=1)  # the other socket
    gpu = "00000000:03:00.0"
    assert topology.sysfs_pci_level(gpu, "0000:04:00.0", tmp_path) == "PIX"
    assert topology.sysfs_pci_level(gpu, "0000:07:00.0", tmp_path) == "PXB"
    assert topology.sysfs_pci_level(gpu, "0000:08:00.0", tmp_path) == "PHB"
    assert topology.sysfs_pci_level(gpu, "0000:41:00.0", tmp_path) == "NODE"
    assert topology.sysfs_pci_level(gpu, "0000:81:00.0", tmp_path) == "SYS"
    assert topology.sysfs_pci_level(gpu, "0000:99:00.0", tmp_path) is None


def test_rails_from_sysfs_when_nvidia_smi_is_missing(tmp_path: Path):
    _pci_device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0")
    _pci_device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0")
    _pci_device(tmp_path, "pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:83:00.0", numa=1)
    _pci_device(tmp_path, "pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0", numa=1)
    for hca, nic in (("mlx5_0", "0000:84:00.0"), ("mlx5_1", "0000:04:00.0")):
        _ib_tree(tmp_path, hca, "400 Gb/sec (4X NDR)")
        os.symlink(tmp_path / "bus" / "pci" / "devices" / nic, tmp_path / "class" / "infiniband" / hca / "device")

    def no_smi(timeout_s: float) -> str:
        raise topology.TopologyUnavailable("nvidia-smi is not on PATH")

    rails, source = topology.discover_rails(2, {0: "00000000:03:00.0", 1: "00000000:83:00.0"}, None, tmp_path,
                                            query=no_smi)
    assert source == "sysfs"
    assert [(rail.gpu, rail.hca, rail.level) for rail in rails] == [(0, "mlx5_1", "PIX"), (1, "mlx5_0", "PIX")]


def test_rails_from_nvidia_smi_limited_to_chosen_hcas(tmp_path: Path):
    for hca in NICS:
        _ib_tree(tmp_path, hca, "400 Gb/sec (4X NDR)")
    rails, source = topology.discover_rails(None, None, ("mlx5_2", "mlx5_5"), tmp_path,
                                            query=lambda timeout_s: TOPO_8X_6NIC.read_text())
    assert source == "nvidia-smi"
    # GPU3 and GPU6 are PIX to the two allowed HCAs; the other six share them, least shared first
    assert [rail.hca for rail in rails] == ["mlx5_2", "mlx5_5", "mlx5_2", "mlx5_2", "mlx5_5", "mlx5_2",
                                            "mlx5_5", "mlx5_5"]
    assert [rail.level for rail in rails] == ["NODE", "NODE", "NODE", "PIX", "NODE", "NODE", "PIX", "NODE"]
    assert all(rail.shared for rail in rails)


def test_the_interface_that_holds_an_address():
    assert topology.interface_for_address("127.0.0.1") == "lo"
    assert topology.interface_for_address("::ffff:127.0.0.1") == "lo"
    assert topology.interface_for_address("192.0.2.123") is None  # TEST-NET-1: on no interface here
    assert topology.interface_for_address("not an address") is None
    assert topology.local_address_towards("127.0.0.1", 9) == "127.0.0.1"


def test_bus_ids_as_sysfs_writes_them():
    assert topology.normalize_bdf("00000000:18:00.0") == "0000:18:00.0"
    assert topology.normalize_bdf("0000:AB:00.1") == "0000:ab:00.1"
    assert topology.normalize_bdf("18:00.0") == "0000:18:00.0"
