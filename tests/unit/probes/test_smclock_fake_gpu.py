"""smclock's launch-and-report path against a simulated GPU (fake torch and fake driver).

The real launch needs a GPU (see the ``gpu``-marked test in test_smclock.py); this checks the
host side: buffer addressing, calibration, sampling, decoding and the records it emits.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from probes import cuda_driver, smclock
from probes.context import ProbeContext
from probes.devices import CudaDevice
from probes.kernels import CUBIN, KernelImage

CYCLES_PER_ITERATION = 512  # what a full-rate SM would spend on one loop trip
BASE_ADDRESS = 0x7F00_0000_0000
TORCH_STREAM = 0xABC0


class FakeBuffer:
    """A 2-D int64 device tensor: rows of words at a fake device address."""

    def __init__(self, rows: int, columns: int, address: int) -> None:
        self.rows = [[0] * columns for _ in range(rows)]
        self.address = address
        self.row_bytes = columns * 8

    def data_ptr(self) -> int:
        return self.address

    def cpu(self) -> FakeBuffer:
        return self

    def tolist(self) -> list[list[int]]:
        return [list(row) for row in self.rows]


class FakeTorch:
    """The part of torch smclock touches, for one GPU."""

    int64 = "int64"

    def __init__(self, free_bytes: int = 80 << 30) -> None:
        self.buffers: list[FakeBuffer] = []
        self.synchronized = 0
        stream = SimpleNamespace(cuda_stream=TORCH_STREAM, synchronize=self._synchronize)
        self.cuda = SimpleNamespace(set_device=lambda index: None,
                                    mem_get_info=lambda index: (free_bytes, 80 << 30),
                                    current_stream=lambda index: stream)

    def _synchronize(self) -> None:
        self.synchronized += 1

    def zeros(self, shape: object, dtype: object = None, device: object = None) -> FakeBuffer:
        rows, columns = shape if isinstance(shape, tuple) else (1, 1)
        buffer = FakeBuffer(rows, columns, BASE_ADDRESS + len(self.buffers) * (1 << 24))
        self.buffers.append(buffer)
        return buffer


class FakeDriver:
    """Runs the kernel's contract in Python: each block runs on ``sm_of_block`` at its clock."""

    def __init__(self, torch: FakeTorch, clocks_mhz: dict[int, float]) -> None:
        self.torch, self.clocks_mhz = torch, clocks_mhz
        self.launches: list[tuple[int, int, int, int]] = []
        self.now_ns = 1_000_000

    def device_attribute(self, attribute: int, ordinal: int) -> int:
        return {cuda_driver.ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: 233472,
                cuda_driver.ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448,
                cuda_driver.ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: 1024}[attribute]

    @contextmanager
    def primary_context(self, ordinal: int) -> Iterator[None]:
        yield

    @contextmanager
    def module(self, image: bytes) -> Iterator[ctypes.c_void_p]:
        yield ctypes.c_void_p(1)

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        assert name == smclock.KERNEL_NAME
        return ctypes.c_void_p(2)

    def allow_dynamic_shared(self, function: ctypes.c_void_p, shared_bytes: int) -> None:
        pass

    def launch(self, function: ctypes.c_void_p, grid_blocks: int, block_threads: int,
               shared_bytes: int, stream: int, args: Sequence[cuda_driver.KernelArgument]) -> None:
        address, iterations = args[0].value, args[1].value
        self.launches.append((grid_blocks, block_threads, shared_bytes, stream))
        buffer = next(b for b in self.torch.buffers if b.address <= address < b.address + (1 << 24))
        row = buffer.rows[(address - buffer.address) // buffer.row_bytes]
        longest_ns = 0
        for block in range(grid_blocks):
            smid = sorted(self.clocks_mhz)[block]
            cycles = iterations * CYCLES_PER_ITERATION
            elapsed_ns = round(cycles / self.clocks_mhz[smid] * 1000)
            longest_ns = max(longest_ns, elapsed_ns)
            words = [smid, smid, cycles, self.now_ns, self.now_ns + elapsed_ns, 0x3F800000, 132, 0]
            row[block * smclock.RECORD_WORDS:(block + 1) * smclock.RECORD_WORDS] = words
        self.now_ns += longest_ns


def _device(sm_count: int) -> CudaDevice:
    return CudaDevice(index=0, name="Fake H100", gpu_uuid="GPU-fake", total_memory_bytes=80 << 30,
                      pci_bus_id=None, multiprocessor_count=sm_count, compute_capability=(9, 0))


IMAGE = KernelImage(b"\x7fELF", CUBIN, "sm_90", "test")


def test_a_slow_sm_is_reported_with_its_clock_and_rate() -> None:
    torch = FakeTorch()
    driver = FakeDriver(torch, {0: 1980.0, 1: 1980.0, 2: 1584.0, 3: 1980.0, 4: 1980.0})
    clock, ratio = smclock.measure_device(torch, driver, _device(5), IMAGE, budget_s=0.2,
                                          ctx=ProbeContext(duration_s=0.2))
    assert (clock.metric, clock.unit, clock.status) == ("sm_clock", "MHz", "ok")
    assert clock.value == pytest.approx(1980.0, rel=1e-4)
    assert clock.gpu_uuid == "GPU-fake" and clock.device == "cuda:0"
    assert clock.samples == 10 and clock.cv == pytest.approx(0.0, abs=1e-6)
    details = clock.details
    assert details["slowest_sm_ids"][0] == 2 and details["slowest_fma_sm_ids"][0] == 2
    assert details["min_mhz"] == pytest.approx(1584.0, rel=1e-3)
    assert details["spread_pct"] == pytest.approx(20.0, rel=1e-3)
    assert details["sms_seen"] == details["sms_expected"] == 5
    assert details["sm_ids"] == [0, 1, 2, 3, 4] and details["smid_limit"] == 132
    assert details["mismatched_result_sm_ids"] == [] and details["migrated_blocks"] == 0
    assert (ratio.metric, ratio.unit, ratio.status) == ("sm_fma_rate_min_ratio", "ratio", "ok")
    assert ratio.value == pytest.approx(0.8, rel=1e-3)
    assert ratio.details["slowest_fma_sm_ids"][0] == 2 and "per_sm_clock_mhz" not in ratio.details
    assert len(details["per_sm_clock_mhz"]) == 5


def test_every_launch_uses_one_exclusive_block_per_sm_on_torchs_stream() -> None:
    torch = FakeTorch()
    driver = FakeDriver(torch, {smid: 1500.0 for smid in range(4)})
    smclock.measure_device(torch, driver, _device(4), IMAGE, budget_s=0.1,
                           ctx=ProbeContext(duration_s=0.1))
    shared = cuda_driver.exclusive_shared_bytes(233472, 232448, 1024)
    assert set(driver.launches) == {(4, smclock.THREADS_PER_BLOCK, shared, TORCH_STREAM)}
    # calibration, warm-up and the samples each end with one wait, not one per launch
    assert len(driver.launches) == 1 + smclock.WARMUP_LAUNCHES + 5 and torch.synchronized == 3


def test_a_memory_cap_below_the_allocator_segment_skips_both_metrics() -> None:
    torch = FakeTorch()
    records = smclock.measure_device(torch, FakeDriver(torch, {0: 1500.0}), _device(1), IMAGE,
                                     budget_s=0.1, ctx=ProbeContext(max_gpu_mem_mib=1))
    assert [(r.metric, r.status) for r in records] == [("sm_clock", "skipped"),
                                                        ("sm_fma_rate_min_ratio", "skipped")]
    assert all(r.reason and "MiB" in r.reason for r in records)


def test_no_free_gpu_memory_skips_instead_of_allocating() -> None:
    torch = FakeTorch(free_bytes=1 << 20)
    records = smclock.measure_device(torch, FakeDriver(torch, {0: 1500.0}), _device(1), IMAGE,
                                     budget_s=0.1, ctx=ProbeContext())
    assert {r.status for r in records} == {"skipped"} and not torch.buffers
