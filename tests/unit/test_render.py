from gpudiag.render import describe_load, describe_params, format_value, not_ok_lines
from gpudiag.results import ProbeResult


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

    from gpudiag.render import render_probe_results
    from gpudiag.results import parse_probe_output
    from probes import telemetry
    from probes.context import ProbeContext
    from probes.records import write_records

    capture = (Path(__file__).resolve().parents[1] / "data" / "nvidia-smi" /
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
