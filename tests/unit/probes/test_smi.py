"""``nvidia-smi -q`` parsing, fed the real captures in tests/data/nvidia-smi/ (see the fixtures README)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from probes import smi, telemetry
from probes.nvml import decode_clocks_event_reasons
from probes.records import ERROR, OK, SKIPPED

DATA = Path(__file__).resolve().parents[2] / "data" / "nvidia-smi"
X8_535 = DATA / "h100-80gb-hbm3-x8-q-driver535.txt"
ONE_545 = DATA / "h100-80gb-hbm3-q-driver545.txt"
V100_570 = DATA / "v100-pcie-16gb-q-driver570.txt"
RTX5090_570 = DATA / "rtx5090-q-driver570.txt"
GH200_550 = DATA / "gh200-480gb-q-driver550.txt"
X4_580_POWER = DATA / "rtx3090-x4-q-d-power-driver580.txt"
X4_580_CLOCK = DATA / "rtx3090-x4-q-d-clock-driver580.txt"
# Every nvidia-smi -q capture: (file, driver, bus id of each GPU in file order).
CAPTURES = (
    (X8_535, "535.183.01", ("00000000:53:00.0", "00000000:64:00.0", "00000000:75:00.0", "00000000:86:00.0",
                            "00000000:97:00.0", "00000000:A8:00.0", "00000000:B9:00.0", "00000000:CA:00.0")),
    (ONE_545, "545.23.08", ("00000000:19:00.0",)),
    (GH200_550, "550.127.05", ("00000000:DD:00.0",)),
    (V100_570, "570.124.06", ("00000001:00:00.0",)),
    (RTX5090_570, "570.124.06", ("00000000:02:00.0",)),
    (X4_580_POWER, "580.65.06", ("00000000:01:00.0", "00000000:21:00.0", "00000000:C1:00.0", "00000000:E1:00.0")),
    (X4_580_CLOCK, "580.65.06", ("00000000:01:00.0", "00000000:21:00.0", "00000000:C1:00.0", "00000000:E1:00.0")),
)
ABSENT = smi.SmiMissing("")
NA = smi.SmiMissing("N/A")

# Per GPU of the 8-GPU driver-535 capture, in file order: bus id, UUID, SM clock (MHz),
# GPU / memory temperature (C), power draw (W), PCIe replays since reset.
X8_535_GPUS = (
    ("00000000:53:00.0", "GPU-566e6f65-c38e-b12f-4824-6944218668b9", 345, 36, 44, 71.97, 120),
    ("00000000:64:00.0", "GPU-9930d717-21dd-7692-054e-3d0a2bae76b5", 345, 37, 44, 68.88, 111),
    ("00000000:75:00.0", "GPU-973565ff-45cf-12ea-4e91-33386720f7bb", 1980, 39, 46, 118.01, 58),
    ("00000000:86:00.0", "GPU-6b932a61-abfd-5ea1-b26a-7dea7f2fa601", 345, 39, 46, 72.91, 60),
    ("00000000:97:00.0", "GPU-726d356b-f548-bbfd-c81e-b9c68f2f1587", 345, 38, 46, 71.68, 63),
    ("00000000:A8:00.0", "GPU-06db64f6-6181-5a90-cf95-5ce52a58c4e5", 345, 36, 43, 71.69, 93),
    ("00000000:B9:00.0", "GPU-a5271aa6-4cdb-28c7-0ef5-5da271d0caae", 345, 37, 44, 69.44, 69),
    ("00000000:CA:00.0", "GPU-7e78e6c8-c71c-66c7-9ded-f8836cecab32", 345, 35, 43, 74.76, 78),
)


def _gpus(path: Path) -> list[smi.SmiGpu]:
    report = smi.parse_query(path.read_text())
    return [smi.read_gpu(section, index) for index, section in enumerate(report.gpus)]


def _records(path: Path) -> list:
    return list(telemetry.run(telemetry.ProbeContext(), nvml_module=_NoNvml(),
                              smi_query=lambda timeout_s: path.read_text()))


class _NoNvml:
    """Stands in for pynvml where libnvidia-ml.so is missing: nvmlInit fails as pynvml's does."""

    class NVMLError(Exception):
        value = 12

    NVML_ERROR_LIBRARY_NOT_FOUND = 12

    def nvmlInit(self) -> None:
        raise self.NVMLError()


