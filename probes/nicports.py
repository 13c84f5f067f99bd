"""NIC ports read without traffic: each InfiniBand/RoCE port's state, physical state, rate (and
width), link layer and error counters from sysfs, and the speed and state of each physical
Ethernet interface that has no RDMA device; ``ibstat`` text parsed into the same shape.

A port trained at half width, one left DOWN or POLLING, or one whose symbol-error counter keeps
growing is visible here before any pair test runs. The controller judges the ports against their
peers (gpudiag/analysis/ports.py); this module only reads.

Records: probe ``telemetry``, metric ``nic_port``, device ``nic:<ca>/<port>`` (``nic:mlx5_0/1``)
or ``nic:<netdev>`` (``nic:eth2``); value the rate in Gbit/s (None where the kernel does not say,
e.g. an Ethernet link that is down); ``details`` the readings (see :meth:`PortReading.details`).
A port whose state cannot be read is an ``error`` record naming the file; a node with neither an
RDMA device nor a physical network interface gets one ``skipped`` record on device ``nic``
(``n/a: ...``): no NIC is no fault.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .records import Record, failed, skipped

PROBE = "telemetry"
METRIC = "nic_port"
UNIT = "Gbit/s"
NO_NIC_DEVICE = "nic"
# Ports read on one node at most: a GPU node has 8 to 18; a sysfs tree listing thousands is broken.
MAX_PORTS = 128
# Counters read per port at most, and the longest sysfs value read (bytes).
MAX_COUNTERS = 64
MAX_VALUE_BYTES = 256
# ARPHRD_INFINIBAND: an IPoIB interface (its port is read through /sys/class/infiniband).
IPOIB_TYPE = "32"
# sysfs ``rate``: "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", "10 Gb/sec (4X SDR)".
_RATE = re.compile(r"\s*(?P<gbps>\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((?P<width>\d+X)\s*(?P<speed>[A-Za-z0-9]+)?\))?\s*")
# A CA or netdev name a record's device may carry (the controller refuses other characters).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,47}")
# sysfs ``state`` / ``phys_state``: "4: ACTIVE", "5: LinkUp".
_NUMBERED = re.compile(r"\s*\d+\s*:\s*(?P<name>\S+)\s*")


@dataclass(frozen=True)
class PortReading:
    """One NIC port as read. ``kind``: ``ib`` (an RDMA device's port, InfiniBand or RoCE) or
    ``ethernet`` (a netdev without one). ``state``: IB's logical state (``ACTIVE``, ``DOWN``,
    ``INIT``, ``ARMED``) or the netdev's operstate upper-cased (``UP``, ``DOWN``); ``phys_state``
    IB's physical state (``LinkUp``, ``Polling``, ``Disabled``); ``rate_gbps`` in Gbit/s;
    ``width`` (``4X``) and ``speed`` (``NDR``) where the rate names them; ``model`` the HCA type
    (``MT4129``) or the netdev's driver; ``counters`` the error counters by sysfs name;
    ``problems`` the reads that failed (a port with no state is unreadable)."""

    device: str
    kind: str
    state: str | None
    phys_state: str | None = None
    rate_gbps: float | None = None
    width: str | None = None
    speed: str | None = None
    link_layer: str | None = None
    model: str | None = None
    ca: str | None = None
    port: int | None = None
    netdev: str | None = None
    counters: Mapping[str, int] = field(default_factory=dict)
    source: str = "sysfs"
    problems: tuple[str, ...] = ()

    def details(self) -> dict[str, Any]:
        """The record's details: every reading, None where it was not read."""
        return {"kind": self.kind, "state": self.state, "phys_state": self.phys_state, "rate_gbps": self.rate_gbps,
                "width": self.width, "speed": self.speed, "link_layer": self.link_layer, "model": self.model,
                "ca": self.ca, "port": self.port, "netdev": self.netdev, "counters": dict(self.counters),
                "source": self.source}

    def record(self) -> Record:
        """The port's record: ``ok`` with its rate, or ``error`` when its state could not be read."""
        if self.state is None:
            why = "; ".join(self.problems) or "no state"
            return failed(PROBE, self.device, METRIC, f"the port's state could not be read: {why}",
                          details=self.details())
        return Record(probe=PROBE, device=self.device, metric=METRIC, value=self.rate_gbps, unit=UNIT, samples=1,
                      details=self.details())


