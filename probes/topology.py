"""Which NIC serves which GPU, and how fast each port is: the rails of the pairwise network probes.

A *rail* is GPU *i* and the NIC nearest to it; rail *i* of one node is tested against rail *i* of
another. Nearness comes from ``nvidia-smi topo -m`` (or, without nvidia-smi, from the PCIe
paths in sysfs), ranked PIX < PXB < PHB < NODE < SYS. Line rates come from sysfs:
``/sys/class/infiniband/<hca>/ports/<n>/rate`` (e.g. ``400 Gb/sec (4X NDR)``) for IB and RoCE
ports, ``/sys/class/net/<interface>/speed`` (Mb/s) for plain Ethernet. Every reader takes the
sysfs root as a parameter, so tests point it at a temporary tree.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import re
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .smi import run_nvidia_smi

SYSFS_ROOT = "/sys"
PROC_NET_IF_INET6 = "/proc/net/if_inet6"
# nvidia-smi's PCIe distances, nearest first.
LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_RATE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*Gb/sec")
_NIC_LEGEND = re.compile(r"^\s*NIC(?P<index>\d+):\s*(?P<name>\S+)\s*$")
_SIOCGIFADDR = 0x8915


class TopologyUnavailable(Exception):
    """``nvidia-smi topo -m`` is missing, failed, or printed no GPU/NIC matrix; the message says why."""


@dataclass(frozen=True)
class TopologyMatrix:
    """The GPU-to-NIC part of ``nvidia-smi topo -m``: ``nics`` are the NIC names of its legend
    (``mlx5_0``...) in column order; ``levels[gpu][nic]`` is the distance word (``PIX``...)."""

    gpu_count: int
    nics: tuple[str, ...]
    levels: Mapping[int, Mapping[str, str]]


@dataclass(frozen=True)
class NicChoice:
    """The NIC chosen for one GPU: its name, the distance word, and whether another GPU also
    got it (more GPUs than NICs)."""

    gpu: int
    nic: str
    level: str
    shared: bool = False


@dataclass(frozen=True)
class IbPort:
    """One port of an RDMA device (IB or RoCE) as sysfs shows it. ``rate_gbps`` is the line
    rate in Gbit/s (None when unreadable); ``state`` e.g. ``ACTIVE``; ``link_layer``
    ``InfiniBand`` or ``Ethernet``; ``netdevs`` the Ethernet interfaces of a RoCE device."""

    hca: str
    port: int
    rate_gbps: float | None
    state: str | None
    link_layer: str | None
    netdevs: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


@dataclass(frozen=True)
class Rail:
    """Rail ``index``: its GPU (None on a node without GPUs), the HCA and port nearest it (None
    without RDMA devices), how near (``level``; ``order`` when no topology was readable and the
    devices were paired by name), the port's line rate in Gbit/s, and whether another rail uses
    the same HCA (``shared``: more GPUs than HCAs, so each gets part of the port)."""

    index: int
    gpu: int | None
    hca: str | None
    port: int | None
    level: str | None
    line_rate_gbps: float | None
    link_layer: str | None = None
    shared: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"rail": self.index, "gpu": self.gpu, "hca": self.hca, "port": self.port, "level": self.level,
                "line_rate_gbps": self.line_rate_gbps, "link_layer": self.link_layer, "shared": self.shared}


# --- nvidia-smi topo -m ------------------------------------------------------------------------

def query_topology(timeout_s: float, executable: str | None = None) -> str:
    """Run ``nvidia-smi topo -m`` and return its output. Raises TopologyUnavailable when it is
    not on PATH, cannot start, runs past ``timeout_s`` seconds, or exits non-zero."""
    return run_nvidia_smi(["topo", "-m"], timeout_s, executable, TopologyUnavailable)


def parse_topology(text: str) -> TopologyMatrix:
    """Parse ``nvidia-smi topo -m`` into its GPU-to-NIC distances.

    The matrix is tab-separated (some copies have spaces instead; the GPU and NIC columns come
    first, so splitting on whitespace still finds them). NIC columns are named by the ``NIC
    Legend`` (``NIC0: mlx5_0``); without a legend, by their column titles. Raises
    TopologyUnavailable when there is no GPU row.
    """
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line)), None)
    if header_at is None:
        raise TopologyUnavailable("no GPU matrix in the nvidia-smi topo -m output")
    columns = _cells(lines[header_at])
    legend = {f"NIC{m.group('index')}": m.group("name") for line in lines if (m := _NIC_LEGEND.match(line))}
    nic_columns = [(at, legend.get(title, title)) for at, title in enumerate(columns) if title.startswith("NIC")]
    levels: dict[int, dict[str, str]] = {}
    for line in lines[header_at + 1:]:
        match = re.match(r"^GPU(\d+)\b", line)
        if not match:
            if levels:
                break
            continue
        cells = _cells(line)[1:]
        levels[int(match.group(1))] = {name: cells[at].strip() for at, name in nic_columns if at < len(cells)}
    if not levels:
        raise TopologyUnavailable("the nvidia-smi topo -m matrix has no GPU rows")
    return TopologyMatrix(gpu_count=len(levels), nics=tuple(name for _, name in nic_columns), levels=levels)


def _cells(line: str) -> list[str]:
    """The cells of a matrix line; the header's leading empty cell (above the row titles) dropped."""
    if "\t" not in line:
        return line.split()
    cells = [cell.strip() for cell in line.split("\t")]
    return cells[1:] if line.startswith("\t") else cells


