"""Running one measurement on every GPU of the node, all at once or one at a time.

All at once is how a training job loads a node (shared power, cooling and PCIe); one at a
time isolates a GPU. Either way each GPU gets a record: a failure on one GPU becomes that
GPU's ``error`` record and never stops the others.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

from .devices import CudaDevice
from .nvml import LoadSampler
from .records import Record, failed
from .sizing import MemoryRefusal
from .timing import DeadlineReached

# measure(device, start) -> Record; ``start()`` is called once the device is ready to load,
# so that all GPUs begin their timed work together.
Measure = Callable[[CudaDevice, Callable[[], None]], Record]

START_WAIT_S = 60.0


def run_on_each(torch: ModuleType, devices: Sequence[CudaDevice], probe: str, metric: str,
                measure: Measure, sequential: bool) -> list[Record]:
    """One record per device, in device order."""
    if sequential or len(devices) == 1:
        return [_guarded(torch, probe, metric, device, measure, _no_wait) for device in devices]
    barrier = threading.Barrier(len(devices), timeout=START_WAIT_S)

    def start() -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass  # a GPU failed during setup; the others go on without waiting for it

    def one(device: CudaDevice) -> Record:
        started = threading.Event()

        def start_once() -> None:
            started.set()
            start()

        try:
            return _guarded(torch, probe, metric, device, measure, start_once)
        finally:
            if not started.is_set():
                barrier.abort()  # it failed in setup: the others must not wait for it

    with ThreadPoolExecutor(max_workers=len(devices), thread_name_prefix=f"{probe}-gpu") as pool:
        return list(pool.map(one, devices))


def run_with_evidence(torch: ModuleType, devices: Sequence[CudaDevice], probe: str, metric: str,
                      measure: Measure, sequential: bool) -> Iterator[Record]:
    """Like :func:`run_on_each`, with the NVML telemetry seen under the load (clocks, throttle
    reasons, temperature, power, PCIe link) added to each record's ``details``.

    One at a time, each GPU is sampled only during its own turn, so idle time of the others does
    not dilute its evidence.
    """
    groups = [[device] for device in devices] if sequential else [list(devices)]
    for group in groups:
        with LoadSampler([device.gpu_uuid for device in group if device.gpu_uuid]) as sampler:
            records = run_on_each(torch, group, probe, metric, measure, sequential)
        for device, record in zip(group, records, strict=True):
            evidence = sampler.evidence(device.gpu_uuid) if device.gpu_uuid else {}
            yield dataclasses.replace(record, details={**record.details, **evidence})


def _no_wait() -> None:
    return None


def _guarded(torch: ModuleType, probe: str, metric: str, device: CudaDevice, measure: Measure,
             start: Callable[[], None]) -> Record:
    """``measure`` on ``device``, with the failures we can name turned into error records."""
    try:
        torch.cuda.set_device(device.index)
        return measure(device, start)
    except MemoryRefusal as refusal:
        reason = f"refused: {refusal}"
    except torch.cuda.OutOfMemoryError as error:
        reason = f"out of GPU memory: {_first_line(error)}"
    except DeadlineReached as error:
        reason = f"deadline: {error}"
    except RuntimeError as error:  # torch raises RuntimeError for CUDA and cuBLAS failures
        reason = describe_cuda_error(error)
    finally:
        torch.cuda.empty_cache()
    return failed(probe, device.label, metric, reason, gpu_uuid=device.gpu_uuid)


def describe_cuda_error(error: RuntimeError) -> str:
    """The first line of a CUDA/cuBLAS failure, marked as such (torch often marks it already)."""
    text = _first_line(error)
    return text if text.startswith(("CUDA", "cuBLAS", "CUBLAS")) else f"CUDA error: {text}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
