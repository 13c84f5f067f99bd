"""Reading ``nvidia-smi -q``: the fallback when the NVML bindings (pynvml) cannot be used.

``nvidia-smi -q`` prints an indented ``Key : Value`` tree with one ``GPU <PCI bus id>`` section
per GPU. This module runs it, parses that tree, and finds in each GPU section the readings the
telemetry probe reports, named by the same metric names as the NVML path. The layout differs
between drivers (``Clocks Throttle Reasons`` before 535, ``Clocks Event Reasons`` after;
``Power Readings`` before 530, ``GPU Power Readings`` after; from 570 ``Average Power Draw``, which
may read ``N/A``, then ``Instantaneous Power Draw``), so each metric has a list of places to look,
as data, and the first place holding a number gives it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .nvml import encode_clocks_event_reasons

_KEY_VALUE = re.compile(r"^(?P<key>.*?\S)\s+:(?: (?P<value>.*))?$")
_NUMBER = re.compile(r"^(?P<number>-?\d+(?:\.\d+)?)\s*(?:x|[A-Za-z%/]+)?$")
_GPU_SECTION = re.compile(r"^GPU (?P<bus_id>[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f])$")
_TRUTH = {"Yes": 1, "No": 0}
# What nvidia-smi prints where a GPU or driver has no such reading (580 prints "Not Found" for
# sample windows it has none of; 570+ "Requested functionality has been deprecated").
_NOT_APPLICABLE = ("N/A", "Not Supported", "Not Available", "Not Found", "Requested functionality has been deprecated")

# metric -> the places (paths of keys inside a GPU section) to look for it; the first that holds a
# number wins, so "Average Power Draw : N/A" falls through to "Instantaneous Power Draw".
SMI_PATHS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("sm_clock", (("Clocks", "SM"),)),
    ("sm_clock_max", (("Max Clocks", "SM"),)),
    ("memory_clock", (("Clocks", "Memory"),)),
    ("memory_clock_max", (("Max Clocks", "Memory"),)),
    ("gpu_temperature", (("Temperature", "GPU Current Temp"),)),
    ("memory_temperature", (("Temperature", "Memory Current Temp"),)),
    ("power_draw", (("GPU Power Readings", "Power Draw"), ("GPU Power Readings", "Average Power Draw"),
                    ("GPU Power Readings", "Instantaneous Power Draw"), ("Power Readings", "Power Draw"))),
    ("power_limit", (("GPU Power Readings", "Current Power Limit"), ("Power Readings", "Enforced Power Limit"),
                     ("Power Readings", "Power Limit"))),
    ("remapped_rows_correctable", (("Remapped Rows", "Correctable Error"),)),
    ("remapped_rows_uncorrectable", (("Remapped Rows", "Uncorrectable Error"),)),
    ("remapped_rows_pending", (("Remapped Rows", "Pending"),)),
    ("remapped_rows_failure", (("Remapped Rows", "Remapping Failure Occurred"),)),
    ("pcie_generation", (("PCI", "GPU Link Info", "PCIe Generation", "Current"),)),
    ("pcie_generation_max", (("PCI", "GPU Link Info", "PCIe Generation", "Max"),)),
    ("pcie_width", (("PCI", "GPU Link Info", "Link Width", "Current"),)),
    ("pcie_width_max", (("PCI", "GPU Link Info", "Link Width", "Max"),)),
    ("pcie_replay_count", (("PCI", "Replays Since Reset"),)),
)
# nvidia-smi's label for each clocks-event reason -> the name NVML's bit has (see nvml.py).
REASON_LABELS: tuple[tuple[str, str], ...] = (
    ("Idle", "gpu_idle"),
    ("Applications Clocks Setting", "applications_clocks_setting"),
    ("SW Power Cap", "sw_power_cap"),
    ("HW Slowdown", "hw_slowdown"),
    ("Sync Boost", "sync_boost"),
    ("SW Thermal Slowdown", "sw_thermal_slowdown"),
    ("HW Thermal Slowdown", "hw_thermal_slowdown"),
    ("HW Power Brake Slowdown", "hw_power_brake_slowdown"),
    ("Display Clock Setting", "display_clock_setting"),
)
_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
_ECC_KINDS = (("ecc_uncorrected_volatile", "Volatile"), ("ecc_uncorrected_aggregate", "Aggregate"))


class SmiUnavailable(Exception):
    """nvidia-smi is missing or failed; the message says which and why."""


@dataclass(frozen=True)
class SmiNode:
    """One line of the tree: ``key``, its ``value`` (None for a bare section title), children."""

    key: str
    value: str | None
    children: tuple[SmiNode, ...] = ()

    def find(self, *path: str) -> SmiNode | None:
        """The first descendant reached by following ``path`` (keys), or None."""
        node: SmiNode | None = self
        for key in path:
            node = next((child for child in node.children if child.key == key), None) if node else None
        return node

    def descendants(self) -> tuple[SmiNode, ...]:
        """Every node below this one, depth first."""
        return tuple(node for child in self.children for node in (child, *child.descendants()))


@dataclass(frozen=True)
class SmiMissing:
    """A reading nvidia-smi did not give: the ``text`` it printed ("" when the key is absent).

    ``error`` is True when the text is a failure ("Unknown Error", "GPU is lost"), not an
    honest "this GPU has no such reading".
    """

    text: str
    error: bool = False


SmiReading = int | float | SmiMissing


@dataclass(frozen=True)
class SmiGpu:
    """What ``nvidia-smi -q`` says about one GPU. ``index`` is its place in the output, which
    is NVML's index order; ``readings`` maps each metric of :data:`SMI_PATHS` (and
    ``clocks_event_reasons`` as a bitmask, ``ecc_uncorrected_*`` as counts) to its value."""

    index: int
    pci_bus_id: str
    gpu_uuid: str | None
    name: str | None
    serial: str | None
    readings: Mapping[str, SmiReading]


@dataclass(frozen=True)
class SmiReport:
    """The whole ``nvidia-smi -q`` output: driver and CUDA versions, the GPU sections, and any
    top-level complaint lines (``Unable to determine the device handle for GPU...``)."""

    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[SmiNode, ...]
    complaints: tuple[str, ...]


def run_nvidia_smi(arguments: Sequence[str], timeout_s: float, executable: str | None = None,
                   failure: type[Exception] = SmiUnavailable) -> str:
    """Run ``nvidia-smi ARGUMENTS`` and return its output.

    ``executable`` defaults to ``nvidia-smi`` found on PATH. Raises ``failure`` (one line: what
    failed and why) when it is not found, cannot start, runs past ``timeout_s`` seconds, or exits
    non-zero.
    """
    command = " ".join(["nvidia-smi", *arguments])
    program = executable or shutil.which("nvidia-smi")
    if program is None:
        raise failure("nvidia-smi is not on PATH")
    try:
        completed = subprocess.run([program, *arguments], capture_output=True, text=True,
                                   timeout=max(timeout_s, 0.1), check=False)
    except subprocess.TimeoutExpired as error:
        raise failure(f"{command} did not finish within {timeout_s:.0f} s") from error
    except OSError as error:
        raise failure(f"nvidia-smi could not start: {error}") from error
    if completed.returncode != 0:
        said = (completed.stdout.strip() or completed.stderr.strip()).splitlines()
        raise failure(f"{command} exited {completed.returncode}: {said[0] if said else 'no output'}")
    return completed.stdout


def query_nvidia_smi(timeout_s: float, executable: str | None = None) -> str:
    """Run ``nvidia-smi -q`` and return its output. Raises SmiUnavailable (see run_nvidia_smi)."""
    return run_nvidia_smi(["-q"], timeout_s, executable)


def parse_query(text: str) -> SmiReport:
    """Parse ``nvidia-smi -q`` output into its header facts and GPU sections."""
    root = _parse_tree(text)
    gpus = tuple(node for node in root.children if _GPU_SECTION.match(node.key))
    complaints = tuple(node.key for node in root.children
                       if node.value is None and not node.children and not node.key.startswith("="))
    return SmiReport(driver_version=_value(root, "Driver Version"), cuda_version=_value(root, "CUDA Version"),
                     gpus=gpus, complaints=complaints)


def read_gpu(section: SmiNode, index: int) -> SmiGpu:
    """The readings of one ``GPU <bus id>`` section (see :class:`SmiGpu`)."""
    match = _GPU_SECTION.match(section.key)
    bus_id = _value(section, "PCI", "Bus Id") or (match.group("bus_id") if match else section.key)
    readings: dict[str, SmiReading] = {metric: _first_number(section, paths) for metric, paths in SMI_PATHS}
    readings["clocks_event_reasons"] = _reasons_mask(section)
    for metric, kind in _ECC_KINDS:
        readings[metric] = _ecc_uncorrected(section, kind)
    return SmiGpu(index=index, pci_bus_id=bus_id, gpu_uuid=_value(section, "GPU UUID"),
                  name=_value(section, "Product Name"), serial=_value(section, "Serial Number"),
                  readings=readings)


def parse_number(text: str) -> SmiReading:
    """``"345 MHz"`` -> 345, ``"71.97 W"`` -> 71.97, ``"16x"`` -> 16, ``"Yes"`` -> 1;
    anything else becomes :class:`SmiMissing` (an error unless it is an "N/A"-like word)."""
    cleaned = text.strip().strip("[]").strip()
    if cleaned in _TRUTH:
        return _TRUTH[cleaned]
    match = _NUMBER.match(cleaned)
    if match:
        number = match.group("number")
        return float(number) if "." in number else int(number)
    return SmiMissing(cleaned, error=cleaned not in _NOT_APPLICABLE)


def _parse_tree(text: str) -> SmiNode:
    # Each open node is (indent, key, value, children-so-far); a line closes every open node
    # indented as deep or deeper than itself.
    stack: list[tuple[int, str, str | None, list[SmiNode]]] = [(-1, "", None, [])]
    for line in text.expandtabs(4).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack[-1][0] >= indent:
            _close(stack)
        key, value = _split(line.strip())
        stack.append((indent, key, value, []))
    while len(stack) > 1:
        _close(stack)
    return SmiNode("", None, tuple(stack[0][3]))


def _close(stack: list[tuple[int, str, str | None, list[SmiNode]]]) -> None:
    _, key, value, children = stack.pop()
    stack[-1][3].append(SmiNode(key, value, tuple(children)))


def _split(line: str) -> tuple[str, str | None]:
    match = _KEY_VALUE.match(line)
    if not match:
        return line, None
    return match.group("key").strip(), (match.group("value") or "").strip()


def _value(node: SmiNode, *path: str) -> str | None:
    found = node.find(*path)
    if found is None or found.value is None or found.value in _NOT_APPLICABLE:
        return None
    return found.value


def _first_number(section: SmiNode, paths: tuple[tuple[str, ...], ...]) -> SmiReading:
    """The first number along ``paths``; where none holds one, the gap that says most: a failure
    ("Unknown Error") before an "N/A", an "N/A" before an absent key."""
    gaps: list[SmiMissing] = []
    for path in paths:
        reading = _reading_at(section, path)
        if not isinstance(reading, SmiMissing):
            return reading
        gaps.append(reading)
    return min(gaps, key=lambda gap: (not gap.error, not gap.text), default=SmiMissing(""))


def _reading_at(section: SmiNode, path: tuple[str, ...]) -> SmiReading:
    node = section
    for key in path:
        child = node.find(key)
        if child is None:
            return _gap(node, section)
        node = child
    return SmiMissing("") if node.value is None else parse_number(node.value)


def _gap(deepest: SmiNode, section: SmiNode) -> SmiMissing:
    """Why a path stops at ``deepest``: a whole section printed as one line, e.g. ``Remapped Rows :
    N/A`` on a GPU without row remapping, gives its text; anything else is an absent key."""
    if deepest is section or deepest.value is None or deepest.children:
        return SmiMissing("")
    said = parse_number(deepest.value)
    return said if isinstance(said, SmiMissing) else SmiMissing("")


def _reasons_mask(section: SmiNode) -> SmiReading:
    reasons = next((node for name in _REASON_SECTIONS if (node := section.find(name)) is not None), None)
    if reasons is None:
        return SmiMissing("")
    labels = dict(REASON_LABELS)
    active: list[str] = []
    seen = 0
    for node in reasons.descendants():
        if node.key not in labels or node.value is None:
            continue  # a label newer than this table: its bit is still in NVML's own mask
        if node.value not in ("Active", "Not Active"):
            return parse_number(node.value)
        seen += 1
        if node.value == "Active":
            active.append(labels[node.key])
    return encode_clocks_event_reasons(active) if seen else SmiMissing("")


def _ecc_uncorrected(section: SmiNode, kind: str) -> SmiReading:
    counters = section.find("ECC Errors", kind)
    if counters is None:
        ecc = section.find("ECC Errors")
        return SmiMissing("") if ecc is None else _gap(ecc, section)
    # Before Ampere the counts sit under "Double Bit" > "Total"; since, one line per memory
    # ("SRAM Uncorrectable", "DRAM Uncorrectable", or SRAM split into Parity and SEC-DED).
    double_bit = counters.find("Double Bit", "Total")
    leaves = [double_bit] if double_bit is not None else [
        node for node in counters.children if "Uncorrectable" in node.key and node.value is not None]
    if not leaves:
        return SmiMissing("")
    total = 0
    for leaf in leaves:
        count = parse_number(leaf.value or "")
        if isinstance(count, SmiMissing):
            return count
        total += int(count)
    return total