def level_rank(level: str) -> int:
    """0 for PIX ... 4 for SYS; anything else (``X``, ``NV#``, ``N/A``) ranks after SYS."""
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


def nearest_nics(levels: Mapping[int, Mapping[str, str]], nics: Sequence[str] | None = None) -> dict[int, NicChoice]:
    """The NIC of each GPU: the nearest one, each NIC going to one GPU while there are enough.

    Pairs (GPU, NIC) are taken nearest first, then by GPU index, then by the NIC's place in
    ``nics`` (default: sorted names); a pair is kept while both are still free. Two NICs equally
    near one GPU (the two ports of one card) go to that GPU's first. A GPU left without a free
    NIC shares its nearest one, the least shared first, and is marked ``shared`` (as is the GPU
    it shares with). Deterministic, so identical nodes get identical rails.
    """
    order = list(nics) if nics is not None else sorted({nic for row in levels.values() for nic in row}, key=_natural)
    place = {nic: at for at, nic in enumerate(order)}
    pairs = sorted(((level_rank(level), gpu, place[nic], nic, level)
                    for gpu, row in levels.items() for nic, level in row.items()
                    if nic in place and level_rank(level) < len(LEVELS)))
    chosen: dict[int, NicChoice] = {}
    taken: dict[str, int] = {}
    for _, gpu, _, nic, level in pairs:
        if gpu not in chosen and nic not in taken:
            chosen[gpu] = NicChoice(gpu, nic, level)
            taken[nic] = 1
    for gpu in sorted(set(levels) - set(chosen)):
        candidates = [(rank, taken.get(nic, 0), at, nic, level) for rank, g, at, nic, level in pairs if g == gpu]
        if not candidates:
            continue
        _, _, _, nic, level = min(candidates)
        taken[nic] = taken.get(nic, 0) + 1
        chosen[gpu] = NicChoice(gpu, nic, level, shared=taken[nic] > 1)
    return {gpu: (choice if taken[choice.nic] == 1 else NicChoice(gpu, choice.nic, choice.level, shared=True))
            for gpu, choice in sorted(chosen.items())}


# --- sysfs: PCIe distance (when nvidia-smi is not there) --------------------------------------

def sysfs_pci_level(first_bdf: str, second_bdf: str, sysfs_root: str | Path = SYSFS_ROOT) -> str | None:
    """The nvidia-smi distance word between two PCI functions, from their sysfs device paths.

    Under different host bridges: NODE when both are on one NUMA node, SYS otherwise. Under one:
    PHB when only the host bridge is shared; PIX when each is at most one bridge below the
    bridge they share (a PCIe switch counts as one bridge, as nvidia-smi counts it); PXB
    otherwise. None when either device is not in sysfs.
    """
    first, second = _pci_path(first_bdf, sysfs_root), _pci_path(second_bdf, sysfs_root)
    if first is None or second is None:
        return None
    if first[0] != second[0]:
        numa = {_read_text(Path(sysfs_root) / "bus" / "pci" / "devices" / bdf / "numa_node")
                for bdf in (normalize_bdf(first_bdf), normalize_bdf(second_bdf))}
        return "NODE" if len(numa) == 1 and None not in numa else "SYS"
    chain_a, chain_b = first[1:], second[1:]
    shared = len(os.path.commonprefix([chain_a, chain_b]))
    if shared == 0:
        return "PHB"
    return "PIX" if max(len(chain_a), len(chain_b)) - shared <= 2 else "PXB"


def normalize_bdf(bdf: str) -> str:
    """``00000000:18:00.0`` (NVML, torch) or ``18:00.0`` -> ``0000:18:00.0`` (sysfs), lower case."""
    parts = bdf.strip().lower().split(":")
    if len(parts) == 3:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    if len(parts) == 2:
        return f"0000:{parts[0]}:{parts[1]}"
    return bdf.strip().lower()


def hca_pci_address(hca: str, sysfs_root: str | Path = SYSFS_ROOT) -> str | None:
    """The PCI function (``0000:1a:00.0``) behind an RDMA device, or None."""
    device = Path(sysfs_root) / "class" / "infiniband" / hca / "device"
    try:
        return os.path.basename(os.path.realpath(device)) if device.exists() else None
    except OSError:
        return None