def test_header_and_every_gpu_section_of_the_535_capture():
    report = smi.parse_query(X8_535.read_text())
    assert (report.driver_version, report.cuda_version) == ("535.183.01", "12.2")
    assert report.complaints == ()
    gpus = _gpus(X8_535)
    assert [(gpu.pci_bus_id, gpu.gpu_uuid) for gpu in gpus] == [row[:2] for row in X8_535_GPUS]
    assert {gpu.name for gpu in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert gpus[0].serial == "1655022005478"


@pytest.mark.parametrize("index", range(8))
def test_readings_of_each_535_gpu(index):
    _, _, sm_mhz, gpu_c, memory_c, power_w, replays = X8_535_GPUS[index]
    readings = _gpus(X8_535)[index].readings
    assert readings["sm_clock"] == sm_mhz
    assert (readings["sm_clock_max"], readings["memory_clock"], readings["memory_clock_max"]) == (1980, 2619, 2619)
    assert (readings["gpu_temperature"], readings["memory_temperature"]) == (gpu_c, memory_c)
    assert (readings["power_draw"], readings["power_limit"]) == (power_w, 700.0)
    assert readings["pcie_replay_count"] == replays
    assert [readings[m] for m in ("pcie_generation", "pcie_generation_max", "pcie_width", "pcie_width_max")] == [
        5, 5, 16, 16]
    assert [readings[m] for m in ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate")] == [0, 0]
    assert [readings[m] for m in ("remapped_rows_correctable", "remapped_rows_uncorrectable",
                                  "remapped_rows_pending", "remapped_rows_failure")] == [0, 0, 0, 0]


def test_clocks_event_reasons_of_the_535_capture():
    masks = [gpu.readings["clocks_event_reasons"] for gpu in _gpus(X8_535)]
    # GPU 2 (bus 75) is the one under load: power cap, power brake and SW thermal, not idle.
    assert decode_clocks_event_reasons(masks[2]) == ("sw_power_cap", "sw_thermal_slowdown", "hw_power_brake_slowdown")
    assert masks[2] == 0x4 | 0x20 | 0x80
    assert all(decode_clocks_event_reasons(mask) == ("gpu_idle",) for i, mask in enumerate(masks) if i != 2)


def test_the_545_layout():
    report = smi.parse_query(ONE_545.read_text())
    assert (report.driver_version, report.cuda_version) == ("545.23.08", "12.3")
    (gpu,) = _gpus(ONE_545)
    assert (gpu.pci_bus_id, gpu.gpu_uuid, gpu.serial) == (
        "00000000:19:00.0", "GPU-10f35015-e921-bfab-2eb8-4e9b6664d5f1", "1654123038646")
    readings = gpu.readings
    # "GPU Memory Power Readings " (with a trailing blank) has its own Power Draw, 47.78 W: not the GPU's.
    assert (readings["power_draw"], readings["power_limit"]) == (72.02, 700.0)
    assert (readings["sm_clock"], readings["gpu_temperature"], readings["memory_temperature"]) == (345, 33, 41)
    assert decode_clocks_event_reasons(readings["clocks_event_reasons"]) == ("gpu_idle",)
    assert (readings["pcie_generation"], readings["pcie_width"], readings["pcie_replay_count"]) == (5, 16, 0)
    assert (readings["ecc_uncorrected_volatile"], readings["ecc_uncorrected_aggregate"]) == (0, 0)


def test_older_layout_names_are_found():
    # The 535 capture with its sections renamed as drivers before 535/530 name them.
    text = (ONE_545.read_text().replace("Clocks Event Reasons", "Clocks Throttle Reasons")
            .replace("GPU Power Readings", "Power Readings").replace("Current Power Limit", "Enforced Power Limit")
            .replace("    GPU Memory Power Readings \n        Power Draw                        : 47.78 W\n", ""))
    (section,) = smi.parse_query(text).gpus
    readings = smi.read_gpu(section, 0).readings
    assert decode_clocks_event_reasons(readings["clocks_event_reasons"]) == ("gpu_idle",)
    assert (readings["power_draw"], readings["power_limit"]) == (72.02, 700.0)


def test_ecc_uncorrectable_counts_are_summed_across_memories():
    # The first GPU's volatile counters (they come before the aggregate ones) made non-zero.
    text = X8_535.read_text().replace("SRAM Uncorrectable SEC-DED    : 0", "SRAM Uncorrectable SEC-DED    : 2", 1)
    text = text.replace("DRAM Uncorrectable            : 0", "DRAM Uncorrectable            : 3", 1)
    readings = smi.read_gpu(smi.parse_query(text).gpus[0], 0).readings
    assert (readings["ecc_uncorrected_volatile"], readings["ecc_uncorrected_aggregate"]) == (5, 0)


@pytest.mark.parametrize(("path", "driver", "bus_ids"), CAPTURES, ids=[path.stem for path, _, _ in CAPTURES])
def test_every_capture_yields_every_gpu_and_no_failure(path, driver, bus_ids):
    report = smi.parse_query(path.read_text())
    assert (report.driver_version, report.complaints) == (driver, ())
    gpus = _gpus(path)
    assert [gpu.pci_bus_id for gpu in gpus] == list(bus_ids)
    for gpu in gpus:
        assert set(gpu.readings) == {metric for metric, _ in smi.SMI_PATHS} | {
            "clocks_event_reasons", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate"}
        assert not [(m, r) for m, r in gpu.readings.items() if isinstance(r, smi.SmiMissing) and r.error]
    records = _records(path)
    assert len(records) == len(bus_ids) * (1 + len(telemetry.METRICS))
    assert [r for r in records if r.status == ERROR] == []


def test_driver_570_average_power_na_falls_through_to_instantaneous():
    (gpu,) = _gpus(V100_570)
    readings = gpu.readings
    assert (gpu.name, gpu.gpu_uuid) == ("Tesla V100-PCIE-16GB", "GPU-a2db1942-76d6-3572-10f1-3d0b0e1fbd72")
    assert (readings["power_draw"], readings["power_limit"]) == (24.07, 250.0)
    assert [readings[m] for m in ("sm_clock", "sm_clock_max", "memory_clock", "memory_clock_max")] == [
        135, 1380, 877, 877]
    assert (readings["gpu_temperature"], readings["memory_temperature"]) == (29, 27)
    assert [readings[m] for m in ("pcie_generation", "pcie_generation_max", "pcie_width", "pcie_width_max",
                                  "pcie_replay_count")] == [3, 3, 16, 16, 0]
    # Volta counts ECC under "Double Bit" > "Total"; a GPU without row remapping prints "Remapped Rows : N/A".
    assert (readings["ecc_uncorrected_volatile"], readings["ecc_uncorrected_aggregate"]) == (0, 0)
    assert readings["remapped_rows_pending"] == NA
    assert decode_clocks_event_reasons(readings["clocks_event_reasons"]) == ("gpu_idle",)
    by_metric = {r.metric: r for r in _records(V100_570)}
    assert (by_metric["power_draw"].value, by_metric["power_draw"].status) == (24.07, OK)
    pending = by_metric["remapped_rows_pending"]
    assert (pending.status, pending.reason) == (SKIPPED, "n/a: N/A")


def test_blackwell_570_takes_the_average_and_reports_what_it_lacks():
    (gpu,) = _gpus(RTX5090_570)
    readings = gpu.readings
    # Average 24.05 W comes before Instantaneous 23.78 W; neither the memory nor the module rail.
    assert (readings["power_draw"], readings["power_limit"]) == (24.05, 575.0)
    assert [readings[m] for m in ("sm_clock", "sm_clock_max", "memory_clock", "memory_clock_max")] == [
        22, 3090, 405, 14001]
    assert (readings["gpu_temperature"], readings["memory_temperature"]) == (25, NA)
    # An idle link trained down to Gen1 x8 of Gen5 x16.
    assert [readings[m] for m in ("pcie_generation", "pcie_generation_max", "pcie_width", "pcie_width_max")] == [
        1, 5, 8, 16]
    assert decode_clocks_event_reasons(readings["clocks_event_reasons"]) == ("sw_power_cap",)
    assert (readings["ecc_uncorrected_volatile"], readings["ecc_uncorrected_aggregate"]) == (NA, NA)
    assert readings["remapped_rows_uncorrectable"] == NA


def test_grace_hopper_counts_its_retired_dram_error_and_reads_the_gpu_rail_only():
    (gpu,) = _gpus(GH200_550)
    readings = gpu.readings
    # The module (169.77 W) and GPU memory (18.51 W) rails have their own Power Draw lines.
    assert (readings["power_draw"], readings["power_limit"]) == (87.88, 700.0)
    assert (readings["ecc_uncorrected_volatile"], readings["ecc_uncorrected_aggregate"]) == (0, 1)
    assert [readings[m] for m in ("remapped_rows_correctable", "remapped_rows_uncorrectable",
                                  "remapped_rows_pending", "remapped_rows_failure")] == [0, 1, 0, 0]
    assert [readings[m] for m in ("pcie_generation", "pcie_width", "sm_clock", "gpu_temperature",
                                  "memory_temperature")] == [4, 1, 345, 31, 39]


def test_driver_580_partial_queries_read_what_they_hold():
    power = _gpus(X4_580_POWER)
    assert [(g.readings["power_draw"], g.readings["power_limit"]) for g in power] == [
        (13.44, 480.0), (12.98, 420.0), (9.52, 420.0), (31.91, 450.0)]
    assert {g.readings["sm_clock"] for g in power} == {ABSENT}
    clock = _gpus(X4_580_CLOCK)
    assert [(g.readings["sm_clock"], g.readings["sm_clock_max"], g.readings["memory_clock_max"]) for g in clock] == [
        (210, 2115, 10501), (210, 2130, 9751), (210, 2130, 9751), (210, 2115, 10501)]
    assert {g.readings["power_draw"] for g in clock} == {ABSENT}


def test_the_first_number_wins_and_a_failure_outranks_a_gap():
    text = V100_570.read_text()
    swapped = text.replace("Average Power Draw                : N/A", "Average Power Draw                : 25.5 W")
    assert smi.read_gpu(smi.parse_query(swapped).gpus[0], 0).readings["power_draw"] == 25.5
    failed = text.replace("Instantaneous Power Draw          : 24.07 W",
                          "Instantaneous Power Draw          : Unknown Error")
    assert smi.read_gpu(smi.parse_query(failed).gpus[0], 0).readings["power_draw"] == smi.SmiMissing(
        "Unknown Error", error=True)
    no_power = text.replace("Instantaneous Power Draw          : 24.07 W", "Instantaneous Power Draw          : N/A")
    assert smi.read_gpu(smi.parse_query(no_power).gpus[0], 0).readings["power_draw"] == NA


def test_numbers_words_and_gaps():
    assert smi.parse_number("345 MHz") == 345
    assert smi.parse_number("71.97 W") == 71.97
    assert smi.parse_number("16x") == 16
    assert smi.parse_number("-8 C") == -8
    assert (smi.parse_number("Yes"), smi.parse_number("No")) == (1, 0)
    assert smi.parse_number("N/A") == smi.SmiMissing("N/A")
    assert smi.parse_number("[Not Supported]") == smi.SmiMissing("Not Supported")
    assert smi.parse_number("Unknown Error") == smi.SmiMissing("Unknown Error", error=True)
    assert smi.parse_number("Not Found") == smi.SmiMissing("Not Found")
    assert smi.parse_number("Requested functionality has been deprecated").error is False


def test_fallback_records_have_the_nvml_shapes():
    records = _records(X8_535)
    assert len(records) == 8 * (1 + len(telemetry.METRICS))
    gpu2 = [record for record in records if record.device == "gpu:2"]
    assert all(record.gpu_uuid == X8_535_GPUS[2][1] for record in gpu2)
    assert all(record.details["source"] == "nvidia-smi" for record in gpu2)
    identity = gpu2[0]
    assert (identity.metric, identity.value, identity.status) == ("identity", 1, OK)
    assert identity.details["driver_version"] == "535.183.01"
    assert "NVML" in identity.details["nvml_unavailable"]
    by_metric = {record.metric: record for record in gpu2[1:]}
    assert [metric for metric, _ in telemetry.METRICS] == list(by_metric)
    reasons = by_metric["clocks_event_reasons"]
    assert (reasons.value, reasons.unit) == (0xA4, "bitmask")
    assert reasons.details["active"] == ["sw_power_cap", "sw_thermal_slowdown", "hw_power_brake_slowdown"]
    assert (by_metric["pcie_replay_count"].value, by_metric["pcie_replay_count"].unit) == (58, "count")
    assert (by_metric["power_draw"].value, by_metric["power_draw"].unit) == (118.01, "W")
    assert by_metric["nvlink_links_up"].status == SKIPPED
    assert all(record.status == OK for metric, record in by_metric.items() if metric != "nvlink_links_up")


def test_na_and_error_values_become_skipped_and_error_records():
    text = (ONE_545.read_text().replace("Memory Current Temp               : 41 C", "Memory Current Temp : N/A")
            .replace("Replays Since Reset               : 0", "Replays Since Reset : Unknown Error")
            .replace("\n    Remapped Rows\n", "\n    Row Remapper Renamed\n"))
    records = {r.metric: r for r in _records_of(text)}
    assert (records["memory_temperature"].status, records["memory_temperature"].reason) == (SKIPPED, "n/a: N/A")
    assert records["pcie_replay_count"].status == ERROR
    assert "Unknown Error" in records["pcie_replay_count"].reason
    assert (records["remapped_rows_pending"].status, records["remapped_rows_pending"].reason) == (
        SKIPPED, "n/a: not in this driver's nvidia-smi -q output")


def _records_of(text: str) -> list:
    return list(telemetry.run(telemetry.ProbeContext(), nvml_module=_NoNvml(), smi_query=lambda timeout_s: text))


def test_a_gpu_nvidia_smi_cannot_reach_is_an_error_record():
    lost = "Unable to determine the device handle for GPU0000:CA:00.0: Unknown Error"
    text = ONE_545.read_text().replace("Attached GPUs                             : 1\n",
                                       f"Attached GPUs                             : 2\n{lost}\n")
    records = _records_of(text)
    assert [(r.device, r.status, r.reason) for r in records if r.status == ERROR] == [
        ("host", ERROR, f"nvidia-smi: {lost}")]


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_query_runs_the_binary_and_reports_its_failures(tmp_path):
    working = _script(tmp_path, f'[ "$1" = "-q" ] && cat "{ONE_545}"\n')
    assert smi.query_nvidia_smi(5.0, working) == ONE_545.read_text()
    broken = _script(tmp_path, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                               "driver.\"\nexit 9\n")
    with pytest.raises(smi.SmiUnavailable, match="exited 9: NVIDIA-SMI has failed"):
        smi.query_nvidia_smi(5.0, broken)
    hung = _script(tmp_path, "exec sleep 10\n")
    with pytest.raises(smi.SmiUnavailable, match="did not finish"):
        smi.query_nvidia_smi(0.3, hung)
