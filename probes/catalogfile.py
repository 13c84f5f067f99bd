"""The reader of the probe catalogue (``catalog.json``): its types and its checks, and nothing
else of the bundle. It imports only the standard library and reads nothing when imported, so the
controller loads this one file by its path from where the bundle lies (gpudiag/bundle/catalog.py)
and both sides check the catalogue with the same code; the bundle reads it through
probes/catalog.py. A missing or malformed file is a ``CatalogError`` whose one-line message names
the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class CatalogError(Exception):
    """catalog.json is missing or malformed; the message names the file and what is wrong."""


@dataclass(frozen=True)
class ProbeEntry:
    """A probe: its name, its headline metric, whether it runs when no probe is named."""

    name: str
    metric: str
    by_default: bool


@dataclass(frozen=True)
class Sizing:
    """How large a probe's device buffers may be: the headroom (at least ``headroom_min_mib``, or
    ``headroom_fraction`` of the free memory), the bytes of an element of each dtype, and each
    probe's sizes, largest first."""

    headroom_min_mib: int
    headroom_fraction: float
    dtype_bytes: Mapping[str, int]
    gemm_sizes: tuple[int, ...]
    gemm_workspace_mib: int
    membw_buffer_mib: tuple[int, ...]
    p2p_buffer_mib: tuple[int, ...]
    pcie_buffer_mib: tuple[int, ...]
    smclock_segment_mib: int


@dataclass(frozen=True)
class PauseFigures:
    """A probe beside a paused job: the memory (MiB) a CUDA context takes, the probes each GPU's
    child runs (in run order), the seconds kept back from the children's shares of the deadline,
    and the least share worth a child."""

    context_reserve_mib: int
    per_gpu_probes: tuple[str, ...]
    child_margin_s: float
    min_share_s: float


@dataclass(frozen=True)
class Catalog:
    probes: tuple[ProbeEntry, ...]
    dtypes: tuple[str, ...]
    sizing: Sizing
    pause: PauseFigures

    @property
    def probe_names(self) -> tuple[str, ...]:
        return tuple(probe.name for probe in self.probes)

    @property
    def default_probe_names(self) -> tuple[str, ...]:
        return tuple(probe.name for probe in self.probes if probe.by_default)

    @property
    def metrics(self) -> dict[str, str]:
        """Each probe's headline metric, by name."""
        return {probe.name: probe.metric for probe in self.probes}


def read_catalog(path: Path) -> Catalog:
    """The catalogue at ``path``, checked. Raises CatalogError naming ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CatalogError(f"{path}: cannot read the probe catalogue: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise CatalogError(f"{path}: the probe catalogue is not UTF-8: {error}") from error
    try:
        return _catalog(json.loads(text, object_pairs_hook=_unique_keys))
    except json.JSONDecodeError as error:
        raise CatalogError(f"{path}:{error.lineno}:{error.colno}: the probe catalogue is not valid JSON: "
                           f"{error.msg}") from error
    except _Malformed as error:
        raise CatalogError(f"{path}: malformed probe catalogue: {error}") from None


class _Malformed(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the file, refused when it names a key twice (json keeps the last silently)."""
    keys = [key for key, _ in pairs]
    twice = [key for i, key in enumerate(keys) if key in keys[:i]]
    if twice:
        raise _Malformed(f"the key {twice[0]!r} appears twice in one object")
    return dict(pairs)


