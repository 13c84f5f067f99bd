"""One host's part of a sweep, kept small while the sweep runs.

A node's records take about half a megabyte as Python objects (an 8-GPU node prints some 300:
telemetry, P2P pairs, per-SM clocks); held as objects, 10,000 nodes would take gigabytes. A
``HostOutcome`` keeps them packed instead (pickle, then zlib: ~13 KB a node) and unpacks them
on each access, so the analysis, the store and the JSON writer each see one host's records at a
time. Pickle is only ever read back from bytes this process made; what goes to disk is JSON.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..records import HostEntry, ProbeResult, StrayOutput
from ..schema.text import one_line

OK = "ok"
# zlib level 1: nearly the size of level 6 on these records at a third of the time.
_PACK_LEVEL = 1
_FIELDS = ("host", "status", "error", "duration_s", "facts", "results")
# A host's error is cut to this many characters.
ERROR_CHARS = 2000


def _pack(records: tuple[ProbeResult, ...]) -> bytes:
    return zlib.compress(pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL), _PACK_LEVEL)


_PACKED_NONE = _pack(())


class HostOutcome(Mapping[str, Any]):
    """How one host's part of the sweep ended (``status``, ``error``), in how many seconds, its
    facts and what it measured. Also a read-only mapping of its sweep-document entry (``host``,
    ``status``, ``error``, ``duration_s``, ``facts``, ``results`` as record dicts, and
    ``stray_output`` where the bundle printed lines that were no record), which is what the
    store and the JSON writer read; the analysis reads it typed (a gpudiag.records.HostRecords)."""

    __slots__ = ("host", "status", "error", "duration_s", "_facts", "stray", "reading", "_packed", "_count")

    def __init__(self, host: str, status: str, error: str | None, duration_s: float,
                 facts: Mapping[str, Any] | None = None, results: Iterable[ProbeResult] = (),
                 stray: StrayOutput | None = None) -> None:
        self.host = host
        self.status = status
        # An error may quote what the node said (its stderr's last line): one line, no control character.
        self.error = one_line(error, ERROR_CHARS) if error else error
        self.duration_s = duration_s
        self.facts = facts or {}
        self.stray = stray
        # What the analysis read of it as it finished (gpudiag.analysis.SweepReader), or None.
        self.reading: Any = None
        # The facts record is the facts above; the document carries it once.
        records = tuple(result for result in results if result.probe != "facts")
        self._count = len(records)
        self._packed = _pack(records) if records else _PACKED_NONE  # (an unreachable host's: none)

    @property
    def facts(self) -> Mapping[str, Any]:
        """What the node said of itself (its facts record's details); empty for a host that said nothing."""
        return self._facts if self._facts is not None else {}

    @facts.setter
    def facts(self, facts: Mapping[str, Any]) -> None:
        # a copy of its own; none at all for the empty facts of a host that never answered (most of a
        # large sweep's unreachable hosts: a dict each is 64 bytes a host for nothing)
        self._facts = dict(facts) if facts else None

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def results_count(self) -> int:
        """How many records it holds (without unpacking them)."""
        return self._count

    @property
    def packed_bytes(self) -> int:
        """What the records take while packed (bytes)."""
        return len(self._packed)

    def result_dicts(self) -> list[dict[str, Any]]:
        """The records as the document's dicts (a new list on every call)."""
        return [result.to_dict() for result in self.results]

    @property
    def results(self) -> tuple[ProbeResult, ...]:
        """The records as ProbeResults (unpacked on every call)."""
        records: tuple[ProbeResult, ...] = pickle.loads(zlib.decompress(self._packed))
        return records

    def records(self) -> HostEntry:
        """How it ended, its facts and its records unpacked once (for several readers in a row)."""
        return HostEntry(self.host, self.status, self.error, self.facts, self.results)

    def to_dict(self) -> dict[str, Any]:
        """The host's entry of the sweep document, every record in full."""
        return {"host": self.host, "status": self.status, "error": self.error,
                "duration_s": round(self.duration_s, 3), "facts": dict(self.facts), "results": self.result_dicts(),
                **({"stray_output": self.stray.to_dict()} if self.stray is not None else {})}

    def unpacked(self, results: Iterable[ProbeResult] | None = None) -> Mapping[str, Any]:
        """The document entry with its records unpacked once (``results``: those of ``records()``)."""
        records = self.results if results is None else results
        return {**self.summary_dict_without_count(), "results": [result.to_dict() for result in records]}

    def summary_dict_without_count(self) -> dict[str, Any]:
        return {name: self[name] for name in self if name != "results"}

    def summary_dict(self) -> dict[str, Any]:
        """The entry without its records (what a report of hosts and findings needs)."""
        return {**self.summary_dict_without_count(), "results_count": self.results_count}

    def with_facts(self, facts: Mapping[str, Any]) -> HostOutcome:
        """The same outcome with other facts (a re-test reads with its first pass's facts)."""
        copy = object.__new__(HostOutcome)
        for name in HostOutcome.__slots__:
            object.__setattr__(copy, name, getattr(self, name))
        copy.facts = facts
        copy.reading = None  # read with other facts, it would read otherwise
        return copy

    # -- the mapping ---------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        if name == "results":
            return self.result_dicts()
        if name == "duration_s":
            return round(self.duration_s, 3)
        if name == "facts":
            return dict(self.facts)
        if name == "stray_output" and self.stray is not None:
            return self.stray.to_dict()
        if name in ("host", "status", "error"):
            return getattr(self, name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        yield from _FIELDS
        if self.stray is not None:
            yield "stray_output"

    def __len__(self) -> int:
        return len(_FIELDS) + (self.stray is not None)

    def __repr__(self) -> str:
        return f"HostOutcome({self.host!r}, {self.status!r}, {self.error!r}, {self.duration_s:.3f} s, " \
               f"{self._count} records)"
