"""A thin, typed layer over pynvml (nvidia-ml-py): open NVML once, find GPUs, read with units.

pynvml is imported lazily and may be absent: :func:`open_nvml` then raises
:class:`NvmlUnavailable` whose message is the reason a probe reports as ``skipped``.
:class:`LoadSampler` samples clocks, clocks-event reasons, temperature and power in a
background thread while another probe loads the GPUs, and never raises because NVML is missing.
Everything here only reads: nothing changes a GPU setting or touches another process.
"""

from __future__ import annotations

import importlib
import statistics
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

# NVML's clocks-event (formerly "throttle") reason bits, checked against pynvml's
# nvmlClocksEventReason* constants. pynvml's deprecated nvmlClocksThrottleReason* list also has
# 0x200 (board limit) and 0x400 (reliability), which the event-reason API does not define;
# they decode as unknown_0x200 / unknown_0x400 so that nothing is silently dropped.
CLOCKS_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
GPU_IDLE = "gpu_idle"
_GPU_IDLE_BIT = dict((name, bit) for bit, name in CLOCKS_EVENT_REASONS)[GPU_IDLE]
_KNOWN_BITS = sum(bit for bit, _ in CLOCKS_EVENT_REASONS)
_UNKNOWN_PREFIX = "unknown_0x"

# Errors that mean "this GPU or driver does not offer the reading", not "something is wrong".
NOT_APPLICABLE_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")

# Why nvmlInit failed, in words an operator can act on; keyed by NVML error name.
_INIT_FAILURES: tuple[tuple[str, str], ...] = (
    ("NVML_ERROR_LIBRARY_NOT_FOUND",
     "NVML library libnvidia-ml.so.1 not found (is the NVIDIA driver installed on this node?)"),
    ("NVML_ERROR_DRIVER_NOT_LOADED", "NVML cannot start: the NVIDIA kernel driver is not loaded"),
    ("NVML_ERROR_LIB_RM_VERSION_MISMATCH",
     "NVML cannot start: NVML library and kernel driver versions differ (driver updated without reload?)"),
    ("NVML_ERROR_NO_PERMISSION", "NVML cannot start: no permission to open the NVIDIA device files"),
)


class NvmlUnavailable(Exception):
    """NVML cannot be used on this node; the message is the reason, naming NVML."""


def decode_clocks_event_reasons(mask: int) -> tuple[str, ...]:
    """The names of the bits set in a clocks-event reasons ``mask``, lowest bit first.

    Bits outside :data:`CLOCKS_EVENT_REASONS` are kept, one name per bit, as ``unknown_0x<hex>``.
    Raises ValueError for a negative mask.
    """
    if mask < 0:
        raise ValueError(f"a clocks-event reasons mask is never negative, not {mask}")
    known = tuple(name for bit, name in CLOCKS_EVENT_REASONS if mask & bit)
    unknown = mask & ~_KNOWN_BITS
    bits = (1 << shift for shift in range(unknown.bit_length()))
    return known + tuple(f"{_UNKNOWN_PREFIX}{bit:x}" for bit in bits if unknown & bit)


def encode_clocks_event_reasons(names: Iterable[str]) -> int:
    """The mask with the bit of each name set (inverse of :func:`decode_clocks_event_reasons`).

    Raises ValueError for a name that is neither known nor ``unknown_0x<hex>``.
    """
    bits = {name: bit for bit, name in CLOCKS_EVENT_REASONS}
    mask = 0
    for name in names:
        if name in bits:
            mask |= bits[name]
        elif name.startswith(_UNKNOWN_PREFIX):
            mask |= int(name[len(_UNKNOWN_PREFIX):], 16)
        else:
            raise ValueError(f"unknown clocks-event reason name {name!r}")
    return mask


def import_pynvml(module_name: str = "pynvml") -> ModuleType:
    """Import the NVML bindings; raise NvmlUnavailable when they are not installed."""
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise NvmlUnavailable(
            f"NVML bindings not installed: cannot import {module_name} (nvidia-ml-py): {error}") from error


