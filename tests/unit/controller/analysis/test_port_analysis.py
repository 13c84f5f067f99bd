"""NIC ports judged against their peers (gpudiag.analysis.ports) through ``analyse``: host dicts
carrying the records the simulated fleet prints (gpudiag/sim/nicports.py, shaped as
probes/nicports.py prints sysfs)."""

from __future__ import annotations

import copy
from typing import Any

from gpudiag.analysis import analyse
from gpudiag.analysis.thresholds import default_thresholds
from gpudiag.sim.nicports import PortFault, port_records

HOSTS = [f"node{i:03d}" for i in range(1, 5)]


def _host(name: str, faults: tuple[PortFault, ...] = (), ports: int = 8, rate: float = 400.0) -> dict[str, Any]:
    facts = {"hostname": name, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 0, "driver_version": "550"}
    return {"host": name, "status": "ok", "error": None, "duration_s": 1.0, "facts": facts,
            "results": port_records(ports, rate, faults)}


def _fleet(**faults: tuple[PortFault, ...]) -> list[dict[str, Any]]:
    return [_host(name, faults.get(name, ())) for name in HOSTS]


def _ports(hosts: list[dict[str, Any]], previous: list[dict[str, Any]] | None = None) -> list[Any]:
    analysis = analyse(hosts, default_thresholds(), previous_hosts=previous)
    return [f for f in analysis.findings if f.kind == "nic_port"]


def test_healthy_ports_make_no_finding():
    assert _ports(_fleet()) == []


def test_a_port_at_half_rate_is_a_drain_naming_port_rate_and_peers():
    [found] = _ports(_fleet(node003=(PortFault(rail=5, width=2),)))
    assert (found.host, found.severity, found.action, found.value, found.reference) == ("node003", "fail", "drain",
                                                                                        200, 400)
    assert found.evidence.startswith("mlx5_5 port 1: ACTIVE at 200 Gbit/s (2X NDR)")


def test_a_port_down_is_a_drain_while_its_peers_are_up():
    [found] = _ports(_fleet(node002=(PortFault(rail=0, state="DOWN"),)))
    assert (found.host, found.severity, found.action, found.metric) == ("node002", "fail", "drain",
                                                                        "telemetry.nic_port_state")
    assert found.evidence == ("mlx5_0 port 1: DOWN (physical state Polling); 31 of 31 ports of its kind "
                              "(MT4129 InfiniBand port 1) are up")


def test_one_node_alone_is_judged_against_its_own_other_ports():
    [found] = _ports([_host("node001", (PortFault(rail=2, rate_gbps=200),))])
    assert found.severity == "fail" and found.evidence.startswith("mlx5_2 port 1: ACTIVE at 200 Gbit/s (4X HDR)")


def test_ports_switched_off_everywhere_are_no_fault_and_a_lone_port_down_is_not_a_pass():
    disabled = tuple(PortFault(rail=rail, state="DISABLED") for rail in range(8))
    assert _ports([_host(name, disabled) for name in HOSTS]) == []
    [lone] = _ports([_host("node001", (PortFault(rail=0, state="POLLING"),), ports=1)])
    assert (lone.severity, lone.action) == ("warn", "inspect") and "not compared, not passed" in lone.evidence


def test_a_node_printing_many_slow_ports_weighs_once():
    hosts = _fleet()
    hosts.append(_host("node005", tuple(PortFault(rail=r, width=2) for r in range(100)), ports=100))
    found = _ports(hosts)
    assert {f.host for f in found} == {"node005"} and len(found) == 100


def test_symbol_errors_are_judged_on_their_growth_since_the_previous_sweep():
    def fleet(count: int) -> list[dict[str, Any]]:
        return _fleet(node004=(PortFault(rail=7, counter="symbol_error", count=count),))

    [since_boot] = _ports(fleet(5000))
    assert (since_boot.severity, since_boot.action, since_boot.value) == ("warn", "inspect", 5000)
    assert since_boot.evidence.startswith("mlx5_7 port 1: symbol errors 5000 since the driver loaded")
    assert _ports(fleet(5000), previous=fleet(5000)) == []  # an old burst that stopped
    [grown] = _ports(fleet(9000), previous=fleet(5000))
    assert grown.metric == "telemetry.nic_port_symbol_error_growth" and grown.value == 4000
    assert "grew by 4000 since the previous sweep (now 9000)" in grown.evidence


def test_findings_are_byte_identical_in_any_host_order():
    hosts = _fleet(node002=(PortFault(rail=0, state="DOWN"),), node003=(PortFault(rail=5, width=2),),
                   node004=(PortFault(rail=7, counter="link_downed", count=40),))
    forward = [f.to_dict() for f in _ports(copy.deepcopy(hosts))]
    backward = [f.to_dict() for f in _ports(list(reversed(hosts)))]
    assert forward == backward and len(forward) == 3
