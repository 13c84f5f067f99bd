"""run_on_each's concurrency and error handling, with a stand-in for torch's CUDA module."""

import threading
import time
from types import SimpleNamespace

from probes.devices import CudaDevice
from probes.pergpu import run_on_each
from probes.records import measured
from probes.sizing import MemoryRefusal


class _OutOfMemory(RuntimeError):
    pass


def _fake_torch() -> SimpleNamespace:
    current = threading.local()
    cuda = SimpleNamespace(set_device=lambda index: setattr(current, "index", index),
                           empty_cache=lambda: None, OutOfMemoryError=_OutOfMemory, current=current)
    return SimpleNamespace(cuda=cuda)


def _devices(count: int) -> list[CudaDevice]:
    return [CudaDevice(i, "GPU", f"GPU-{i}", 80 << 30, None, 132, (9, 0)) for i in range(count)]


def test_all_gpus_start_their_load_together_and_each_gets_its_record():
    torch = _fake_torch()
    started_at = {}

    def measure(device, start):
        time.sleep(0.05 * device.index)  # uneven setup times
        start()
        started_at[device.index] = time.monotonic()
        assert torch.cuda.current.index == device.index
        return measured("gemm", device.label, "tflops", "TFLOP/s", [100.0 + device.index])

    records = run_on_each(torch, _devices(4), "gemm", "tflops", measure, sequential=False)
    assert [r.device for r in records] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert [r.value for r in records] == [100.0, 101.0, 102.0, 103.0]
    assert max(started_at.values()) - min(started_at.values()) < 0.04


def test_a_gpu_that_fails_in_setup_does_not_hold_the_others_at_the_start():
    torch = _fake_torch()

    def measure(device, start):
        if device.index == 1:
            raise MemoryRefusal("gemm needs at least 88 MiB of GPU memory; 10 MiB usable")
        if device.index == 2:
            raise _OutOfMemory("CUDA out of memory. Tried to allocate 128.00 MiB\nmore text")
        start()
        if device.index == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return measured("gemm", device.label, "tflops", "TFLOP/s", [700.0])

    began = time.monotonic()
    records = run_on_each(torch, _devices(4), "gemm", "tflops", measure, sequential=False)
    assert time.monotonic() - began < 5  # the barrier was released, not waited out
    assert [r.status for r in records] == ["ok", "error", "error", "error"]
    assert records[1].reason.startswith("refused: gemm needs at least 88 MiB")
    assert records[2].reason == "out of GPU memory: CUDA out of memory. Tried to allocate 128.00 MiB"
    assert records[3].reason.startswith("CUDA error: an illegal memory access")
    assert records[3].gpu_uuid == "GPU-3"


def test_sequential_runs_one_gpu_at_a_time():
    torch = _fake_torch()
    running = []
    overlap = []

    def measure(device, start):
        start()
        running.append(device.index)
        overlap.append(len(running))
        time.sleep(0.01)
        running.remove(device.index)
        return measured("gemm", device.label, "tflops", "TFLOP/s", [1.0])

    run_on_each(torch, _devices(3), "gemm", "tflops", measure, sequential=True)
    assert overlap == [1, 1, 1]


def test_each_record_carries_the_nvml_evidence_or_says_why_there_is_none():
    from probes.pergpu import run_with_evidence

    def measure(device, start):
        start()
        return measured("gemm", device.label, "tflops", "TFLOP/s", [1.0], details={"runs_per_sample": 3})

    for sequential in (False, True):
        records = list(run_with_evidence(_fake_torch(), _devices(2), "gemm", "tflops", measure, sequential))
        assert [r.device for r in records] == ["cuda:0", "cuda:1"]
        for record in records:
            assert record.details["runs_per_sample"] == 3
            # this machine has no NVIDIA driver: the evidence says so instead of being absent
            assert "NVML" in record.details["nvml_unavailable"]
