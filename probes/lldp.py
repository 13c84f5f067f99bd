"""The switch port at the other end of each of the node's links, as lldpd heard it (LLDP).

Read passively from ``lldpctl -f json`` where lldpd runs: nothing is sent, and a node without
lldpctl, or whose lldpctl fails or takes longer than LLDPCTL_TIMEOUT_S, has no such fact.
lldpd's JSON (its ``json`` format, not ``json0``) folds its tree as its writer goes: an array of
one element becomes the element, an object whose only key is ``value`` becomes that value, and an
object with a ``name`` becomes ``{name: object}``. So ``lldp.interface`` is one object keyed by
the local interface when there is one neighbour, else a list of such one-key objects; a
``chassis`` is keyed by the neighbour's system name (unkeyed when it sent none); ``mgmt-ip`` is a
string, or a list when there are several. Everything a neighbour sends is bounded: at most
MAX_NEIGHBOURS entries, strings cut to MAX_TEXT characters, management addresses IP literals.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .topology import IbPort, Rail, discover_rails, list_ib_ports

LLDPCTL_TIMEOUT_S = 5.0
MAX_NEIGHBOURS = 64
MAX_TEXT = 255
MAX_OUTPUT_BYTES = 4 << 20
# Port ID subtypes that name the switch's port itself (an interface name, alias or local name); for
# the others (a MAC, an address) the port description says more.
_NAMED_PORT_IDS = ("ifname", "ifalias", "local")


class LldpOutputError(ValueError):
    """lldpctl's output is not lldpd's JSON; the message says why."""


@dataclass(frozen=True)
class LldpNeighbour:
    """The neighbour heard on one local ``interface``: its system name (``switch``), the port it
    sent from, its first management address (an IP literal), and the rail whose RDMA device
    owns ``interface`` (None: no rail's)."""

    interface: str
    switch: str | None
    port: str | None
    mgmt_ip: str | None
    rail: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"interface": self.interface, "switch": self.switch, "port": self.port, "mgmt_ip": self.mgmt_ip,
                "rail": self.rail}


def parse_lldpctl_json(text: str) -> list[LldpNeighbour]:
    """The neighbours of ``lldpctl -f json`` output (rails None), at most MAX_NEIGHBOURS, in its
    order. No neighbour: empty. Raises LldpOutputError when ``text`` is not lldpd's JSON."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise LldpOutputError(f"not JSON: {error}") from None
    if not isinstance(document, dict) or "lldp" not in document:
        raise LldpOutputError("no 'lldp' object at the top")
    root = document["lldp"]
    if isinstance(root, list):  # no neighbour at all: an empty array or object, as lldpd versions print it
        root = root[0] if root and isinstance(root[0], dict) else {}
    if not isinstance(root, dict):
        raise LldpOutputError("'lldp' is neither an object nor an array")
    neighbours = []
    for name, entry in _interfaces(root.get("interface")):
        neighbours.append(_neighbour(name, entry))
        if len(neighbours) == MAX_NEIGHBOURS:
            break
    return neighbours


def _interfaces(value: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(local interface, its entry) of the ``interface`` value: an object keyed by interface, or a
    list of such objects; entries that are not objects are left out."""
    for keyed in value if isinstance(value, list) else [value]:
        if isinstance(keyed, dict):
            for name, entry in keyed.items():
                if isinstance(entry, dict):
                    yield name, entry


def _neighbour(interface: str, entry: Mapping[str, Any]) -> LldpNeighbour:
    switch, chassis = _chassis(entry.get("chassis"))
    return LldpNeighbour(interface=_text(interface) or "", switch=switch, port=_port(entry.get("port")),
                         mgmt_ip=_mgmt_ip(chassis.get("mgmt-ip")))


def _chassis(value: Any) -> tuple[str | None, Mapping[str, Any]]:
    """(system name, the chassis' fields) of a ``chassis`` value: ``{name: fields}``, or the
    fields themselves when the neighbour sent no name."""
    if isinstance(value, list):
        value = next((item for item in value if isinstance(item, dict)), {})
    if not isinstance(value, dict):
        return None, {}
    if len(value) == 1:
        name, fields = next(iter(value.items()))
        if isinstance(fields, dict) and not _is_id(fields):
            return _text(name), fields
    return None, value