def sysfs_levels(gpu_bdfs: Mapping[int, str], hcas: Sequence[str],
                 sysfs_root: str | Path = SYSFS_ROOT) -> dict[int, dict[str, str]]:
    """``levels[gpu][hca]`` as :func:`parse_topology` gives them, from sysfs PCIe paths."""
    levels: dict[int, dict[str, str]] = {}
    for gpu, bdf in gpu_bdfs.items():
        row = {}
        for hca in hcas:
            address = hca_pci_address(hca, sysfs_root)
            level = sysfs_pci_level(bdf, address, sysfs_root) if address else None
            if level is not None:
                row[hca] = level
        levels[gpu] = row
    return levels


def _pci_path(bdf: str, sysfs_root: str | Path) -> list[str] | None:
    link = Path(sysfs_root) / "bus" / "pci" / "devices" / normalize_bdf(bdf)
    if not link.exists():
        return None
    parts = Path(os.path.realpath(link)).parts
    roots = [at for at, part in enumerate(parts) if part.startswith("pci")]
    return list(parts[roots[-1]:]) if roots else None


# --- sysfs: RDMA ports and line rates ----------------------------------------------------------

def parse_ib_rate_gbps(text: str) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 400.0; None for anything else."""
    match = _RATE.match(text)
    return float(match.group("number")) if match else None


def read_ib_rate_gbps(hca: str, port: int = 1, sysfs_root: str | Path = SYSFS_ROOT) -> float | None:
    """The line rate (Gbit/s) of ``hca`` port ``port`` from sysfs, or None when unreadable."""
    text = _read_text(Path(sysfs_root) / "class" / "infiniband" / hca / "ports" / str(port) / "rate")
    return parse_ib_rate_gbps(text) if text else None


def read_ethernet_speed_gbps(interface: str, sysfs_root: str | Path = SYSFS_ROOT) -> float | None:
    """The link speed (Gbit/s) of an Ethernet interface from ``class/net/<if>/speed`` (Mb/s);
    None when the file is unreadable (loopback, a link that is down) or says -1 (unknown)."""
    text = _read_text(Path(sysfs_root) / "class" / "net" / interface / "speed")
    try:
        megabits = int(text) if text else -1
    except ValueError:
        return None
    return megabits / 1000.0 if megabits > 0 else None


def list_ib_ports(sysfs_root: str | Path = SYSFS_ROOT) -> list[IbPort]:
    """Every port of every RDMA device under ``class/infiniband``, devices in natural name order
    (mlx5_2 before mlx5_10). Empty when there are none."""
    base = Path(sysfs_root) / "class" / "infiniband"
    try:
        hcas = sorted((entry.name for entry in base.iterdir()), key=_natural)
    except OSError:
        return []
    ports = []
    for hca in hcas:
        try:
            numbers = sorted(int(entry.name) for entry in (base / hca / "ports").iterdir() if entry.name.isdigit())
        except OSError:
            continue
        netdevs = _list_names(base / hca / "device" / "net")
        for number in numbers:
            folder = base / hca / "ports" / str(number)
            state = _read_text(folder / "state")
            ports.append(IbPort(hca=hca, port=number, rate_gbps=read_ib_rate_gbps(hca, number, sysfs_root),
                                state=state.split(":")[-1].strip() if state else None,
                                link_layer=_read_text(folder / "link_layer") or None, netdevs=netdevs))
    return ports


def first_port_per_hca(ports: Sequence[IbPort]) -> dict[str, IbPort]:
    """Each HCA's first active port (its first port when none is active), in HCA order."""
    chosen: dict[str, IbPort] = {}
    for port in ports:
        current = chosen.get(port.hca)
        if current is None or (port.active and not current.active):
            chosen[port.hca] = port
    return chosen


def plan_rails(gpu_count: int, ports: Sequence[IbPort], levels: Mapping[int, Mapping[str, str]] | None,
               nic_order: Sequence[str] | None = None) -> list[Rail]:
    """The rails of a node: one per GPU, each with its nearest HCA (see :func:`nearest_nics`).

    ``levels`` is the GPU-to-NIC distance table (nvidia-smi or sysfs); NICs in it that are not
    RDMA devices in ``ports`` are ignored. Without GPUs, one rail per HCA (``gpu`` None); with
    GPUs but no distances, GPU *i* gets the *i*-th HCA by name (level ``order``). Without HCAs,
    one rail per GPU with no HCA (the nccl backend then uses sockets, only where allowed).
    """
    by_hca = first_port_per_hca(ports)
    if gpu_count <= 0:
        return [_rail(index, None, port, None) for index, port in enumerate(by_hca.values())]
    if not by_hca:
        return [Rail(index, index, None, None, None, None) for index in range(gpu_count)]
    known = {gpu: {nic: level for nic, level in row.items() if nic in by_hca} for gpu, row in (levels or {}).items()}
    order = [nic for nic in (nic_order or by_hca) if nic in by_hca]
    choices = nearest_nics(known, order) if any(known.values()) else {}
    hcas = list(by_hca)
    rails = []
    for gpu in range(gpu_count):
        choice = choices.get(gpu)
        if choice is not None:
            rails.append(_rail(gpu, gpu, by_hca[choice.nic], choice.level, choice.shared))
        else:
            rails.append(_rail(gpu, gpu, by_hca[hcas[gpu % len(hcas)]], "order", gpu_count > len(hcas)))
    return rails


