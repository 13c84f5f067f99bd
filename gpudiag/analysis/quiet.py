"""Quiet GPUs: those whose readings can make no telemetry finding, whatever the thresholds.

A 10,000-node sweep has 80,000 GPUs, and nearly all of them are quiet. Whether a GPU is quiet
depends on its own readings alone, so it is decided as its host is read (in the sweep's worker
threads, beside the probing: gpudiag.analysis.suspects.SweepReader), and the telemetry rules
after the last host (gpudiag.analysis.speed.rule_findings) look only at the others. Each test
below is a superset of what one rule in gpudiag.analysis.rules looks for:

- no slowing clocks-event reason listed under load (any share of samples), or, without load
  evidence, no hardware reason active in the idle reading (``_throttled``);
- the PCIe link at full width and generation (``pcie_problems``);
- no NVLink NVML reads as down (``nvlink_down``; the wiring can only leave links out);
- no uncorrectable ECC error, and no row remap failed or pending (``_ecc``).
"""

from __future__ import annotations

from .rules import HARDWARE_REASONS, SOFTWARE_REASONS, GpuTelemetry, pcie_problems

_SLOWING = frozenset(HARDWARE_REASONS) | frozenset(SOFTWARE_REASONS)


def is_quiet(gpu: GpuTelemetry) -> bool:
    """Whether ``gpu``'s readings can make no telemetry finding (see the module)."""
    reasons = gpu.under_load.get("clocks_event_reasons")
    if reasons is None:
        idle = gpu.readings.get("clocks_event_reasons") or {}
        if any(reason in HARDWARE_REASONS for reason in (idle.get("details") or {}).get("active", [])):
            return False
    elif any(reason in _SLOWING for reason in reasons):
        return False
    if any(gpu.value(name) for name in ("ecc_uncorrected_volatile", "remapped_rows_failure", "remapped_rows_pending")):
        return False
    return not pcie_problems(gpu) and not any(link.get("state") == "down" for link in gpu.nvlinks())
