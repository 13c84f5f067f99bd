"""The NIC port reader (probes/nicports.py) on fake sysfs trees and real ``ibstat`` captures, and
its records through the controller's record and node checks (gpudiag.schema)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpudiag.records import ProbeResult
from gpudiag.run.nodecheck import MAX_NIC_PORTS, check_host_records
from gpudiag.schema.recordcheck import RecordTypeError, check_record
from probes import nicports, telemetry
from probes.context import ProbeContext

DATA = Path(__file__).resolve().parents[2] / "data" / "ibstat"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _ib_port(root: Path, ca: str, port: int, state: str, phys: str, rate: str, layer: str = "InfiniBand",
             counters: dict[str, int] | None = None, hca: str = "MT4129", netdev: str | None = None) -> None:
    ca_path = root / "sys" / "class" / "infiniband" / ca
    _write(ca_path / "hca_type", hca)
    folder = ca_path / "ports" / str(port)
    _write(folder / "state", state)
    _write(folder / "phys_state", phys)
    _write(folder / "rate", rate)
    _write(folder / "link_layer", layer)
    for name, count in (counters or {"symbol_error": 0, "link_downed": 0}).items():
        _write(folder / "counters" / name, str(count))
    if netdev is not None:
        (ca_path / "device" / "net" / netdev).mkdir(parents=True, exist_ok=True)


def _netdev(root: Path, name: str, operstate: str, speed: str | None, physical: bool = True,
            kind: str = "1", driver: str = "ice") -> None:
    folder = root / "sys" / "class" / "net" / name
    _write(folder / "operstate", operstate)
    _write(folder / "type", kind)
    if speed is not None:
        _write(folder / "speed", speed)
    if physical:
        drivers = root / "sys" / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        (folder / "device").mkdir(parents=True, exist_ok=True)
        os.symlink(drivers, folder / "device" / "driver")


def _records(root: Path) -> dict[str, object]:
    return {record.device: record for record in nicports.run(str(root))}


def test_sysfs_ports_are_read_with_state_rate_width_layer_and_counters(tmp_path):
    _ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)",
             counters={"symbol_error": 12, "link_downed": 1, "port_rcv_errors": 0})
    _ib_port(tmp_path, "mlx5_1", 1, "1: DOWN", "2: Polling", "10 Gb/sec (4X SDR)")
    _ib_port(tmp_path, "mlx5_2", 1, "4: ACTIVE", "5: LinkUp", "200 Gb/sec (2X NDR)")
    _ib_port(tmp_path, "mlx5_bond_0", 1, "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", layer="Ethernet",
             hca="MT41692", netdev="bond0")
    _netdev(tmp_path, "bond0", "up", "200000")  # the RoCE device's own netdev: read through the RDMA port
    _netdev(tmp_path, "eno1", "up", "25000")
    _netdev(tmp_path, "eno2", "down", None)  # speed refuses to read (EINVAL) while the link is down
    _netdev(tmp_path, "lo", "unknown", None, physical=False)
    _netdev(tmp_path, "ib0", "up", "400000", kind=nicports.IPOIB_TYPE)
    records = _records(tmp_path)

    assert sorted(records) == ["nic:eno1", "nic:eno2", "nic:mlx5_0/1", "nic:mlx5_1/1", "nic:mlx5_2/1",
                               "nic:mlx5_bond_0/1"]
    active = records["nic:mlx5_0/1"]
    assert (active.probe, active.metric, active.status, active.value, active.unit) == (
        "telemetry", "nic_port", "ok", 400, "Gbit/s")
    assert {key: active.details[key] for key in ("kind", "state", "phys_state", "width", "speed", "link_layer",
                                                 "model", "ca", "port")} == {
        "kind": "ib", "state": "ACTIVE", "phys_state": "LinkUp", "width": "4X", "speed": "NDR",
        "link_layer": "InfiniBand", "model": "MT4129", "ca": "mlx5_0", "port": 1}
    assert active.details["counters"] == {"link_downed": 1, "port_rcv_errors": 0, "symbol_error": 12}
    assert records["nic:mlx5_1/1"].details["state"] == "DOWN"
    assert records["nic:mlx5_2/1"].details["width"] == "2X"
    assert records["nic:mlx5_bond_0/1"].details["link_layer"] == "Ethernet"
    assert (records["nic:eno1"].value, records["nic:eno1"].details["state"],
            records["nic:eno1"].details["model"]) == (25, "UP", "ice")
    assert (records["nic:eno2"].status, records["nic:eno2"].value) == ("ok", None)


def test_a_port_whose_state_cannot_be_read_is_an_error_naming_the_file(tmp_path):
    _ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/state").unlink()
    record = _records(tmp_path)["nic:mlx5_0/1"]
    assert record.status == "error" and record.value is None
    assert "state" in record.reason and "ports/1/state" in record.reason


def test_a_node_without_any_nic_is_one_not_applicable_record(tmp_path):
    _netdev(tmp_path, "lo", "unknown", None, physical=False)
    records = list(nicports.run(str(tmp_path)))
    assert [(r.device, r.status) for r in records] == [("nic", "skipped")]
    assert records[0].reason.startswith("n/a: ")


def test_the_runner_reads_the_ports_after_the_gpus(tmp_path):
    _ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")
    records = list(telemetry.run_node(ProbeContext(), sysfs_root=str(tmp_path)))
    assert records[-1].device == "nic:mlx5_0/1"
    assert all(r.metric != "nic_port" for r in records[:-1])


@pytest.mark.parametrize(("text", "parsed"), [
    ("400 Gb/sec (4X NDR)", (400, "4X", "NDR")), ("2.5 Gb/sec (1X SDR)", (2.5, "1X", "SDR")),
    ("200 Gb/sec (2X NDR)", (200, "2X", "NDR")), ("100 Gb/sec", (100, None, None)),
    ("fast", (None, None, None))])
def test_sysfs_rates(text, parsed):
    assert nicports.parse_rate(text) == parsed


def test_real_ibstat_of_an_h100_node():
    ports = nicports.parse_ibstat((DATA / "ibstat-h100-node-8x-cx7-ndr-ib.txt").read_text())
    assert [p.device for p in ports] == [f"nic:mlx5_{n}/1" for n in (0, 1, 4, 5, 6, 7, 8, 9)] + ["nic:mlx5_bond_0/1"]
    infiniband = ports[:8]
    assert {(p.state, p.phys_state, p.rate_gbps, p.link_layer, p.model) for p in infiniband} == {
        ("ACTIVE", "LinkUp", 400, "InfiniBand", "MT4129")}
    assert (ports[8].rate_gbps, ports[8].link_layer, ports[8].model) == (200, "Ethernet", "MT41692")
    assert {p.source for p in ports} == {"ibstat"}


def test_real_ibstat_of_an_a100_node_with_tabs_and_no_final_newline():
    ports = nicports.parse_ibstat((DATA / "ibstat-a100-node-8x-hdr-ib.txt").read_text())
    assert len(ports) == 9
    assert ports[0].device == "nic:mlx5_0/1" and ports[0].link_layer == "Ethernet"
    assert {(p.state, p.rate_gbps, p.link_layer) for p in ports[1:]} == {("ACTIVE", 200, "InfiniBand")}


# ------------------------------------------------------------------------------ the controller's checks


def _checked(record) -> dict:
    return check_record(json.loads(json.dumps(record.to_dict())), "node001 line 1")


def test_port_records_pass_the_record_schema(tmp_path):
    _ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", counters={"symbol_error": 7})
    record = next(iter(_records(tmp_path).values()))
    checked = _checked(record)
    assert checked["status"] == "ok" and checked["value"] == 400
    assert checked["details"]["counters"] == {"symbol_error": 7}


def test_a_negative_counter_or_an_impossible_rate_is_no_reading():
    ports = nicports.parse_ibstat((DATA / "ibstat-h100-node-8x-cx7-ndr-ib.txt").read_text())
    data = ports[0].record().to_dict()
    negative = {**data, "details": {**data["details"], "counters": {"symbol_error": -5}}}
    assert check_record(negative, "node001 line 1")["status"] == "error"
    too_fast = {**data, "value": 10**7}
    replaced = check_record(too_fast, "node001 line 1")
    assert replaced["status"] == "error" and "outside" in replaced["reason"]
    faster_than_any_nic = ProbeResult(**check_record({**data, "value": 5000}, "node001 line 1"))
    [checked] = check_host_records([faster_than_any_nic], "node001")
    assert checked.status == "error" and "3200" in checked.reason


def test_a_counter_that_is_no_number_makes_the_node_untrusted():
    ports = nicports.parse_ibstat((DATA / "ibstat-h100-node-8x-cx7-ndr-ib.txt").read_text())
    data = ports[0].record().to_dict()
    with pytest.raises(RecordTypeError, match="counters"):
        check_record({**data, "details": {**data["details"], "counters": {"symbol_error": "many"}}}, "node001 line 1")


def test_a_node_printing_more_ports_than_any_node_has_gets_none_judged():
    port = nicports.parse_ibstat((DATA / "ibstat-h100-node-8x-cx7-ndr-ib.txt").read_text())[0]
    records = [ProbeResult(**_checked(port.__class__(**{**port.__dict__, "device": f"nic:mlx5_{n}/1"}).record()))
               for n in range(MAX_NIC_PORTS + 1)]
    checked = check_host_records(records, "node001")
    assert [(r.device, r.status) for r in checked] == [("nic", "error")]
    assert f"{MAX_NIC_PORTS + 1} NIC port records" in checked[0].reason