def discover_rails(gpu_count: int | None, gpu_bdfs: Mapping[int, str] | None = None,
                   hcas: Sequence[str] | None = None, sysfs_root: str | Path = SYSFS_ROOT,
                   query: Callable[[float], str] = query_topology, timeout_s: float = 15.0) -> tuple[list[Rail], str]:
    """This node's rails (see :func:`plan_rails`) and where the GPU-to-NIC distances came from:
    ``nvidia-smi``, ``sysfs`` (PCIe paths of ``gpu_bdfs``), or ``none (why)``.

    ``gpu_count`` None takes the count from the nvidia-smi matrix; ``hcas`` limits the RDMA
    devices rails may use; ``query`` replaces running ``nvidia-smi topo -m`` (tests).
    """
    ports = [port for port in list_ib_ports(sysfs_root) if hcas is None or port.hca in hcas]
    if not ports or gpu_count == 0:
        return plan_rails(gpu_count or 0, ports, None), "none (no GPU or no RDMA device to pair)"
    try:
        matrix = parse_topology(query(timeout_s))
    except TopologyUnavailable as missing:
        if not gpu_bdfs:
            return plan_rails(gpu_count or 0, ports, None), f"none ({missing})"
        levels = sysfs_levels(gpu_bdfs, [port.hca for port in ports], sysfs_root)
        return plan_rails(gpu_count if gpu_count is not None else len(gpu_bdfs), ports, levels), "sysfs"
    count = matrix.gpu_count if gpu_count is None else gpu_count
    return plan_rails(count, ports, matrix.levels, matrix.nics), "nvidia-smi"


def _rail(index: int, gpu: int | None, port: IbPort, level: str | None, shared: bool = False) -> Rail:
    return Rail(index, gpu, port.hca, port.port, level, port.rate_gbps, port.link_layer, shared)


# --- which interface carries an address --------------------------------------------------------

def interface_for_address(address: str, proc_if_inet6: str = PROC_NET_IF_INET6) -> str | None:
    """The name of the local interface that holds ``address`` (IPv4 or IPv6), or None.

    IPv4 through the SIOCGIFADDR ioctl on each interface, IPv6 from ``/proc/net/if_inet6``.
    """
    try:
        wanted = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return None
    if isinstance(wanted, ipaddress.IPv6Address) and wanted.ipv4_mapped is not None:
        wanted = wanted.ipv4_mapped
    if isinstance(wanted, ipaddress.IPv6Address):
        return _ipv6_interface(wanted, proc_if_inet6)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # an interface without an IPv4 address
            if socket.inet_ntoa(raw[20:24]) == str(wanted):
                return name
    return None


def interface_addresses(name: str, proc_if_inet6: str = PROC_NET_IF_INET6) -> list[str]:
    """The addresses of interface ``name``: its IPv4 address (SIOCGIFADDR) first, then its
    global IPv6 addresses; empty when it has none or does not exist."""
    addresses = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            raw = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            addresses.append(socket.inet_ntoa(raw[20:24]))
        except OSError:
            pass  # no such interface, or no IPv4 address on it
    for line in _read_text(Path(proc_if_inet6)).splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5] == name:
            address = ipaddress.IPv6Address(int(fields[0], 16))
            if not (address.is_link_local or address.is_loopback):
                addresses.append(str(address))
    return addresses


def local_address_towards(host: str, port: int) -> str | None:
    """The local address this node would use to reach ``host`` (no packet is sent), or None."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, kind, proto, _, target in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.connect(target)
                return str(probe.getsockname()[0])
        except OSError:
            continue
    return None


def _ipv6_interface(wanted: ipaddress.IPv6Address, proc_if_inet6: str) -> str | None:
    text = _read_text(Path(proc_if_inet6))
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and ipaddress.IPv6Address(int(fields[0], 16)) == wanted:
            return fields[5]
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _list_names(folder: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted(entry.name for entry in folder.iterdir()))
    except OSError:
        return ()


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))
