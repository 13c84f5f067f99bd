"""A quiet GPU (gpudiag.analysis.quiet) is one the telemetry rules can find nothing on, whatever
the throttle share and the NVLink wiring: decided as its host is read, it lets the rules after
the last host skip it. Checked here against the rules themselves on random readings."""

import random

from gpudiag.analysis.quiet import is_quiet
from gpudiag.analysis.rules import WIRED_BY_SKU, GpuTelemetry, NvlinkWiring, telemetry_findings

REASONS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "sw_power_cap", "gpu_idle")


def _maybe(rng: random.Random, into: dict, name: str, value) -> None:
    if rng.random() < 0.7:
        into[name] = value


def _gpu(rng: random.Random) -> GpuTelemetry:
    load: dict = {"nvml_samples": 22, "nvml_samples_idle": 2, "sm_clock_mhz_median": 1980, "sm_clock_max_mhz": 1980}
    if rng.random() < 0.7:
        reasons = [reason for reason in REASONS if rng.random() < 0.15]
        load["clocks_event_reasons"] = reasons
        load["clocks_event_reason_samples"] = {reason: rng.randrange(0, 21) for reason in reasons}
    _maybe(rng, load, "pcie_width_min_loaded", rng.choice((8, 16, 16, 16)))
    _maybe(rng, load, "pcie_width_max", 16)
    _maybe(rng, load, "pcie_generation_min_loaded", rng.choice((4, 5, 5, 5)))
    _maybe(rng, load, "pcie_generation_max", 5)
    readings: dict = {}
    for metric, values in (("ecc_uncorrected_volatile", (0, 0, 0, 3)), ("remapped_rows_failure", (0, 0, 0, 1)),
                           ("remapped_rows_pending", (0, 0, 0, 1)), ("remapped_rows_uncorrectable", (0, 2)),
                           ("pcie_width", (8, 16, 16)), ("pcie_width_max", (16,)), ("pcie_generation_max", (5,))):
        if rng.random() < 0.7:
            readings[metric] = {"status": rng.choice(("ok", "ok", "ok", "error")), "value": rng.choice(values)}
    if rng.random() < 0.5:
        active = [reason for reason in REASONS if rng.random() < 0.15]
        readings["clocks_event_reasons"] = {"status": "ok", "value": len(active), "details": {"active": active}}
    if rng.random() < 0.6:
        links = [{"link": link, "state": rng.choice(("up", "up", "up", "up", "down"))} for link in range(18)]
        readings["nvlink_links_up"] = {"status": "ok", "value": 18, "details": {"links": links}}
    wiring = rng.choice((None, NvlinkWiring(frozenset(range(rng.randrange(0, 19))), WIRED_BY_SKU)))
    return GpuTelemetry("n1", "GPU-0", 0, readings, load, None, "NVIDIA H100 80GB HBM3", "550", wiring)


def test_a_quiet_gpu_makes_no_telemetry_finding_at_any_share_and_a_loud_one_often_does():
    rng = random.Random(16)
    quiet = loud_with_findings = 0
    for _ in range(4000):
        gpu = _gpu(rng)
        found = [telemetry_findings(gpu, share) for share in (0.0, 25.0, 100.0)]
        if is_quiet(gpu):
            quiet += 1
            assert found == [[], [], []], gpu
        elif any(found):
            loud_with_findings += 1
    # both sides are exercised: the check could fail
    assert quiet > 300 and loud_with_findings > 1000