def run(sysfs_root: str = "/") -> Iterator[Record]:
    """The ``nic_port`` records of this node (module docstring). ``sysfs_root``: where ``sys/``
    lies (a test's fake tree). Raises nothing for a missing or unreadable sysfs."""
    ports = read_ports(sysfs_root)
    if isinstance(ports, str):
        yield failed(PROBE, NO_NIC_DEVICE, METRIC, ports)
        return
    if not ports:
        yield skipped(PROBE, NO_NIC_DEVICE, METRIC, "n/a: no RDMA device and no physical network interface")
        return
    for port in ports[:MAX_PORTS]:
        yield port.record()
    if len(ports) > MAX_PORTS:
        yield failed(PROBE, NO_NIC_DEVICE, METRIC, f"{len(ports)} ports listed; only the first {MAX_PORTS} were read")


def read_ports(sysfs_root: str = "/") -> list[PortReading] | str:
    """Every RDMA port, then every physical netdev without an RDMA device, in name order; or why
    nothing could be listed (a string)."""
    infiniband = os.path.join(sysfs_root, "sys", "class", "infiniband")
    net = os.path.join(sysfs_root, "sys", "class", "net")
    try:
        cas = sorted(name for name in os.listdir(infiniband) if _NAME.fullmatch(name)) \
            if os.path.isdir(infiniband) else []
        netdevs = sorted(name for name in os.listdir(net) if _NAME.fullmatch(name)) if os.path.isdir(net) else []
    except OSError as error:
        return f"sysfs could not be listed: {error.strerror or error}"
    ports: list[PortReading] = []
    taken: set[str] = set()
    for ca in cas[:MAX_PORTS]:
        ca_path = os.path.join(infiniband, ca)
        taken.update(_listed(os.path.join(ca_path, "device", "net")))
        for port in _port_numbers(ca_path):
            ports.append(read_ib_port(ca_path, ca, port))
    for name in netdevs[:MAX_PORTS]:
        if name not in taken:
            found = read_netdev(os.path.join(net, name), name)
            if found is not None:
                ports.append(found)
    return ports


def read_ib_port(ca_path: str, ca: str, port: int) -> PortReading:
    """One RDMA port: ``<ca_path>/ports/<port>/{state,phys_state,rate,link_layer,counters/*}``."""
    path = os.path.join(ca_path, "ports", str(port))
    problems: list[str] = []
    state = _numbered(_read(os.path.join(path, "state"), problems))
    phys_state = _numbered(_read(os.path.join(path, "phys_state"), problems))
    rate_text = _read(os.path.join(path, "rate"), problems)
    rate_gbps, width, speed = parse_rate(rate_text) if rate_text is not None else (None, None, None)
    if rate_text is not None and rate_gbps is None:
        problems.append(f"rate {rate_text!r} is not '<n> Gb/sec (<width> <speed>)'")
    return PortReading(device=f"nic:{ca}/{port}", kind="ib", state=state.upper() if state else None,
                       phys_state=phys_state, rate_gbps=rate_gbps, width=width, speed=speed,
                       link_layer=_read(os.path.join(path, "link_layer"), problems),
                       model=_read(os.path.join(ca_path, "hca_type"), []), ca=ca, port=port,
                       counters=read_counters(os.path.join(path, "counters")), problems=tuple(problems))


def read_netdev(path: str, name: str) -> PortReading | None:
    """A physical Ethernet interface (one with a ``device`` link) as a port: ``operstate`` and
    ``speed`` (Mb/s); None for a virtual one (loopback, bridge, veth, bond) or an IPoIB one."""
    if not os.path.exists(os.path.join(path, "device")) or _read(os.path.join(path, "type"), []) == IPOIB_TYPE:
        return None
    problems: list[str] = []
    state = _read(os.path.join(path, "operstate"), problems)
    speed_mbps = _read(os.path.join(path, "speed"), [])  # EINVAL while the link is down: no rate, not a failure
    rate_gbps = None
    if speed_mbps is not None and speed_mbps.lstrip("-").isdigit() and int(speed_mbps) > 0:
        rate_gbps = int(speed_mbps) / 1000
    driver = os.path.basename(os.path.realpath(os.path.join(path, "device", "driver")))
    return PortReading(device=f"nic:{name}", kind="ethernet", state=state.upper() if state else None,
                       rate_gbps=rate_gbps, link_layer="Ethernet", model=driver or None, netdev=name,
                       problems=tuple(problems))


