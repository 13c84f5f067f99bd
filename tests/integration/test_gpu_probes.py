"""The GPU probes on a real CUDA device (``gpu`` marker: skipped where there is none).

Each figure is checked from both sides: above a floor that a working probe clears, and at most
the hardware's theoretical peak, worked out from what NVML reads on this GPU (clocks, memory bus,
PCIe link, NVLinks) — a figure above it is a timing or byte-counting bug, not a fast GPU.
"""

import os
import statistics

import pytest

from probes import gemm, membw, p2p, pcie
from probes.context import ProbeContext
from probes.placement import cpu_ranges, nearest_cpus
from probes.sizing import MIB

pytestmark = pytest.mark.gpu

# Dense bf16 tensor-core FLOPs per SM per clock, from NVIDIA's datasheets: A100 312 TFLOP/s at
# 1410 MHz on 108 SMs; H100/H200 SXM 989 TFLOP/s at 1830 MHz on 132 SMs.
BF16_FLOPS_PER_SM_CLOCK = {(8, 0): 2048, (9, 0): 4096}
# A PCIe lane's data rate in Gbit/s per generation, after line coding (8b/10b to gen 2, 128b/130b after).
PCIE_LANE_GBITS = {1: 2.0, 2: 4.0, 3: 8 * 128 / 130, 4: 16 * 128 / 130, 5: 32 * 128 / 130, 6: 64 * 242 / 256}
# One NVLink's signalling rate per direction in GB/s (NVLink 3 and 4: 25 GB/s of data; 26.6 raw).
NVLINK_GBYTES = 26.6
SLACK = 1.03  # timing granularity


def _torch():
    import torch

    return torch


def _nvml():
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _handle(pynvml, uuid):
    return pynvml.nvmlDeviceGetHandleByUUID(uuid)


def test_gemm_measures_every_gpu_with_nvml_evidence():
    torch = _torch()
    records = list(gemm.run(ProbeContext(duration_s=1.0)))
    assert len(records) == torch.cuda.device_count()
    for record in records:
        assert record.status == "ok", record.reason
        assert record.value > 10 and record.unit == "TFLOP/s" and record.gpu_uuid.startswith("GPU-")
        assert record.params["dtype"] == "bf16" and record.params["m"] == 8192
        assert "sm_clock_mhz_median" in record.details or "nvml_unavailable" in record.details


def test_gemm_stays_under_the_tensor_cores_peak():
    torch = _torch()
    pynvml = _nvml()
    for record in gemm.run(ProbeContext(duration_s=1.0)):
        index = int(record.device.split(":")[1])
        capability = torch.cuda.get_device_capability(index)
        per_clock = BF16_FLOPS_PER_SM_CLOCK.get(capability)
        assert per_clock is not None, f"add the bf16 FLOPs per SM and clock of compute capability {capability}"
        clock_hz = pynvml.nvmlDeviceGetMaxClockInfo(_handle(pynvml, record.gpu_uuid), pynvml.NVML_CLOCK_SM) * 1e6
        peak = torch.cuda.get_device_properties(index).multi_processor_count * clock_hz * per_clock / 1e12
        assert record.status == "ok" and 0.3 * peak < record.value <= peak * SLACK, (record.value, peak)


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


def test_device_memory_bandwidth_stays_under_the_memory_bus_peak():
    pynvml = _nvml()
    for record in membw.run(ProbeContext(duration_s=0.5)):
        assert record.status == "ok", record.reason
        handle = _handle(pynvml, record.gpu_uuid)
        clock_hz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM) * 1e6
        peak = clock_hz * 2 * pynvml.nvmlDeviceGetMemoryBusWidth(handle) / 8 / 1e9  # double data rate, GB/s
        assert record.params["memory"] == "device"
        assert 0.3 * peak < record.value <= peak * SLACK, (record.value, peak)


def test_pcie_both_directions_under_the_links_peak_from_the_gpus_own_socket():
    pynvml = _nvml()
    records = list(pcie.run(ProbeContext(duration_s=0.3)))
    assert {r.params["direction"] for r in records} == {"h2d", "d2h"}
    for record in records:
        handle = _handle(pynvml, record.gpu_uuid)
        lanes = pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)
        peak = PCIE_LANE_GBITS[pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)] * lanes / 8  # GB/s
        assert record.status == "ok" and 0.2 * peak < record.value <= peak * SLACK, (record.value, peak)
        local = nearest_cpus(record.gpu_uuid) & os.sched_getaffinity(0)
        assert record.details["host_cpus"] == cpu_ranges(local), record.details


@pytest.mark.skipif(_torch().cuda.device_count() < 2,
                    reason=f"p2p needs at least 2 GPUs; torch sees {_torch().cuda.device_count()}")
def test_p2p_matrix_covers_every_ordered_pair():
    torch = _torch()
    count = torch.cuda.device_count()
    records = list(p2p.run(ProbeContext(duration_s=0.2)))
    uni = [r for r in records if r.params["direction"] == "unidirectional"]
    bi = [r for r in records if r.params["direction"] == "bidirectional"]
    assert len(uni) == count * (count - 1) and len(bi) == count * (count - 1) // 2
    assert all(r.status == "ok" and r.value > 1 for r in records)
    pynvml = _nvml()
    one_way = {(r.params["src"], r.params["dst"]): r.value for r in uni}
    for record in uni:
        handle = _handle(pynvml, record.gpu_uuid)
        links = sum(_nvlink_active(pynvml, handle, link) for link in range(pynvml.NVML_NVLINK_MAX_LINKS))
        if links:
            assert record.value <= links * NVLINK_GBYTES * SLACK, (record.value, links)
    for record in bi:  # both directions at once: about twice one way, never more
        pair = (record.params["src"], record.params["dst"])
        either = statistics.mean([one_way[pair], one_way[pair[::-1]]])
        assert 1.5 * either <= record.value <= 2 * either * SLACK, (record.value, either)


def _nvlink_active(pynvml, handle, link):
    try:
        return pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED
    except pynvml.NVMLError:
        return False  # a link slot this GPU does not wire
