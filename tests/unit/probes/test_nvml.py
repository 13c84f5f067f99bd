"""Clocks-event reason decoding, and finding pynvml; no NVML library or GPU needed."""

from __future__ import annotations

import pytest

from probes import nvml, smi

pynvml = pytest.importorskip("pynvml")

# pynvml's own constant for each of our names: the event-reason spelling, else the older
# throttle-reason spelling (nvidia-ml-py before 12.535 has only the latter).
PYNVML_SPELLINGS = {
    "gpu_idle": "GpuIdle",
    "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap",
    "hw_slowdown": "HwSlowdown",
    "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown",
    "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
    "display_clock_setting": "DisplayClockSetting",
}


def _pynvml_bit(spelling: str) -> int:
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        if hasattr(pynvml, prefix + spelling):
            return getattr(pynvml, prefix + spelling)
    raise AssertionError(f"pynvml has no clocks reason {spelling}")


def test_reason_bits_are_pynvmls_own():
    assert {name for _, name in nvml.CLOCKS_EVENT_REASONS} == set(PYNVML_SPELLINGS)
    for bit, name in nvml.CLOCKS_EVENT_REASONS:
        assert bit == _pynvml_bit(PYNVML_SPELLINGS[name]), name


def test_every_event_reason_pynvml_defines_is_named():
    names = nvml.decode_clocks_event_reasons(pynvml.nvmlClocksEventReasonAll)
    assert names == tuple(name for _, name in nvml.CLOCKS_EVENT_REASONS)


def test_decode_single_and_combined_masks():
    assert nvml.decode_clocks_event_reasons(0) == ()
    assert nvml.decode_clocks_event_reasons(0x1) == ("gpu_idle",)
    assert nvml.decode_clocks_event_reasons(0x40) == ("hw_thermal_slowdown",)
    assert nvml.decode_clocks_event_reasons(0x4 | 0x20 | 0x80) == (
        "sw_power_cap", "sw_thermal_slowdown", "hw_power_brake_slowdown")
    assert nvml.decode_clocks_event_reasons(0x1FF) == tuple(name for _, name in nvml.CLOCKS_EVENT_REASONS)


def test_decode_keeps_unknown_bits_one_per_bit():
    # 0x200 and 0x400 are pynvml's deprecated throttle-only "board limit" and "reliability".
    assert nvml.decode_clocks_event_reasons(0x8 | 0x200 | 0x400 | 0x10000) == (
        "hw_slowdown", "unknown_0x200", "unknown_0x400", "unknown_0x10000")


def test_encode_is_the_inverse_of_decode():
    for mask in (0, 0x1, 0xA4, 0x1FF, 0x208, 0x8000_0000_0000):
        assert nvml.encode_clocks_event_reasons(nvml.decode_clocks_event_reasons(mask)) == mask
    with pytest.raises(ValueError, match="unknown clocks-event reason"):
        nvml.encode_clocks_event_reasons(["thermal"])
    with pytest.raises(ValueError):
        nvml.decode_clocks_event_reasons(-1)


def test_nvidia_smi_labels_name_the_same_reasons():
    assert {name for _, name in smi.REASON_LABELS} == {name for _, name in nvml.CLOCKS_EVENT_REASONS}


def test_missing_bindings_are_reported_as_nvml_unavailable():
    with pytest.raises(nvml.NvmlUnavailable, match="NVML bindings not installed.*no_such_pynvml"):
        nvml.import_pynvml("no_such_pynvml")


def test_uuid_normalisation_matches_nvml_spelling():
    assert nvml.normalise_uuid("566e6f65-c38e-b12f-4824-6944218668b9") == "GPU-566e6f65-c38e-b12f-4824-6944218668b9"
    assert nvml.normalise_uuid("GPU-566e6f65-c38e") == "GPU-566e6f65-c38e"
    assert nvml.normalise_uuid("MIG-1f2e") == "MIG-1f2e"
