"""A test double of the third-party pynvml module, for the probes that read NVML.

There is no NVIDIA driver here, so ``FakePynvml`` stands in for pynvml only: it carries
pynvml's real constants and error classes and answers device calls with each ``FakeGpu``'s
values. It is handed to our code through its ``nvml_module`` parameter; nothing of ours is
patched. Used by tests/unit/probes/test_telemetry_nvml.py and tests/unit/probes/test_pause.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

pynvml = pytest.importorskip("pynvml")

H100_NVLINKS = 18
MIB = 1 << 20


@dataclass
class FakeGpu:
    """One GPU's answers. List fields are successive reads; the last value then repeats."""

    uuid: str
    serial: str
    bus_id: str
    sm_clock_mhz: list[int]
    reasons: list[int]
    temperature_c: list[int]
    power_mw: list[int]
    memory_temperature_c: int | None  # None: the field answers NOT_SUPPORTED
    replays: int
    nvlink_up: tuple[bool, ...] = (True,) * H100_NVLINKS
    pcie_generation: list[int] = field(default_factory=lambda: [5])
    pcie_width: list[int] = field(default_factory=lambda: [16])
    unsupported: frozenset[str] = frozenset()  # pynvml functions that answer NOT_SUPPORTED
    lost_at: str | None = None  # the pynvml function from which on the GPU is lost
    lost: bool = False
    reads: dict[str, int] = field(default_factory=dict)
    memory_total_mib: int = 81559  # an H100 80GB HBM3 as NVML reports it
    memory_used_mib: int = 0  # what other processes (a paused job) hold
    compute_mode: int = 0  # nvmlComputeMode_t: 0 default, 2 prohibited, 3 exclusive process
    processes: int = 0  # compute processes with a context on the GPU

    def next(self, name: str, values: list[Any]) -> Any:
        count = self.reads.get(name, 0)
        self.reads[name] = count + 1
        return values[min(count, len(values) - 1)]


class FakePynvml:
    """Test double of the pynvml module (see the module docstring)."""

    def __init__(self, gpus: list[FakeGpu], init_error: type[Exception] | None = None) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.init_error = init_error
        self.open_sessions = 0

    def _gpu(self, handle: FakeGpu, function: str) -> FakeGpu:
        if handle.lost_at == function:
            handle.lost = True
        if handle.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if function in handle.unsupported:
            raise pynvml.NVMLError_NotSupported()
        return handle

    def _answer(self, handle: FakeGpu, function: str, value: Any) -> Any:
        self._gpu(handle, function)
        return value

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error()
        self.open_sessions += 1

    def nvmlShutdown(self) -> None:
        self.open_sessions -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "535.183.01"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if index >= len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        return self._gpu(self.gpus[index], "nvmlDeviceGetHandleByIndex")

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return self._answer(handle, "nvmlDeviceGetName", "NVIDIA H100 80GB HBM3")

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetSerial(self, handle: FakeGpu) -> bytes:
        return self._gpu(handle, "nvmlDeviceGetSerial").serial.encode()  # older pynvml gives bytes

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(busId=self._gpu(handle, "nvmlDeviceGetPciInfo").bus_id.encode())

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        return gpu.next("sm", gpu.sm_clock_mhz) if clock == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeGpu, clock: int) -> int:
        self._gpu(handle, "nvmlDeviceGetMaxClockInfo")
        return 1980 if clock == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return gpu.next("reasons", gpu.reasons)

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        return gpu.next("temperature", gpu.temperature_c)

    def nvmlDeviceGetFieldValues(self, handle: FakeGpu, fields: list[Any]) -> list[SimpleNamespace]:
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        return [self._field(gpu, requested) for requested in fields]

    def _field(self, gpu: FakeGpu, requested: Any) -> SimpleNamespace:
        field_id = requested[0] if isinstance(requested, tuple) else requested
        values = {pynvml.NVML_FI_DEV_MEMORY_TEMP: gpu.memory_temperature_c,
                  pynvml.NVML_FI_DEV_NVLINK_GET_SPEED: 26562}  # MB/s of one NVLink 4 link
        if values.get(field_id) is None:  # NVML answers per field, not by failing the call
            return SimpleNamespace(nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, valueType=0, value=None)
        return SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                               value=SimpleNamespace(uiVal=values[field_id]))

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetPowerUsage")
        return gpu.next("power", gpu.power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpu) -> int:
        return self._answer(handle, "nvmlDeviceGetEnforcedPowerLimit", 700000)

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, error_type: int, counter: int) -> int:
        return self._answer(handle, "nvmlDeviceGetTotalEccErrors", 0)

    def nvmlDeviceGetRemappedRows(self, handle: FakeGpu) -> tuple[int, int, int, int]:
        return self._answer(handle, "nvmlDeviceGetRemappedRows", (0, 0, 0, 0))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeGpu) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkGeneration").next("pcie_generation", handle.pcie_generation)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeGpu) -> int:
        return self._answer(handle, "nvmlDeviceGetMaxPcieLinkGeneration", 5)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeGpu) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth").next("pcie_width", handle.pcie_width)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeGpu) -> int:
        return self._answer(handle, "nvmlDeviceGetMaxPcieLinkWidth", 16)

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeGpu) -> int:
        return self._gpu(handle, "nvmlDeviceGetPcieReplayCounter").replays

    def nvmlDeviceGetNvLinkState(self, handle: FakeGpu, link: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkState")
        if link >= len(gpu.nvlink_up):
            raise pynvml.NVMLError_InvalidArgument()
        return int(gpu.nvlink_up[link])

    def nvmlDeviceGetNvLinkVersion(self, handle: FakeGpu, link: int) -> int:
        return self._answer(handle, "nvmlDeviceGetNvLinkVersion", pynvml.NVML_NVLINK_VERSION_4_0)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> SimpleNamespace:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        total, used = gpu.memory_total_mib * MIB, gpu.memory_used_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetComputeMode(self, handle: FakeGpu) -> int:
        return self._gpu(handle, "nvmlDeviceGetComputeMode").compute_mode

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=4000 + n, usedGpuMemory=None) for n in range(gpu.processes)]

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeGpu, link: int, counter: int) -> int:
        self._gpu(handle, "nvmlDeviceGetNvLinkErrorCounter")
        return 7 if (link, counter) == (3, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT) else 0