def parse_rate(text: str) -> tuple[float | None, str | None, str | None]:
    """(Gbit/s, width, speed) of a sysfs ``rate`` ("400 Gb/sec (4X NDR)"); (None, None, None) for
    text that is none."""
    match = _RATE.fullmatch(text)
    if match is None:
        return None, None, None
    gbps = float(match["gbps"])
    return (int(gbps) if gbps.is_integer() else gbps), match["width"], match["speed"]


def read_counters(path: str) -> dict[str, int]:
    """The port's counters (``counters/*``) that read as a non-negative integer, by name; a
    counter the kernel refuses to read (EINVAL on some HCAs) is left out."""
    counters: dict[str, int] = {}
    for name in sorted(_listed(path))[:MAX_COUNTERS]:
        text = _read(os.path.join(path, name), [])
        if text is not None and text.isdigit():
            counters[name] = int(text)
    return counters


# ------------------------------------------------------------------------------ ibstat


def parse_ibstat(text: str) -> list[PortReading]:
    """The ports ``ibstat`` lists, shaped as sysfs's (``source`` ``ibstat``, no counters): each
    ``CA '<name>'`` with its ``CA type`` and its ``Port <n>:`` blocks' ``State``, ``Physical
    state``, ``Rate`` (Gbit/s) and ``Link layer``."""
    ports: list[PortReading] = []
    ca, model = None, None
    port: dict[str, Any] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("CA '") and stripped.endswith("'"):
            ports += _ibstat_port(ca, model, port)
            ca, model, port = stripped[4:-1], None, None
        elif stripped.startswith("CA type:"):
            model = stripped.partition(":")[2].strip() or None
        elif re.fullmatch(r"Port \d+:", stripped):
            ports += _ibstat_port(ca, model, port)
            port = {"port": int(stripped[5:-1])}
        elif port is not None and ":" in stripped:
            key, _, value = stripped.partition(":")
            port[key.strip()] = value.strip()
    return ports + _ibstat_port(ca, model, port)


def _ibstat_port(ca: str | None, model: str | None, port: Mapping[str, Any] | None) -> list[PortReading]:
    if ca is None or port is None:
        return []
    rate = port.get("Rate")
    rate_gbps = float(rate) if isinstance(rate, str) and re.fullmatch(r"\d+(\.\d+)?", rate) else None
    state = port.get("State")
    return [PortReading(device=f"nic:{ca}/{port['port']}", kind="ib", state=state.upper() if state else None,
                        phys_state=port.get("Physical state"),
                        rate_gbps=int(rate_gbps) if rate_gbps is not None and rate_gbps.is_integer() else rate_gbps,
                        link_layer=port.get("Link layer"), model=model, ca=ca, port=port["port"], source="ibstat")]


# ------------------------------------------------------------------------------ sysfs reads


def _read(path: str, problems: list[str]) -> str | None:
    """The stripped text of a sysfs file (at most MAX_VALUE_BYTES), or None with the reason added
    to ``problems``."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_VALUE_BYTES)
    except OSError as error:
        problems.append(f"{path}: {error.strerror or error}")
        return None
    text = data.decode("ascii", "replace").strip()
    return text if text.isprintable() else None


def _numbered(text: str | None) -> str | None:
    """``ACTIVE`` of "4: ACTIVE" (the text as it is where it has no number)."""
    if text is None:
        return None
    match = _NUMBERED.fullmatch(text)
    return match["name"] if match else text


def _listed(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _port_numbers(ca_path: str) -> list[int]:
    return sorted(int(name) for name in _listed(os.path.join(ca_path, "ports")) if name.isdigit() and len(name) < 4)
