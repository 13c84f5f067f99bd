"""The telemetry probe and LoadSampler through NVML, against a test double of pynvml.

There is no NVIDIA driver here, so ``FakePynvml`` (tests/fakepynvml.py) stands in for the
third-party pynvml module only, answering device calls with the values of GPUs 0 and 2 of
tests/data/nvidia-smi/h100-80gb-hbm3-x8-q-driver535.txt.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from fakepynvml import H100_NVLINKS, FakeGpu, FakePynvml

from probes import smi, telemetry
from probes.context import Deadline, ProbeContext
from probes.nvml import LoadSampler, open_nvml
from probes.records import ERROR, OK, SKIPPED

pynvml = pytest.importorskip("pynvml")

X8_535 = Path(__file__).resolve().parents[2] / "data" / "nvidia-smi" / "h100-80gb-hbm3-x8-q-driver535.txt"


def idle_gpu0() -> FakeGpu:
    """GPU 00000000:53:00.0 of the driver-535 capture: idle, 345 MHz, 36 C, 71.97 W, 120 replays."""
    return FakeGpu(uuid="GPU-566e6f65-c38e-b12f-4824-6944218668b9", serial="1655022005478",
                   bus_id="00000000:53:00.0", sm_clock_mhz=[345], reasons=[0x1], temperature_c=[36],
                   power_mw=[71970], memory_temperature_c=44, replays=120)


def loaded_gpu2() -> FakeGpu:
    """GPU 00000000:75:00.0 of the capture: 1980 MHz, SW power cap + SW thermal + HW power brake."""
    return FakeGpu(uuid="GPU-973565ff-45cf-12ea-4e91-33386720f7bb", serial="1654922018857",
                   bus_id="00000000:75:00.0", sm_clock_mhz=[1980], reasons=[0xA4], temperature_c=[39],
                   power_mw=[118010], memory_temperature_c=46, replays=58)


def _run(fake: FakePynvml, **context: Any) -> list:
    return list(telemetry.run(ProbeContext(**context), nvml_module=fake, smi_query=_no_smi))


def _no_smi(timeout_s: float) -> str:
    raise smi.SmiUnavailable("nvidia-smi is not on PATH")


def _by_metric(records: list, device: str) -> dict:
    return {record.metric: record for record in records if record.device == device}


# ------------------------------------------------------------------------------ opening NVML


@pytest.mark.parametrize(("error", "says"), [
    (pynvml.NVMLError_LibraryNotFound, "libnvidia-ml.so.1 not found"),
    (pynvml.NVMLError_DriverNotLoaded, "kernel driver is not loaded"),
    (pynvml.NVMLError_LibRmVersionMismatch, "versions differ"),
    (pynvml.NVMLError_Unknown, "nvmlInit failed with NVML_ERROR_UNKNOWN"),
])
def test_why_nvml_cannot_start(error, says):
    with pytest.raises(Exception, match=says) as raised, open_nvml(FakePynvml([], init_error=error)):
        pass
    assert type(raised.value).__name__ == "NvmlUnavailable"
    assert "NVML" in str(raised.value)


def test_handles_by_uuid_with_index_fallback_and_shutdown():
    fake = FakePynvml([idle_gpu0(), loaded_gpu2()])
    with open_nvml(fake) as nvml:
        assert fake.open_sessions == 1
        assert nvml.handle("973565ff-45cf-12ea-4e91-33386720f7bb") is fake.gpus[1]  # torch's bare spelling
        assert nvml.handle("GPU-00000000-0000-0000-0000-000000000000", nvml_index=0) is fake.gpus[0]
        with pytest.raises(pynvml.NVMLError_NotFound):
            nvml.handle("GPU-00000000-0000-0000-0000-000000000000")
    assert fake.open_sessions == 0


# --------------------------------------------------------------------------- telemetry.run


def test_full_record_set_of_a_healthy_gpu():
    records = _run(FakePynvml([idle_gpu0()]))
    assert [record.metric for record in records] == ["identity"] + [metric for metric, _ in telemetry.METRICS]
    assert all(record.status == OK for record in records)
    assert {(record.device, record.gpu_uuid) for record in records} == {
        ("gpu:0", "GPU-566e6f65-c38e-b12f-4824-6944218668b9")}
    assert all(record.details["source"] == "nvml" for record in records)
    identity = records[0]
    assert identity.value == 1
    assert identity.details == {
        "name": "NVIDIA H100 80GB HBM3", "gpu_uuid": "GPU-566e6f65-c38e-b12f-4824-6944218668b9",
        "serial": "1655022005478", "pci_bus_id": "00000000:53:00.0", "driver_version": "535.183.01",
        "cuda_driver_version": "12.2", "nvml_index": 0, "source": "nvml"}
    values = {record.metric: (record.value, record.unit) for record in records[1:]}
    assert values == {
        "sm_clock": (345, "MHz"), "sm_clock_max": (1980, "MHz"), "memory_clock": (2619, "MHz"),
        "memory_clock_max": (2619, "MHz"), "clocks_event_reasons": (0x1, "bitmask"), "gpu_temperature": (36, "C"),
        "memory_temperature": (44, "C"), "power_draw": (71.97, "W"), "power_limit": (700.0, "W"),
        "ecc_uncorrected_volatile": (0, "count"), "ecc_uncorrected_aggregate": (0, "count"),
        "remapped_rows_correctable": (0, "count"), "remapped_rows_uncorrectable": (0, "count"),
        "remapped_rows_pending": (0, "bool"), "remapped_rows_failure": (0, "bool"),
        "pcie_generation": (5, "gen"), "pcie_generation_max": (5, "gen"), "pcie_width": (16, "lanes"),
        "pcie_width_max": (16, "lanes"), "pcie_replay_count": (120, "count"), "nvlink_links_up": (18, "count")}
    assert records[5].details["active"] == ["gpu_idle"]


def test_nvml_and_nvidia_smi_paths_agree_on_the_capture():
    from_nvml = _by_metric(_run(FakePynvml([idle_gpu0(), idle_gpu0(), loaded_gpu2()])), "gpu:2")
    from_smi = _by_metric(list(telemetry.run(ProbeContext(), nvml_module=FakePynvml(
        [], init_error=pynvml.NVMLError_LibraryNotFound), smi_query=lambda timeout_s: X8_535.read_text())), "gpu:2")
    assert from_nvml.keys() == from_smi.keys()
    for metric in set(from_nvml) - {"identity", "nvlink_links_up"}:
        nvml_record, smi_record = from_nvml[metric], from_smi[metric]
        assert (nvml_record.value, nvml_record.unit, nvml_record.status, nvml_record.gpu_uuid) == (
            smi_record.value, smi_record.unit, smi_record.status, smi_record.gpu_uuid), metric
    assert from_nvml["clocks_event_reasons"].details["active"] == from_smi["clocks_event_reasons"].details["active"]
    shared = ("name", "gpu_uuid", "serial", "pci_bus_id", "driver_version", "cuda_driver_version")
    assert {key: from_nvml["identity"].details[key] for key in shared} == {
        key: from_smi["identity"].details[key] for key in shared}


def test_nvlink_details_list_every_link():
    gpu = loaded_gpu2()
    gpu.nvlink_up = (True,) * 7 + (False,) + (True,) * 10
    record = _by_metric(_run(FakePynvml([gpu])), "gpu:0")["nvlink_links_up"]
    assert record.value == 17
    links = record.details["links"]
    assert [link["link"] for link in links] == list(range(H100_NVLINKS))
    assert links[7] == {"link": 7, "state": "down", "crc_errors": 0, "replay_errors": 0, "recovery_errors": 0}
    assert links[3] == {"link": 3, "state": "up", "nvml_version_code": pynvml.NVML_NVLINK_VERSION_4_0,
                        "speed_mbyte_per_s": 26562, "crc_errors": 7, "replay_errors": 0, "recovery_errors": 0}


def test_unsupported_fields_are_skipped_as_not_applicable():
    gpu = idle_gpu0()
    gpu.unsupported = frozenset({"nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetNvLinkState",
                                 "nvmlDeviceGetRemappedRows", "nvmlDeviceGetSerial"})
    gpu.memory_temperature_c = None
    records = _by_metric(_run(FakePynvml([gpu])), "gpu:0")
    for metric in ("pcie_replay_count", "memory_temperature", "remapped_rows_correctable", "remapped_rows_failure"):
        assert (records[metric].status, records[metric].reason) == (SKIPPED, "n/a: NVML_ERROR_NOT_SUPPORTED"), metric
        assert records[metric].gpu_uuid == gpu.uuid
    assert records["nvlink_links_up"].status == SKIPPED
    assert records["nvlink_links_up"].reason.startswith("n/a: NVML_ERROR_NOT_SUPPORTED")
    assert records["identity"].details["serial"] is None
    assert records["sm_clock"].status == OK


def test_a_lost_gpu_is_one_error_record_and_the_others_still_report():
    lost = loaded_gpu2()
    lost.lost = True
    records = _run(FakePynvml([idle_gpu0(), lost]))
    assert [(r.device, r.metric, r.status) for r in records if r.device == "gpu:1"] == [("gpu:1", "identity", ERROR)]
    assert "NVML_ERROR_GPU_IS_LOST" in records[-1].reason
    assert sum(1 for record in records if record.device == "gpu:0" and record.status == OK) == 22


def test_a_gpu_lost_mid_read_stops_at_the_failing_read():
    gpu = idle_gpu0()
    gpu.lost_at = "nvmlDeviceGetPowerUsage"
    records = _run(FakePynvml([gpu]))
    assert records[-1].metric == "power_draw"
    assert (records[-1].status, records[-1].reason) == (ERROR, "NVML_ERROR_GPU_IS_LOST: GPU is lost")
    assert [r.status for r in records[:-1]] == [OK] * (len(records) - 1)


def test_no_nvml_and_no_nvidia_smi_is_exactly_one_skipped_record(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi to fall back to
    no_driver = FakePynvml([], init_error=pynvml.NVMLError_DriverNotLoaded)
    records = list(telemetry.run(ProbeContext(), nvml_module=no_driver))
    assert len(records) == 1
    record = records[0]
    assert (record.probe, record.device, record.metric, record.status) == ("telemetry", "host", "nvml", SKIPPED)
    assert "NVML" in record.reason and "nvidia-smi is not on PATH" in record.reason


def test_gpus_past_the_deadline_are_skipped():
    records = _run(FakePynvml([idle_gpu0()]), deadline=Deadline(0.0))
    assert [(r.device, r.metric, r.status) for r in records] == [("gpu:0", "identity", SKIPPED)]


# ----------------------------------------------------------------------------- LoadSampler


def test_sampler_evidence_from_loaded_samples():
    gpu = loaded_gpu2()
    gpu.sm_clock_mhz = [345, 1980, 1755, 1410, 1980, 1980]
    gpu.reasons = [0x1, 0x0, 0x4, 0x40 | 0x20, 0x0, 0x0]  # the first sample is before the load starts
    gpu.temperature_c = [36, 60, 71, 83, 80, 78]
    gpu.power_mw = [71970, 650000, 700120, 690000, 640000, 600000]
    gpu.pcie_generation = [1, 5, 5, 5, 5, 5]  # idle links train down; only loaded samples count
    gpu.pcie_width = [16, 16, 8, 8, 8, 8]  # the link fell back to x8 under load
    fake = FakePynvml([idle_gpu0(), gpu])
    with LoadSampler([gpu.uuid], interval_s=3600.0, nvml_module=fake) as sampler:
        for _ in range(6):
            sampler.sample()
    assert sampler.evidence(gpu.uuid) == {
        "sm_clock_mhz_min": 1410, "sm_clock_mhz_median": 1980, "sm_clock_mhz_max_seen": 1980,
        "sm_clock_max_mhz": 1980, "clocks_event_reasons": ["sw_power_cap", "sw_thermal_slowdown",
                                                           "hw_thermal_slowdown"],
        "clocks_event_reason_samples": {"sw_power_cap": 1, "sw_thermal_slowdown": 1, "hw_thermal_slowdown": 1},
        "temperature_c_max": 83, "power_w_max": 700.12, "power_limit_w": 700.0,
        "pcie_generation_min_loaded": 5, "pcie_generation_max": 5,
        "pcie_width_min_loaded": 8, "pcie_width_max": 16,
        "nvml_samples": 6, "nvml_samples_idle": 1}
    assert fake.open_sessions == 0
    assert fake.gpus[0].reads == {}  # a GPU not given is never read


def test_sampler_counts_the_loaded_samples_each_reason_was_active_in():
    gpu = loaded_gpu2()
    # Idle, then ten loaded samples: a power cap in seven, a one-sample HW slowdown blip, and an
    # undocumented bit; the idle sample's power cap shows in the union but is not counted.
    gpu.reasons = [0x1 | 0x4] + [0x4] * 6 + [0x4 | 0x8, 0x200, 0x0, 0x0]
    with LoadSampler([gpu.uuid], interval_s=3600.0, nvml_module=FakePynvml([gpu])) as sampler:
        for _ in range(11):
            sampler.sample()
    evidence = sampler.evidence(gpu.uuid)
    assert evidence["clocks_event_reasons"] == ["sw_power_cap", "hw_slowdown", "unknown_0x200"]
    assert evidence["clocks_event_reason_samples"] == {"sw_power_cap": 7, "hw_slowdown": 1, "unknown_0x200": 1}
    assert list(evidence["clocks_event_reason_samples"]) == ["sw_power_cap", "hw_slowdown", "unknown_0x200"]
    assert (evidence["nvml_samples"], evidence["nvml_samples_idle"]) == (11, 1)


def test_sampler_with_no_reason_under_load_counts_nothing():
    gpu = idle_gpu0()
    gpu.reasons = [0x1, 0x0, 0x0]
    with LoadSampler([gpu.uuid], interval_s=3600.0, nvml_module=FakePynvml([gpu])) as sampler:
        for _ in range(3):
            sampler.sample()
    assert sampler.evidence(gpu.uuid)["clocks_event_reason_samples"] == {}


def test_sampler_thread_samples_and_stops_promptly():
    gpu = loaded_gpu2()
    fake = FakePynvml([gpu])
    with LoadSampler([gpu.uuid], interval_s=0.02, nvml_module=fake) as sampler:
        time.sleep(0.2)
        started = time.monotonic()
    exit_s = time.monotonic() - started
    samples = sampler.evidence(gpu.uuid)["nvml_samples"]
    time.sleep(0.1)
    assert sampler.evidence(gpu.uuid)["nvml_samples"] == samples >= 3  # nothing sampled after the block
    assert exit_s < 0.5
    assert fake.open_sessions == 0


def test_sampler_without_nvml_says_why_and_never_raises():
    with LoadSampler(["GPU-566e6f65-c38e-b12f-4824-6944218668b9"],
                     nvml_module=FakePynvml([], init_error=pynvml.NVMLError_LibraryNotFound)) as sampler:
        sampler.sample()
    evidence = sampler.evidence("GPU-566e6f65-c38e-b12f-4824-6944218668b9")
    assert list(evidence) == ["nvml_unavailable"]
    assert "libnvidia-ml.so.1 not found" in evidence["nvml_unavailable"]


def test_sampler_with_the_real_pynvml_never_raises():
    with LoadSampler(["GPU-566e6f65-c38e-b12f-4824-6944218668b9"], interval_s=0.01) as sampler:
        time.sleep(0.05)
    evidence = sampler.evidence("GPU-566e6f65-c38e-b12f-4824-6944218668b9")
    assert "nvml_unavailable" in evidence or "nvml_samples" in evidence


def test_sampler_reports_an_unknown_gpu_and_a_gpu_lost_under_load():
    gpu = loaded_gpu2()
    gpu.lost_at = "nvmlDeviceGetCurrentClocksEventReasons"
    with LoadSampler([gpu.uuid, "GPU-ffffffff"], interval_s=3600.0, nvml_module=FakePynvml([gpu])) as sampler:
        sampler.sample()
    assert sampler.evidence("GPU-ffffffff") == {
        "nvml_unavailable": "NVML could not find GPU GPU-ffffffff: NVML_ERROR_NOT_FOUND"}
    evidence = sampler.evidence(gpu.uuid)
    assert (evidence["nvml_samples"], evidence["nvml_error"]) == (0, "NVML_ERROR_GPU_IS_LOST")


def test_without_nvml_the_nvidia_smi_on_path_is_used(tmp_path, monkeypatch):
    fake_smi = tmp_path / "nvidia-smi"
    fake_smi.write_text(f'#!/bin/sh\n[ "$1" = "-q" ] && exec {shutil.which("cat")} "{X8_535}"\nexit 2\n')
    fake_smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # this nvidia-smi and nothing else
    no_library = FakePynvml([], init_error=pynvml.NVMLError_LibraryNotFound)
    records = list(telemetry.run(ProbeContext(), nvml_module=no_library))
    assert len(records) == 8 * 22
    assert {record.details["source"] for record in records} == {"nvidia-smi"}
