import pytest
from tablecheck import WIDE, WIDTHS, assert_readable

from gpudiag.records import ProbeResult
from gpudiag.report.console import describe_load, describe_params, format_value, not_ok_lines


def test_load_evidence_names_throttling_and_a_narrow_pcie_link():
    details = {"sm_clock_mhz_median": 1410, "sm_clock_max_mhz": 1980,
               "clocks_event_reasons": ["hw_thermal_slowdown"], "pcie_width_min_loaded": 8,
               "pcie_width_max": 16, "pcie_generation_min_loaded": 5, "pcie_generation_max": 5}
    assert describe_load(details) == "SM 1410/1980 MHz · hw_thermal_slowdown · PCIe x8 of x16"
    assert describe_load({"nvml_unavailable": "NVML library not found"}) == "no NVML"


def test_params_fold_a_square_shape():
    assert describe_params({"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}) == \
        "8192³ bf16 concurrent"
    assert describe_params({"memory": "device", "buffer_mib": 1024}) == "device 1024 MiB"


def test_values_keep_their_unit():
    assert format_value(741.23, "TFLOP/s") == "741.2 TFLOP/s"
    assert format_value(0.2034, "TFLOP/s") == "0.203 TFLOP/s"
    assert format_value(8, "count") == "8"
    assert format_value(None, "GB/s") == "-"


def test_identical_skips_fold_across_devices():
    results = [ProbeResult("telemetry", f"gpu:{i}", "memory_temperature", None, None, "skipped",
                           reason="n/a: NVML_ERROR_NOT_SUPPORTED") for i in (2, 0, 10)]
    assert not_ok_lines(results) == [
        "skipped: telemetry.memory_temperature on gpu:0, gpu:2, gpu:10: n/a: NVML_ERROR_NOT_SUPPORTED"]


def test_the_telemetry_table_of_a_real_8_gpu_capture(tmp_path):
    import io
    import json
    from pathlib import Path

    from rich.console import Console

    from gpudiag.records import parse_probe_output
    from gpudiag.report.console import render_probe_results
    from probes import telemetry
    from probes.context import ProbeContext
    from probes.records import write_records

    capture = (Path(__file__).resolve().parents[3] / "data" / "nvidia-smi" /
               "h100-80gb-hbm3-x8-q-driver535.txt").read_text()
    stream = io.StringIO()
    # The real parser on a real capture; only NVML itself is absent (no driver on this machine).
    write_records(telemetry.run(ProbeContext(), smi_query=lambda timeout_s: capture), stream)
    results = parse_probe_output(stream.getvalue(), "capture")
    console = Console(record=True, width=220)
    render_probe_results(results, console)
    text = console.export_text()
    rows = [line for line in text.splitlines() if line.startswith("│ gpu:")]
    assert len(rows) == 8
    throttled = [row for row in rows if "sw_power_cap" in row]
    assert len(throttled) == 1
    assert "hw_power_brake_slowdown" in throttled[0] and "sw_thermal_slowdown" in throttled[0]
    assert all("16/16" in row for row in rows)  # PCIe width now/max
    assert "Telemetry (nvidia-smi)" in text
    assert json.loads(stream.getvalue().splitlines()[0])["details"]["source"] == "nvidia-smi"


# -- tables within the console's width (issue 9: 80 columns) ---------------------------------------------

def _simulated_hosts(fleet: dict) -> list:
    """Each node of a simulated ``fleet`` as the sweep's HostOutcome: the real records of its bundle."""
    from simfleet import run_node

    from gpudiag.run.fanout import HostOutcome
    from gpudiag.sim import SimulatedConnector
    from gpudiag.sim.fleetfile import parse_fleet

    connector = SimulatedConnector(parse_fleet(fleet, "test fleet"))
    outcomes = []
    for host in connector.fleet.spec.hosts:
        results = run_node(connector, host)
        facts = next(r.details for r in results if r.probe == "facts")
        outcomes.append(HostOutcome(host, "ok", None, 1.0, facts, tuple(r for r in results if r.probe != "facts")))
    return outcomes


def _sweep_text(hosts: list, width: int) -> str:
    from datetime import datetime, timezone

    from tablecheck import render

    from gpudiag.report.console import render_sweep_table
    from gpudiag.run.fanout import SweepResult

    moment = datetime(2026, 11, 24, tzinfo=timezone.utc)
    result = SweepResult("20261124T000000Z-0000", moment, moment, tuple(hosts), ())
    return render(lambda console: render_sweep_table(result, console), width)


SLOW_GPU = {"kind": "slow_gpu", "host": "node003", "gpu": 1, "factor": 0.8}


@pytest.mark.parametrize("fleet", [{"nodes": 40, "faults": [SLOW_GPU]},
                                   {"nodes": 4, "gpus_per_node": 8, "name_format": "gpu{:03d}.r17.example.com"}],
                         ids=["40-nodes", "long-names"])
@pytest.mark.parametrize("width", WIDTHS)
def test_the_sweep_table_shows_every_host_and_whole_numbers(fleet: dict, width: int):
    hosts = _simulated_hosts(fleet)
    narrow = _sweep_text(hosts, width)
    assert_readable(narrow, _sweep_text(hosts, WIDE), width, names=[h.host for h in hosts[:32]])


def test_at_80_columns_the_sweep_table_leaves_out_the_pcie_columns_and_says_so():
    hosts = _simulated_hosts({"nodes": 40, "faults": [SLOW_GPU]})
    narrow = " ".join(_sweep_text(hosts, 80).split())
    assert "8 more hosts in the JSON document (--json)" in narrow
    assert "h2d GB/s, d2h GB/s left out at 80 columns; see --json" in narrow
    slow = next(r for r in hosts[2].results if r.probe == "gemm" and r.device == "cuda:1")
    assert format_value(slow.value, None) in narrow  # the slow GPU's figure, every digit
    wide = _sweep_text(hosts, 132)
    assert "left out" not in wide and "d2h GB/s" in wide


def _probe_text(results: list, width: int) -> str:
    from tablecheck import render

    from gpudiag.report.console import render_probe_results

    return render(lambda console: render_probe_results(results, console), width)


@pytest.mark.parametrize("width", WIDTHS)
def test_probe_tables_split_rather_than_cut(width: int):
    from simfleet import run_node

    from gpudiag.sim import SimulatedConnector
    from gpudiag.sim.fleetfile import parse_fleet

    results = run_node(SimulatedConnector(parse_fleet({"nodes": 1, "faults": [
        {"kind": "slow_gpu", "host": "node001", "gpu": 1, "factor": 0.8}]}, "test fleet")), "node001")
    narrow = _probe_text(results, width)
    assert_readable(narrow, _probe_text(results, WIDE), width, names=[f"cuda:{i}" for i in range(8)])
    assert "left out" not in narrow
    if width <= 80:
        assert "Measurements, continued" in narrow and "Telemetry (nvml), continued" in narrow


@pytest.mark.parametrize("width", WIDTHS)
def test_the_telemetry_table_of_a_real_capture_fits(width: int):
    import io
    from pathlib import Path

    from gpudiag.records import parse_probe_output
    from probes import telemetry
    from probes.context import ProbeContext
    from probes.records import write_records

    capture = (Path(__file__).resolve().parents[3] / "data" / "nvidia-smi" /
               "h100-80gb-hbm3-x8-q-driver535.txt").read_text()
    stream = io.StringIO()
    write_records(telemetry.run(ProbeContext(), smi_query=lambda timeout_s: capture), stream)
    results = parse_probe_output(stream.getvalue(), "capture")
    narrow = _probe_text(results, width)
    assert_readable(narrow, _probe_text(results, WIDE), width, names=[f"gpu:{i}" for i in range(8)])
    assert "hw_power_brake_slowdown" in narrow