def _is_id(value: Mapping[str, Any]) -> bool:
    # An unnamed chassis that sent its ID only ({"id": {"type", "value"}}), not one named "id".
    return set(value) == {"type", "value"}


def _port(value: Any) -> str | None:
    """The neighbour's port: its ID where that names the port (an interface name, alias or local
    name), else its description, else whatever ID it sent."""
    if isinstance(value, list):
        value = next((item for item in value if isinstance(item, dict)), {})
    if not isinstance(value, dict):
        return None
    port_id = value.get("id")
    kind, identifier = (port_id.get("type"), _text(port_id.get("value"))) if isinstance(port_id, dict) else (
        None, _text(port_id))
    description = _text(value.get("descr"))
    if kind in _NAMED_PORT_IDS and identifier:
        return identifier
    return description or identifier


def _mgmt_ip(value: Any) -> str | None:
    """The first IP literal of ``mgmt-ip`` (a string or a list), a link-local one only when there
    is no other."""
    found = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str):
            try:
                found.append(ipaddress.ip_address(item[:64]))
            except ValueError:
                continue
    ranked = sorted(found, key=lambda address: address.is_link_local)
    return str(ranked[0]) if ranked else None


def _text(value: Any) -> str | None:
    """A string cut to MAX_TEXT printable characters (others become ``?``); None for no string."""
    if not isinstance(value, str):
        return None
    cut = "".join(char if char.isprintable() else "?" for char in value[:MAX_TEXT]).strip()
    return cut or None


# --- the node's side -----------------------------------------------------------------------------

def query_lldpctl(executable: str = "lldpctl", timeout_s: float = LLDPCTL_TIMEOUT_S) -> str | None:
    """``lldpctl -f json``'s output; None where there is no such program, it fails (lldpd not
    running), it says more than MAX_OUTPUT_BYTES, or it takes longer than ``timeout_s`` seconds."""
    path = shutil.which(executable)
    if path is None:
        return None
    try:
        done = subprocess.run([path, "-f", "json"], capture_output=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or len(done.stdout) > MAX_OUTPUT_BYTES:
        return None
    return done.stdout.decode("utf-8", errors="replace")


def rails_by_interface(rails: Sequence[Rail], ports: Sequence[IbPort]) -> dict[str, int]:
    """Each network interface of an RDMA device (a RoCE port's netdev) -> the first rail, by
    index, that uses that device."""
    netdevs: dict[str, tuple[str, ...]] = {}
    for port in ports:
        netdevs.setdefault(port.hca, port.netdevs)
    found: dict[str, int] = {}
    for rail in sorted(rails, key=lambda rail: rail.index):
        for netdev in netdevs.get(rail.hca or "", ()):
            found.setdefault(netdev, rail.index)
    return found


def with_rails(neighbours: Sequence[LldpNeighbour], rail_of: Mapping[str, int]) -> list[LldpNeighbour]:
    """``neighbours`` with the rail of each one's interface (None where no rail's device owns it)."""
    return [LldpNeighbour(n.interface, n.switch, n.port, n.mgmt_ip, rail_of.get(n.interface)) for n in neighbours]


def read_lldp(gpu_bdfs: Mapping[int, str], gpu_count: int, sysfs_root: str = "/sys", executable: str = "lldpctl",
              *, timeout_s: float = LLDPCTL_TIMEOUT_S, topology_timeout_s: float = 15.0) -> list[dict[str, Any]] | None:
    """This node's LLDP neighbours as the facts carry them (:meth:`LldpNeighbour.to_dict`), each
    with its interface's rail (the rails of probes/topology.py for ``gpu_count`` GPUs at
    ``gpu_bdfs``); None where lldpctl is missing, fails, takes longer than ``timeout_s`` seconds
    or prints no lldpd JSON."""
    text = query_lldpctl(executable, timeout_s)
    if text is None:
        return None
    try:
        neighbours = parse_lldpctl_json(text)
    except LldpOutputError:
        return None
    ports = list_ib_ports(sysfs_root) if neighbours else []
    rail_of: dict[str, int] = {}
    if any(port.netdevs for port in ports):  # only RoCE ports have interfaces LLDP runs on
        rails, _ = discover_rails(gpu_count, gpu_bdfs, None, sysfs_root, timeout_s=topology_timeout_s)
        rail_of = rails_by_interface(rails, ports)
    return [neighbour.to_dict() for neighbour in with_rails(neighbours, rail_of)]
