"""The PCIe probe's host buffer on the GPU's own socket: NVML's CPU mask decoded, the thread moved
to those CPUs for the block and given its CPUs back after, and every reason it could not be moved
said in the record. pynvml (the external library) is replaced by a small double; the CPU
affinity calls are the real ones, on this machine."""

from __future__ import annotations

import os

import pytest

from probes.nvml import cpus_from_mask
from probes.placement import cpu_ranges, near_gpu


class _NvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class _Pynvml:
    """nvmlInit, a handle by UUID and nvmlDeviceGetCpuAffinity answering ``mask`` (64-bit words)."""

    NVMLError = _NvmlError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6

    def __init__(self, mask: list[int] | None) -> None:
        self.mask = mask
        self.asked_words: list[int] = []

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != "GPU-1234":
            raise _NvmlError(self.NVML_ERROR_NOT_FOUND)
        return uuid

    def nvmlDeviceGetCpuAffinity(self, handle: str, words: int) -> list[int]:
        self.asked_words.append(words)
        if self.mask is None:
            raise _NvmlError(self.NVML_ERROR_NOT_SUPPORTED)
        return self.mask


ALLOWED = frozenset(os.sched_getaffinity(0))
ONE = min(ALLOWED)


def test_a_cpu_mask_decodes_to_cpu_numbers_and_prints_as_linux_lists_them():
    assert cpus_from_mask([0xFF, 0x1]) == frozenset([*range(8), 64])
    assert cpus_from_mask([0]) == frozenset()
    assert cpu_ranges([0, 1, 2, 3, 7, 64, 65, 112]) == "0-3,7,64-65,112"
    assert cpu_ranges(range(56)) == "0-55"


def test_the_block_runs_on_the_gpus_cpus_and_the_thread_gets_its_cpus_back():
    fake = _Pynvml([1 << ONE])
    with near_gpu("GPU-1234", fake) as details:
        inside = os.sched_getaffinity(0)
    assert inside == {ONE} and details == {"host_cpus": str(ONE)}
    assert os.sched_getaffinity(0) == ALLOWED
    assert fake.asked_words == [max(1, ((os.cpu_count() or 1) + 63) // 64)]


def test_the_thread_gets_its_cpus_back_when_the_block_fails():
    with pytest.raises(RuntimeError), near_gpu("GPU-1234", _Pynvml([1 << ONE])):
        raise RuntimeError("the allocation failed")
    assert os.sched_getaffinity(0) == ALLOWED


@pytest.mark.parametrize(("uuid", "mask", "module", "says"), [
    ("GPU-1234", None, "fake", "NVML cannot tell the GPU's CPUs (NVML_ERROR_NOT_SUPPORTED)"),
    ("GPU-9999", [1], "fake", "NVML cannot tell the GPU's CPUs (NVML_ERROR_NOT_FOUND)"),
    ("GPU-1234", [0], "fake", "NVML named no CPU near the GPU"),
    (None, [1], "fake", "the GPU has no UUID to find it by in NVML"),
    ("GPU-1234", [1], "absent", "NVML bindings not installed"),
])
def test_where_the_gpus_cpus_are_unknown_the_thread_stays_and_the_record_says_why(uuid, mask, module, says,
                                                                                   monkeypatch):
    if module == "absent":
        monkeypatch.setattr("probes.nvml.importlib.import_module", _no_module)
    with near_gpu(uuid, _Pynvml(mask) if module == "fake" else None) as details:
        assert os.sched_getaffinity(0) == ALLOWED
    assert list(details) == ["host_cpus_unset"] and details["host_cpus_unset"].startswith(says)


def test_cpus_this_process_may_not_use_are_not_forced_on_it():
    outside = max(ALLOWED) + 1  # beyond every CPU this process may run on (cgroup, taskset)
    mask = [0] * (outside // 64) + [1 << outside % 64]
    with near_gpu("GPU-1234", _Pynvml(mask)) as details:
        assert os.sched_getaffinity(0) == ALLOWED
    assert details["host_cpus_unset"].startswith("none of the GPU's CPUs (")
    assert f"(allowed: {cpu_ranges(ALLOWED)})" in details["host_cpus_unset"]


def _no_module(name: str) -> None:
    raise ImportError(f"No module named {name!r}")
