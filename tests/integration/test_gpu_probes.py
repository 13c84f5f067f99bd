"""The GPU probes on a real CUDA device (``gpu`` marker: skipped where there is none)."""

import pytest

from probes import gemm, membw, p2p, pcie
from probes.context import ProbeContext
from probes.sizing import MIB

pytestmark = pytest.mark.gpu


def _torch():
    import torch

    return torch


def test_gemm_measures_every_gpu_with_nvml_evidence():
    torch = _torch()
    records = list(gemm.run(ProbeContext(duration_s=1.0)))
    assert len(records) == torch.cuda.device_count()
    for record in records:
        assert record.status == "ok", record.reason
        assert record.value > 10 and record.unit == "TFLOP/s" and record.gpu_uuid.startswith("GPU-")
        assert record.params["dtype"] == "bf16" and record.params["m"] == 8192
        assert "sm_clock_mhz_median" in record.details or "nvml_unavailable" in record.details


def test_gemm_stays_under_the_memory_cap_and_refuses_below_its_minimum():
    torch = _torch()
    for index in range(torch.cuda.device_count()):
        torch.cuda.reset_peak_memory_stats(index)
    capped = list(gemm.run(ProbeContext(duration_s=0.3, max_gpu_mem_mib=100, sequential=True)))
    for record in capped:
        assert record.status == "ok", record.reason
        assert record.params["m"] == 2048
        index = int(record.device.split(":")[1])
        assert torch.cuda.max_memory_allocated(index) <= 100 * MIB
    refused = list(gemm.run(ProbeContext(duration_s=0.3, max_gpu_mem_mib=50)))
    assert all(r.status == "error" and r.reason.startswith("refused: gemm needs at least") for r in refused)


def test_device_memory_bandwidth():
    for record in membw.run(ProbeContext(duration_s=0.5)):
        assert record.status == "ok", record.reason
        assert record.value > 100 and record.params["memory"] == "device"


def test_pcie_both_directions():
    records = list(pcie.run(ProbeContext(duration_s=0.3)))
    assert {r.params["direction"] for r in records} == {"h2d", "d2h"}
    assert all(r.status == "ok" and r.value > 1 for r in records), records


def test_p2p_matrix_covers_every_ordered_pair():
    torch = _torch()
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(reason="p2p needs at least 2 GPUs; this GPU machine has 1")
    records = list(p2p.run(ProbeContext(duration_s=0.2)))
    uni = [r for r in records if r.params["direction"] == "unidirectional"]
    bi = [r for r in records if r.params["direction"] == "bidirectional"]
    assert len(uni) == count * (count - 1) and len(bi) == count * (count - 1) // 2
    assert all(r.status == "ok" and r.value > 1 for r in records)
