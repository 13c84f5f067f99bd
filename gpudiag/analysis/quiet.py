"""Quiet GPUs: those whose readings can make no telemetry finding, whatever the thresholds.

A 10,000-node sweep has 80,000 GPUs, and nearly all of them are quiet. Whether a GPU is quiet
depends on its own readings alone, so it is decided as its host is read (in the sweep's worker
threads, beside the probing: gpudiag.analysis.suspects.SweepReader), and the telemetry rules
after the last host (gpudiag.analysis.speed.rule_findings) look only at the others.

It is the rules themselves (gpudiag.analysis.rules.telemetry_findings) at their widest: a
clocks-event reason counted at any share of the loaded samples (a share of 0 counts every
reason listed, so every higher one counts fewer), and every NVLink NVML lists judged (the
wiring, known only once peers are read, can only leave links out).
"""

from __future__ import annotations

import dataclasses

from .rules import GpuTelemetry, telemetry_findings


def is_quiet(gpu: GpuTelemetry) -> bool:
    """Whether ``gpu``'s readings can make no telemetry finding (see the module)."""
    unwired = gpu if gpu.nvlink_wiring is None else dataclasses.replace(gpu, nvlink_wiring=None)
    return not telemetry_findings(unwired, 0.0)
