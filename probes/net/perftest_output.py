"""The report an ``ib_*_bw`` run of perftest prints, parsed: its settings block and result
table, in Gb/s (``--report_gbits``), and the CUDA device it used (tests/data/perftest holds real
captures); and one rail's figure from the summaries of the runs it made at once, one per QP."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GBITS_UNIT = "Gb/sec"
_TABLE_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[[^\]]+\]")
_ROW = re.compile(r"^\s*(?P<bytes>\d+)\s+(?P<iterations>\d+)\s+(?P<peak>\d+(?:\.\d+)?)\s+"
                  r"(?P<average>\d+(?:\.\d+)?)\s+(?P<rate>\d+(?:\.\d+)?)\s*$")
# A rule line of the report (dashes): it closes the settings block and the table.
RULE = re.compile(r"^-{20,}\s*$")
_CUDA_PICK = re.compile(r"Picking device No\.\s*(?P<index>\d+)")
_CUDA_NAME = re.compile(r"device name = \[(?P<name>[^\]]+)\]")


class PerftestOutputError(ValueError):
    """The text is not an ib_*_bw report (no result table, or not in Gb/s); the message says why."""


@dataclass(frozen=True)
class PerftestRow:
    """One line of the result table: message size (bytes), iterations, peak and average
    bandwidth and message rate (Mpps), in the table's unit. ``peak`` is None where perftest
    prints 0 (duration mode measures no peak)."""

    message_bytes: int
    iterations: int
    peak: float | None
    average: float
    message_rate_mpps: float


@dataclass(frozen=True)
class PerftestReport:
    """A parsed ``ib_write_bw`` (or ``ib_read_bw``...) report: its title, the ``key : value``
    settings of its header, the table unit and rows, and the CUDA device it used, if any."""

    title: str | None
    settings: Mapping[str, str]
    unit: str
    rows: tuple[PerftestRow, ...]
    cuda_device: int | None = None
    gpu_name: str | None = None
    dmabuf: bool = False

    @property
    def largest(self) -> PerftestRow:
        """The row of the largest message size (the last of equals)."""
        return max(reversed(self.rows), key=lambda row: row.message_bytes)

    def gbps(self, row: PerftestRow) -> tuple[float | None, float]:
        """(peak, average) of ``row`` in Gbit/s. Raises PerftestOutputError unless the report is in Gb/sec."""
        if self.unit != GBITS_UNIT:
            raise PerftestOutputError(f"the report is in {self.unit}, not {GBITS_UNIT} (run with --report_gbits)")
        return row.peak, row.average

    def setting_int(self, key: str) -> int | None:
        match = re.match(r"\d+", self.settings.get(key, ""))
        return int(match.group()) if match else None

    def summary(self) -> dict[str, Any]:
        """The figures a link record carries: the largest size's average and peak Gbit/s, the
        message size, iterations, QPs, link type, MTU, device and CUDA use."""
        row = self.largest
        peak, average = self.gbps(row)
        return {"average_gbps": average, "peak_gbps": peak, "message_bytes": row.message_bytes,
                "iterations": row.iterations, "qps": self.setting_int("Number of qps"),
                "link_type": self.settings.get("Link type"), "mtu_bytes": self.setting_int("Mtu"),
                "device": self.settings.get("Device"), "transport": self.settings.get("Transport type"),
                "connection": self.settings.get("Connection type"), "cuda_device": self.cuda_device,
                "gpu_name": self.gpu_name, "dmabuf": self.dmabuf, "sizes": len(self.rows)}


def parse_perftest(text: str) -> PerftestReport:
    """Parse the report an ``ib_*_bw`` run prints (client or server side).

    The settings block lies between the test title (``RDMA_Write BW Test``) and the next rule;
    its lines hold one or two ``key : value`` pairs separated by tabs. The table follows the
    ``#bytes #iterations BW peak[...]`` header up to the closing rule. Raises PerftestOutputError
    when there is no table or no row in it.
    """
    lines = text.splitlines()
    title_at = next((i for i, line in enumerate(lines) if re.search(r"\b(BW|Lat(ency)?) Test\s*$", line)), None)
    settings: dict[str, str] = {}
    if title_at is not None:
        for line in lines[title_at + 1:]:
            if RULE.match(line):
                break
            settings.update(_settings(line))
    header_at = next((i for i, line in enumerate(lines) if _TABLE_HEADER.match(line)), None)
    if header_at is None:
        raise PerftestOutputError("no result table (#bytes #iterations BW peak ...) in the output")
    header = _TABLE_HEADER.match(lines[header_at])
    rows = []
    for line in lines[header_at + 1:]:
        if RULE.match(line):
            break
        match = _ROW.match(line)
        if match:
            peak = float(match.group("peak"))
            rows.append(PerftestRow(int(match.group("bytes")), int(match.group("iterations")), peak or None,
                                    float(match.group("average")), float(match.group("rate"))))
    if not rows:
        raise PerftestOutputError("the result table has no rows")
    pick, name = _CUDA_PICK.search(text), _CUDA_NAME.search(text)
    return PerftestReport(title=lines[title_at].strip() if title_at is not None else None, settings=settings,
                          unit=header.group("unit") if header else "", rows=tuple(rows),
                          cuda_device=int(pick.group("index")) if pick else None,
                          gpu_name=name.group("name") if name else None, dmabuf="DMA-BUF" in text)


def _settings(line: str) -> dict[str, str]:
    # Tabs separate pairs, but a key may itself be followed by a tab ("rdma_cm QPs\t : ON"):
    # a piece without a colon belongs to the next.
    pairs: dict[str, str] = {}
    carried = ""
    for piece in re.split(r"\t+", line):
        piece = carried + piece
        if ":" not in piece:
            carried = piece + " "
            continue
        carried = ""
        key, _, value = piece.partition(":")
        if key.strip():
            pairs[key.strip()] = value.strip()
    return pairs


def combine_runs(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One rail's result from the results of its ib_write_bw runs made at once (one QP each), in
    run order: the sum of their averages (Gbit/s) as ``average_gbps``, the sum of their peaks
    (None where one has none), their QPs and iterations summed, each run's average in
    ``stream_gbps``, the rest (link information) of the first run, the first exit status that is
    not 0. A run that failed makes the rail's result its error (``{"error": ...}``), naming the
    run when there were several. ``results`` is not empty."""
    for index, result in enumerate(results):
        if "error" in result:
            return {"error": result["error"] if len(results) == 1 else
                    f"QP run {index + 1} of {len(results)}: {result['error']}"}
    averages = [float(result["average_gbps"]) for result in results]
    peaks = [result.get("peak_gbps") for result in results]
    combined = {key: value for key, value in results[0].items() if key != "exit_status"}
    combined.update({
        "average_gbps": round(sum(averages), 4),
        "peak_gbps": round(sum(float(peak) for peak in peaks if peak is not None), 4) if None not in peaks else None,
        "qps": sum(int(result.get("qps") or 1) for result in results),
        "iterations": sum(int(result.get("iterations") or 0) for result in results),
        "stream_gbps": [round(average, 4) for average in averages]})
    failed = next((result["exit_status"] for result in results if result.get("exit_status")), None)
    if failed is not None:
        combined["exit_status"] = failed
    return combined