def _catalog(data: Any) -> Catalog:
    top = _fields(data, "the catalogue", ("probes", "dtypes", "sizing", "pause"), optional=("about",))
    if not isinstance(top["probes"], list) or not top["probes"]:
        raise _Malformed("probes: must be a non-empty list")
    probes = tuple(_probe(entry, f"probes[{i}]") for i, entry in enumerate(top["probes"]))
    names = _distinct([probe.name for probe in probes], "probes")
    if not any(probe.by_default for probe in probes):
        raise _Malformed("probes: none runs by default")
    dtypes = _names(top["dtypes"], "dtypes")
    sizing = _fields(top["sizing"], "sizing", ("headroom_min_mib", "headroom_fraction", "dtype_bytes", "gemm_sizes",
                                               "gemm_workspace_mib", "membw_buffer_mib", "p2p_buffer_mib",
                                               "pcie_buffer_mib", "smclock_segment_mib"))
    fraction = _number(sizing["headroom_fraction"], "sizing.headroom_fraction")
    if fraction >= 1:
        raise _Malformed(f"sizing.headroom_fraction: must be below 1, not {fraction!r}")
    widths = _fields(sizing["dtype_bytes"], "sizing.dtype_bytes", dtypes)
    pause = _fields(top["pause"], "pause", ("context_reserve_mib", "per_gpu_probes", "child_margin_s", "min_share_s"))
    per_gpu = _names(pause["per_gpu_probes"], "pause.per_gpu_probes")
    unknown = [name for name in per_gpu if name not in names]
    if unknown:
        raise _Malformed(f"pause.per_gpu_probes: {unknown[0]!r} is not a probe of the catalogue")
    return Catalog(
        probes=probes, dtypes=dtypes,
        sizing=Sizing(
            headroom_min_mib=_count(sizing["headroom_min_mib"], "sizing.headroom_min_mib"),
            headroom_fraction=fraction,
            dtype_bytes={name: _count(widths[name], f"sizing.dtype_bytes.{name}", least=1) for name in dtypes},
            gemm_sizes=_ladder(sizing["gemm_sizes"], "sizing.gemm_sizes"),
            gemm_workspace_mib=_count(sizing["gemm_workspace_mib"], "sizing.gemm_workspace_mib"),
            membw_buffer_mib=_ladder(sizing["membw_buffer_mib"], "sizing.membw_buffer_mib"),
            p2p_buffer_mib=_ladder(sizing["p2p_buffer_mib"], "sizing.p2p_buffer_mib"),
            pcie_buffer_mib=_ladder(sizing["pcie_buffer_mib"], "sizing.pcie_buffer_mib"),
            smclock_segment_mib=_count(sizing["smclock_segment_mib"], "sizing.smclock_segment_mib", least=1)),
        pause=PauseFigures(
            context_reserve_mib=_count(pause["context_reserve_mib"], "pause.context_reserve_mib"),
            per_gpu_probes=per_gpu,
            child_margin_s=_number(pause["child_margin_s"], "pause.child_margin_s"),
            min_share_s=_number(pause["min_share_s"], "pause.min_share_s")))


def _fields(value: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``value``, an object with exactly the ``required`` keys (and maybe ``optional`` ones)."""
    if not isinstance(value, dict):
        raise _Malformed(f"{where}: must be an object")
    missing = [key for key in required if key not in value]
    extra = sorted(key for key in value if key not in required and key not in optional)
    problems = [f"lacks {', '.join(missing)}"] if missing else []
    problems += [f"has unknown {', '.join(extra)}"] if extra else []
    if problems:
        raise _Malformed(f"{where}: {'; '.join(problems)}")
    return value


def _probe(value: Any, where: str) -> ProbeEntry:
    entry = _fields(value, where, ("name", "metric", "by_default"))
    if not isinstance(entry["by_default"], bool):
        raise _Malformed(f"{where}.by_default: must be true or false")
    return ProbeEntry(_name(entry["name"], f"{where}.name"), _name(entry["metric"], f"{where}.metric"),
                      entry["by_default"])


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.isidentifier() or not value.islower():
        raise _Malformed(f"{where}: must be a lower-case word, not {value!r}")
    return value


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _Malformed(f"{where}: must be a non-empty list")
    return _distinct([_name(item, f"{where}[{i}]") for i, item in enumerate(value)], where)


def _distinct(names: list[str], where: str) -> tuple[str, ...]:
    twice = [name for i, name in enumerate(names) if name in names[:i]]
    if twice:
        raise _Malformed(f"{where}: {twice[0]!r} is listed twice")
    return tuple(names)


def _count(value: Any, where: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _Malformed(f"{where}: must be a whole number of at least {least}, not {value!r}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise _Malformed(f"{where}: must be a finite number of at least 0, not {value!r}")
    return float(value)


def _ladder(value: Any, where: str) -> tuple[int, ...]:
    """Sizes, largest first: a non-empty list of positive whole numbers, each below the one before."""
    if not isinstance(value, list) or not value:
        raise _Malformed(f"{where}: must be a non-empty list")
    sizes = tuple(_count(item, f"{where}[{i}]", least=1) for i, item in enumerate(value))
    if any(later >= earlier for earlier, later in zip(sizes, sizes[1:], strict=False)):
        raise _Malformed(f"{where}: must be largest first, each below the one before")
    return sizes

