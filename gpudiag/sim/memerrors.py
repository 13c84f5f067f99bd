"""A simulated GPU's memory errors: what NVML's ECC and row-remapping readings show
(probes/telemetry.py: ``ecc_uncorrected_volatile`` and ``_aggregate`` from
nvmlDeviceGetTotalEccErrors, ``remapped_rows_*`` from nvmlDeviceGetRemappedRows), and the
fleet file's ``ecc`` fault that plants them.

``ecc`` (host, gpu; at least one of ``uncorrectable``, ``remapped_rows``, ``pending``,
``remap_failed``): ``uncorrectable`` uncorrected ECC errors since the driver loaded (the
volatile counter; the aggregate, over the GPU's life, reads at least as many: ``aggregate``,
default the same), ``remapped_rows`` rows remapped for uncorrectable errors (and
``correctable_rows`` for correctable ones), ``pending`` a remap waiting for the next GPU reset,
``remap_failed`` a remap that failed (the GPU is out of spare rows: an RMA). Nothing else changes:
the GPU keeps its speed, and no Xid is logged (plant an ``xid`` fault, 48/63/64/94/95, for that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .reader import FieldReader

ECC_FIELDS = ("uncorrectable", "aggregate", "remapped_rows", "correctable_rows", "pending", "remap_failed")
# A count the NVML counters can hold (unsigned long long), far beyond what a GPU ever reports.
MAX_COUNT = 2 ** 40


@dataclass(frozen=True)
class MemoryErrors:
    """What NVML reports of a GPU's memory errors (all 0 / False on a healthy GPU)."""

    uncorrectable: int = 0
    aggregate: int = 0
    remapped_rows: int = 0
    correctable_rows: int = 0
    pending: bool = False
    remap_failed: bool = False

    def readings(self) -> dict[str, int]:
        """The telemetry probe's six readings, by metric (probes/telemetry.py's order)."""
        return {"ecc_uncorrected_volatile": self.uncorrectable, "ecc_uncorrected_aggregate": self.aggregate,
                "remapped_rows_correctable": self.correctable_rows,
                "remapped_rows_uncorrectable": self.remapped_rows,
                "remapped_rows_pending": int(self.pending), "remapped_rows_failure": int(self.remap_failed)}


def ecc_fields(read: FieldReader, entry: dict[str, Any], path: str) -> dict[str, Any]:
    """An ``ecc`` fault's ``memory_errors``, checked. Raises InputError (file, field, problem)."""
    counts = {key: read.integer(entry, key, 0, path, low=0, high=MAX_COUNT)
              for key in ("uncorrectable", "remapped_rows", "correctable_rows")}
    aggregate = read.integer(entry, "aggregate", counts["uncorrectable"], path, low=0, high=MAX_COUNT)
    if aggregate < counts["uncorrectable"]:
        raise read.error(f"{path}.aggregate", f"{aggregate} is below uncorrectable {counts['uncorrectable']}: the "
                         "aggregate counter (the GPU's life) holds every error since the driver loaded")
    pending, failed = read.flag(entry, "pending", False, path), read.flag(entry, "remap_failed", False, path)
    errors = MemoryErrors(counts["uncorrectable"], aggregate, counts["remapped_rows"], counts["correctable_rows"],
                          pending, failed)
    if errors == MemoryErrors():
        raise read.error(path, "an ecc fault needs uncorrectable, aggregate, remapped_rows, correctable_rows, "
                         "pending or remap_failed")
    return {"memory_errors": errors}