@contextmanager
def open_nvml(module: ModuleType | None = None) -> Iterator[Nvml]:
    """Initialise NVML for the ``with`` block and shut it down after.

    ``module`` is the pynvml module to use (a test double, say); None imports pynvml.
    Raises NvmlUnavailable with an operator-readable reason when NVML cannot start.
    """
    pynvml = module if module is not None else import_pynvml()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(_init_failure_reason(pynvml, error)) from error
    try:
        yield Nvml(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass  # every reading is already taken; a failed shutdown changes none of them


def _init_failure_reason(pynvml: ModuleType, error: Exception) -> str:
    name = error_name(pynvml, error)
    for known, reason in _INIT_FAILURES:
        if name == known:
            return f"{reason} ({name})"
    return f"NVML cannot start: nvmlInit failed with {name} ({error})"


def error_name(pynvml: ModuleType, error: Exception) -> str:
    """The ``NVML_ERROR_*`` constant name of an NVMLError, e.g. ``NVML_ERROR_NOT_SUPPORTED``."""
    code = getattr(error, "value", None)
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == code:
            return name
    return f"NVML_ERROR_{code}"


@dataclass(frozen=True)
class RemappedRows:
    """Row-remapping state of a GPU's memory (counts of rows; flags)."""

    correctable_count: int
    uncorrectable_count: int
    pending: bool
    failure: bool


class Nvml:
    """Typed reads on an initialised NVML; every method raises the module's NVMLError on failure."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.NVMLError: type[Exception] = module.NVMLError

    def error_name(self, error: Exception) -> str:
        """``NVML_ERROR_*`` name of ``error``."""
        return error_name(self.module, error)

    def is_not_applicable(self, error: Exception) -> bool:
        """True when the error means the GPU or driver does not offer this reading."""
        return self.error_name(error) in NOT_APPLICABLE_ERRORS

    def is_gpu_lost(self, error: Exception) -> bool:
        """True when the error says the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)."""
        return self.error_name(error) == "NVML_ERROR_GPU_IS_LOST"

    def device_count(self) -> int:
        """How many GPUs NVML sees on this node (all of them; CUDA_VISIBLE_DEVICES plays no part)."""
        return int(self.module.nvmlDeviceGetCount())

    def handle(self, gpu_uuid: str | None, nvml_index: int | None = None) -> Any:
        """The NVML handle of a GPU by UUID (``GPU-...``; a bare UUID gets the prefix).

        Falls back to ``nvml_index`` when the UUID is None or NVML does not know it.
        Raises ValueError when neither is given, NVMLError when the GPU cannot be found.
        """
        if gpu_uuid is None:
            if nvml_index is None:
                raise ValueError("a GPU needs a UUID or an NVML index to be found")
            return self.module.nvmlDeviceGetHandleByIndex(nvml_index)
        try:
            return self.module.nvmlDeviceGetHandleByUUID(normalise_uuid(gpu_uuid))
        except self.module.NVMLError as error:
            unknown = self.error_name(error) in ("NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT")
            if nvml_index is None or not unknown:
                raise
            return self.module.nvmlDeviceGetHandleByIndex(nvml_index)

    def cpu_affinity(self, handle: Any, cpu_count: int) -> frozenset[int]:
        """The CPUs nearest the GPU (NVML's ideal affinity: its own socket's or NUMA node's), out of
        ``cpu_count`` on the node. Raises NVMLError where NVML cannot tell (NOT_SUPPORTED)."""
        words = max(1, (cpu_count + 63) // 64)
        return cpus_from_mask(self.module.nvmlDeviceGetCpuAffinity(handle, words))

    def driver_version(self) -> str:
        """Kernel driver version, e.g. ``535.183.01``."""
        return _text(self.module.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> str:
        """Highest CUDA version the driver supports, as ``major.minor`` (``12.2``)."""
        version = int(self.module.nvmlSystemGetCudaDriverVersion())
        return f"{version // 1000}.{(version % 1000) // 10}"

    def name(self, handle: Any) -> str:
        return _text(self.module.nvmlDeviceGetName(handle))

    def uuid(self, handle: Any) -> str:
        return _text(self.module.nvmlDeviceGetUUID(handle))

    def serial(self, handle: Any) -> str:
        return _text(self.module.nvmlDeviceGetSerial(handle))

    def pci_bus_id(self, handle: Any) -> str:
        """PCI address as ``dddddddd:bb:dd.f`` (NVML's own spelling)."""
        return _text(self.module.nvmlDeviceGetPciInfo(handle).busId)

    def sm_clock_mhz(self, handle: Any) -> int:
        return int(self.module.nvmlDeviceGetClockInfo(handle, self.module.NVML_CLOCK_SM))

    def sm_clock_max_mhz(self, handle: Any) -> int:
        return int(self.module.nvmlDeviceGetMaxClockInfo(handle, self.module.NVML_CLOCK_SM))

    def memory_clock_mhz(self, handle: Any) -> int:
        return int(self.module.nvmlDeviceGetClockInfo(handle, self.module.NVML_CLOCK_MEM))

    def memory_clock_max_mhz(self, handle: Any) -> int:
        return int(self.module.nvmlDeviceGetMaxClockInfo(handle, self.module.NVML_CLOCK_MEM))

    def clocks_event_reasons(self, handle: Any) -> int:
        """Current clocks-event reasons bitmask (decode with :func:`decode_clocks_event_reasons`)."""
        current = getattr(self.module, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if current is not None:
            try:
                return int(current(handle))
            except self.module.NVMLError as error:
                # Drivers before 535 lack the new entry point; the old one returns the same bits.
                if self.error_name(error) != "NVML_ERROR_FUNCTION_NOT_FOUND":
                    raise
        return int(self.module.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def gpu_temperature_c(self, handle: Any) -> int:
        return int(self.module.nvmlDeviceGetTemperature(handle, self.module.NVML_TEMPERATURE_GPU))

    def memory_temperature_c(self, handle: Any) -> int | float:
        """HBM temperature (C), read as the NVML_FI_DEV_MEMORY_TEMP field value."""
        return self.field_value(handle, self.module.NVML_FI_DEV_MEMORY_TEMP)

    def power_draw_w(self, handle: Any) -> float:
        return int(self.module.nvmlDeviceGetPowerUsage(handle)) / 1000.0  # NVML reports mW

    def power_limit_w(self, handle: Any) -> float:
        """The enforced power limit (W): the lowest of all limits that apply."""
        return int(self.module.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1000.0  # mW

    def pcie_generation(self, handle: Any) -> int:
        """The PCIe generation the link runs at now (it drops when the GPU idles)."""
        return int(self.module.nvmlDeviceGetCurrPcieLinkGeneration(handle))

    def pcie_generation_max(self, handle: Any) -> int:
        return int(self.module.nvmlDeviceGetMaxPcieLinkGeneration(handle))

    def pcie_width(self, handle: Any) -> int:
        """The PCIe lanes the link runs with now."""
        return int(self.module.nvmlDeviceGetCurrPcieLinkWidth(handle))

    def pcie_width_max(self, handle: Any) -> int:
        return int(self.module.nvmlDeviceGetMaxPcieLinkWidth(handle))

    def pcie_replay_count(self, handle: Any) -> int:
        """PCIe replays since the driver loaded (a link retrying corrupted packets)."""
        return int(self.module.nvmlDeviceGetPcieReplayCounter(handle))

    def ecc_uncorrected_count(self, handle: Any, aggregate: bool) -> int:
        """Uncorrected ECC errors: since the driver loaded (volatile) or over the GPU's life."""
        counter = self.module.NVML_AGGREGATE_ECC if aggregate else self.module.NVML_VOLATILE_ECC
        return int(self.module.nvmlDeviceGetTotalEccErrors(
            handle, self.module.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter))

    def remapped_rows(self, handle: Any) -> RemappedRows:
        correctable, uncorrectable, pending, failure = self.module.nvmlDeviceGetRemappedRows(handle)
        return RemappedRows(int(correctable), int(uncorrectable), bool(pending), bool(failure))

    def memory_info(self, handle: Any) -> tuple[int, int]:
        """(free, total) device memory in bytes, as every process on the GPU leaves it."""
        info = self.module.nvmlDeviceGetMemoryInfo(handle)
        return int(info.free), int(info.total)

    def compute_mode(self, handle: Any) -> int:
        """The compute mode (nvmlComputeMode_t: 0 default, 1 exclusive thread, 2 prohibited, 3 exclusive process)."""
        return int(self.module.nvmlDeviceGetComputeMode(handle))

    def compute_process_count(self, handle: Any) -> int:
        """How many compute processes have a context on the GPU; they are only counted, never touched."""
        return len(self.module.nvmlDeviceGetComputeRunningProcesses(handle))

    def field_value(self, handle: Any, field_id: int, scope_id: int | None = None) -> int | float:
        """One NVML field value as a number; raises NVMLError when NVML could not read it."""
        requested = field_id if scope_id is None else (field_id, scope_id)
        (value,) = self.module.nvmlDeviceGetFieldValues(handle, [requested])
        if value.nvmlReturn != self.module.NVML_SUCCESS:
            raise self.module.NVMLError(value.nvmlReturn)
        member = _FIELD_VALUE_MEMBERS.get(int(value.valueType))
        if member is None:
            raise self.module.NVMLError(self.module.NVML_ERROR_UNKNOWN)
        return getattr(value.value, member)


# nvmlValueType_t -> the member of the nvmlValue_t union that holds the number.
_FIELD_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def cpus_from_mask(words: Iterable[int], bits: int = 64) -> frozenset[int]:
    """The CPU numbers set in an NVML CPU mask: word i's bit b is CPU i × ``bits`` + b."""
    return frozenset(index * bits + bit for index, word in enumerate(words) for bit in range(bits)
                     if int(word) >> bit & 1)


def normalise_uuid(gpu_uuid: str) -> str:
    """``GPU-<uuid>`` as NVML spells it; torch may give the bare UUID. MIG UUIDs stay as they are."""
    return gpu_uuid if gpu_uuid.startswith(("GPU-", "MIG-")) else f"GPU-{gpu_uuid}"


def _text(value: str | bytes) -> str:
    # Older pynvml releases return bytes from the string getters.
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _GpuSamples:
    """What one GPU showed during the block; filled by the sampler thread (under its lock)."""

    sm_clock_max_mhz: int | None = None
    power_limit_w: float | None = None
    samples: int = 0
    idle_samples: int = 0
    reasons_mask: int = 0
    loaded_reason_samples: dict[str, int] = field(default_factory=dict)
    loaded_sm_clock_mhz: list[int] = field(default_factory=list)
    temperature_c: list[int] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    pcie_generation_max: int | None = None
    pcie_width_max: int | None = None
    loaded_pcie_generation: list[int] = field(default_factory=list)
    loaded_pcie_width: list[int] = field(default_factory=list)
    last_error: str | None = None


class LoadSampler:
    """Samples NVML telemetry of some GPUs in a background thread for the ``with`` block.

    Every ``interval_s`` seconds it reads, per GPU, the SM clock (MHz), clocks-event reasons,
    GPU temperature (C) and power draw (W); once at the start it reads the maximum SM clock and
    the power limit. Clock figures leave out samples in which NVML reports the GPU idle, so
    warm-up and set-up gaps do not look like slowdowns; the reasons are the union over all
    samples without ``gpu_idle``, and for each the number of loaded samples it was active in
    (a brief blip and a constant throttle show the same union). It never raises because NVML
    is missing: :meth:`evidence` then says why there is none. It only reads, and only the GPUs
    it is given.
    """

    def __init__(self, gpu_uuids: Sequence[str], interval_s: float = 0.1,
                 nvml_module: ModuleType | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("the sampling interval must be positive (seconds)")
        self._gpu_uuids = tuple(normalise_uuid(gpu_uuid) for gpu_uuid in gpu_uuids)
        self._interval_s = interval_s
        self._nvml_module = nvml_module
        self._nvml: Nvml | None = None
        self._unavailable: str | None = None
        self._handles: dict[str, Any] = {}
        self._missing: dict[str, str] = {}
        self._data = {gpu_uuid: _GpuSamples() for gpu_uuid in self._gpu_uuids}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stack = ExitStack()

    def __enter__(self) -> LoadSampler:
        try:
            self._nvml = self._stack.enter_context(open_nvml(self._nvml_module))
        except NvmlUnavailable as error:
            self._unavailable = str(error)
            return self
        self._find_gpus(self._nvml)
        self._thread = threading.Thread(target=self._loop, name="nvml-load-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(2.0, 4 * self._interval_s))
            if self._thread.is_alive():
                # A sample is stuck inside the driver (a GPU falling off the bus can do that);
                # shutting NVML down under it is unsafe, and leaving NVML open costs nothing.
                self._stack.pop_all()
                return
        self._stack.close()

    def sample(self) -> None:
        """Take one sample of every GPU now (the thread calls this every ``interval_s``)."""
        if self._nvml is None:
            return
        for gpu_uuid, handle in self._handles.items():
            self._sample_gpu(self._nvml, gpu_uuid, handle)

    def evidence(self, gpu_uuid: str) -> dict[str, Any]:
        """JSON-ready evidence for one GPU; keys carry their units.

        Returns ``{"nvml_unavailable": reason}`` when NVML could not be used or the GPU was
        not found; otherwise SM clock min/median/max seen (MHz, loaded samples only), maximum
        SM clock (MHz), clocks-event reasons seen and, per reason, the loaded samples it was active
        in (``clocks_event_reason_samples``), peak temperature (C), peak power and power limit
        (W), and the sample counts. A figure no sample had is None.
        """
        key = normalise_uuid(gpu_uuid)
        if self._unavailable is not None:
            return {"nvml_unavailable": self._unavailable}
        if key in self._missing:
            return {"nvml_unavailable": self._missing[key]}
        if key not in self._data:
            return {"nvml_unavailable": f"GPU {key} was not given to the NVML sampler"}
        with self._lock:
            return _summarise(self._data[key])

    def _find_gpus(self, nvml: Nvml) -> None:
        for gpu_uuid in self._gpu_uuids:
            try:
                handle = nvml.handle(gpu_uuid)
            except nvml.NVMLError as error:
                self._missing[gpu_uuid] = f"NVML could not find GPU {gpu_uuid}: {nvml.error_name(error)}"
                continue
            self._handles[gpu_uuid] = handle
            data = self._data[gpu_uuid]
            data.sm_clock_max_mhz = _read_or_none(nvml, nvml.sm_clock_max_mhz, handle)
            data.power_limit_w = _read_or_none(nvml, nvml.power_limit_w, handle)
            data.pcie_generation_max = _read_or_none(nvml, nvml.pcie_generation_max, handle)
            data.pcie_width_max = _read_or_none(nvml, nvml.pcie_width_max, handle)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()

    def _sample_gpu(self, nvml: Nvml, gpu_uuid: str, handle: Any) -> None:
        try:
            reasons = nvml.clocks_event_reasons(handle)
            clock_mhz = nvml.sm_clock_mhz(handle)
        except nvml.NVMLError as error:
            with self._lock:
                self._data[gpu_uuid].last_error = nvml.error_name(error)
            return
        # Temperature and power are extra evidence; a board without the sensor still has clocks.
        temperature_c = _read_or_none(nvml, nvml.gpu_temperature_c, handle)
        power_w = _read_or_none(nvml, nvml.power_draw_w, handle)
        # The link trains down to a lower generation when idle; only loaded samples count.
        pcie = (_read_or_none(nvml, nvml.pcie_generation, handle), _read_or_none(nvml, nvml.pcie_width, handle))
        with self._lock:
            _add_sample(self._data[gpu_uuid], reasons, clock_mhz, temperature_c, power_w, pcie)


def _add_sample(data: _GpuSamples, reasons: int, clock_mhz: int, temperature_c: int | None,
                power_w: float | None, pcie: tuple[int | None, int | None] = (None, None)) -> None:
    data.samples += 1
    data.reasons_mask |= reasons
    if temperature_c is not None:
        data.temperature_c.append(temperature_c)
    if power_w is not None:
        data.power_w.append(power_w)
    if reasons & _GPU_IDLE_BIT:
        data.idle_samples += 1
    else:
        data.loaded_sm_clock_mhz.append(clock_mhz)
        for name in decode_clocks_event_reasons(reasons):
            data.loaded_reason_samples[name] = data.loaded_reason_samples.get(name, 0) + 1
        generation, width = pcie
        if generation is not None:
            data.loaded_pcie_generation.append(generation)
        if width is not None:
            data.loaded_pcie_width.append(width)


def _summarise(data: _GpuSamples) -> dict[str, Any]:
    clocks = data.loaded_sm_clock_mhz
    reasons = [name for name in decode_clocks_event_reasons(data.reasons_mask) if name != GPU_IDLE]
    evidence: dict[str, Any] = {
        "sm_clock_mhz_min": min(clocks) if clocks else None,
        "sm_clock_mhz_median": statistics.median(clocks) if clocks else None,
        "sm_clock_mhz_max_seen": max(clocks) if clocks else None,
        "sm_clock_max_mhz": data.sm_clock_max_mhz,
        "clocks_event_reasons": reasons,
        "clocks_event_reason_samples": _reason_sample_counts(data.loaded_reason_samples),
        "temperature_c_max": max(data.temperature_c) if data.temperature_c else None,
        "power_w_max": max(data.power_w) if data.power_w else None,
        "power_limit_w": data.power_limit_w,
        "pcie_generation_min_loaded": min(data.loaded_pcie_generation, default=None),
        "pcie_generation_max": data.pcie_generation_max,
        "pcie_width_min_loaded": min(data.loaded_pcie_width, default=None),
        "pcie_width_max": data.pcie_width_max,
        "nvml_samples": data.samples,
        "nvml_samples_idle": data.idle_samples,
    }
    if data.last_error is not None:
        evidence["nvml_error"] = data.last_error
    return evidence


def _reason_sample_counts(counts: dict[str, int]) -> dict[str, int]:
    """Reason name -> loaded samples it was active in, lowest bit first (decode order)."""
    return {name: counts[name] for name in sorted(counts, key=lambda name: encode_clocks_event_reasons([name]))}


def _read_or_none(nvml: Nvml, read: Callable[[Any], T], handle: Any) -> T | None:
    try:
        return read(handle)
    except nvml.NVMLError:
        return None  # a figure this GPU does not report is simply absent from the evidence
