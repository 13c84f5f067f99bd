"""Simulated NIC ports: one InfiniBand port per rail (``mlx5_<rail>`` port 1, at the SKU's line
rate, 4X), printed as probes/nicports.py prints sysfs, and the ``nic_port`` fault that changes one.

The ``nic_port`` fault (host, rail, and at least one of state, width, rate_gbps, counter+count):
- ``state``: ``DOWN`` (physical state Polling, the cable seen by no peer), ``POLLING`` (the
  same), ``DISABLED`` (DOWN, physical state Disabled), ``INIT`` or ``ARMED`` (physical link up,
  no subnet manager has made it ACTIVE);
- ``width`` (1 or 2 lanes of 4): the port trains narrower, its rate scales with it;
- ``rate_gbps``: the port's rate (below the line rate), e.g. 200 of 400 at a lower speed;
- ``counter`` (a key of COUNTERS) and ``count``: that error counter reads ``count``.
The pair tests (``--links``) are not changed by it: ``slow_nic`` does that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .printed import record
from .reader import FieldReader, one_of

# Fault state -> (IB state, physical state) as sysfs names them.
STATES = {"DOWN": ("DOWN", "Polling"), "POLLING": ("DOWN", "Polling"), "DISABLED": ("DOWN", "Disabled"),
          "INIT": ("INIT", "LinkUp"), "ARMED": ("ARMED", "LinkUp")}
# The counters of an mlx5 port (sysfs counters/), every one 0 on a healthy port.
COUNTERS = ("excessive_buffer_overrun_errors", "link_downed", "link_error_recovery", "local_link_integrity_errors",
            "port_rcv_constraint_errors", "port_rcv_errors", "port_rcv_remote_physical_errors",
            "port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_xmit_discards", "symbol_error",
            "VL15_dropped")
# Line rate (Gbit/s) -> (HCA type, speed name, per-lane Gbit/s) of a 4X port.
HCAS = {800.0: ("MT4131", "XDR", 200.0), 400.0: ("MT4129", "NDR", 100.0), 200.0: ("MT4123", "HDR", 50.0),
        100.0: ("MT4119", "EDR", 25.0)}
LANES = 4
NARROW_WIDTHS = (1, 2)


@dataclass(frozen=True)
class PortFault:
    """What a ``nic_port`` fault does to its rail's port (None: unchanged)."""

    rail: int
    state: str | None = None
    width: int | None = None
    rate_gbps: float | None = None
    counter: str | None = None
    count: int = 0


def nic_port_fields(read: FieldReader, entry: dict[str, Any], path: str, line_rate_gbps: float) -> dict[str, Any]:
    """A ``nic_port`` fault's state, width, rate_gbps and counter, checked (``count`` and ``rail``
    are the common fields'). Raises InputError."""
    changes = [key for key in ("state", "width", "rate_gbps", "counter") if key in entry]
    if not changes:
        raise read.error(path, "a nic_port fault needs at least one of state, width, rate_gbps, counter")
    if ("counter" in entry) != ("count" in entry):
        raise read.error(path, "counter and count go together (which counter, and what it reads)")
    fields: dict[str, Any] = {}
    if "state" in entry:
        fields["state"] = one_of(read, entry, "state", path, tuple(STATES), "a port state")
    if "width" in entry:
        fields["width"] = one_of(read, entry, "width", path, NARROW_WIDTHS, f"a width below {LANES}X")
    if "rate_gbps" in entry:
        rate = float(read.value(entry, "rate_gbps", None, float, path))
        if not 0 < rate < line_rate_gbps:
            raise read.error(f"{path}.rate_gbps", f"{rate:g} is not below the {line_rate_gbps:g} Gbit/s line rate")
        fields["rate_gbps"] = rate
    if "counter" in entry:
        fields["counter"] = one_of(read, entry, "counter", path, COUNTERS, "a NIC port counter")
    return fields


def port_faults(faults: Sequence[Any]) -> tuple[PortFault, ...]:
    """The ``nic_port`` faults of one node as PortFaults."""
    return tuple(PortFault(f.rail or 0, f.state, f.width, f.rate_gbps, f.counter, f.count)
                 for f in faults if f.kind == "nic_port")


def port_records(rails: int, line_rate_gbps: float, faults: Sequence[PortFault]) -> list[dict[str, Any]]:
    """One ``nic_port`` record per rail, as probes/nicports.py prints sysfs."""
    return [_port_record(rail, line_rate_gbps, [f for f in faults if f.rail == rail]) for rail in range(rails)]


def _port_record(rail: int, line_rate_gbps: float, faults: Sequence[PortFault]) -> dict[str, Any]:
    model, speed, lane_gbps = HCAS.get(line_rate_gbps, ("MT4129", "NDR", line_rate_gbps / LANES))
    state, phys_state, width, rate = "ACTIVE", "LinkUp", LANES, line_rate_gbps
    counters = dict.fromkeys(COUNTERS, 0)
    for fault in faults:
        if fault.state is not None:
            state, phys_state = STATES[fault.state]
        if fault.width is not None:
            width, rate = fault.width, fault.width * lane_gbps
        if fault.rate_gbps is not None:
            rate = fault.rate_gbps
            speed = next((name for _, name, lane in HCAS.values() if lane * width == rate), speed)
        if fault.counter is not None:
            counters[fault.counter] = fault.count
    if state == "DOWN":
        width, rate, speed = 4, 10.0, "SDR"  # what sysfs reads of a port that never trained
    gbps = int(rate) if float(rate).is_integer() else rate
    details = {"kind": "ib", "state": state, "phys_state": phys_state, "rate_gbps": gbps, "width": f"{width}X",
               "speed": speed, "link_layer": "InfiniBand", "model": model, "ca": f"mlx5_{rail}", "port": 1,
               "netdev": None, "counters": counters, "source": "sysfs"}
    return record("telemetry", f"nic:mlx5_{rail}/1", "nic_port", gbps, "Gbit/s", samples=1, details=details)
