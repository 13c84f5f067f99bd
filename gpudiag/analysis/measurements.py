"""One compared measurement: an ok result of a compared probe, with its host, device and GPU, its
value and spread, and the baseline key it shares with its kind (read by gpudiag.analysis.suspects,
compared by every reference)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..records import device_index

# The device of a node median (gpudiag.analysis.nodes): no GPU of its own, and no device a node
# can print (a record's device has no space).
NODE_MEDIAN = "node median"
# The devices of a host-wide measurement (no GPU of its own).
HOST_DEVICES = ("cpu", "host", NODE_MEDIAN)


# Each key's parameters but ``mode``, as text (Measurement.repeat_key): a key fixes its parameters.
_PARAMS_TEXT: dict[str, str] = {}
_PARAMS_TEXT_MAX = 100_000


class KeyInfo(NamedTuple):
    """What every measurement of one baseline key (and GPU model) shares: one object per key."""

    key: str
    probe: str
    metric: str
    params: Mapping[str, Any]
    unit: str | None
    gpu_model: str | None


class Measurement(NamedTuple):
    """One ok result of a compared probe, with where it came from and its baseline key (``info``:
    the key, probe, metric, parameters, unit and GPU model it shares with its kind).

    A NamedTuple of six rather than a dataclass: a 10,000-node sweep makes a million of them."""

    host: str
    device: str
    gpu_uuid: str | None
    info: KeyInfo
    value: float
    # The spread of the record's own samples (a fraction of its value; None: not given).
    cv: float | None = None

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def probe(self) -> str:
        return self.info.probe

    @property
    def metric(self) -> str:
        return self.info.metric

    @property
    def params(self) -> Mapping[str, Any]:
        return self.info.params

    @property
    def unit(self) -> str | None:
        return self.info.unit

    @property
    def gpu_model(self) -> str | None:
        return self.info.gpu_model

    @property
    def gpu(self) -> int | None:
        return None if self.device in HOST_DEVICES else device_index(self.device)

    @property
    def repeat_key(self) -> tuple[str, str, str, str, str]:
        """What a re-test must match: the same host, device, probe, metric and parameters except
        ``mode``."""
        info = self.info
        text = _PARAMS_TEXT.get(info.key)
        if text is None:  # a key names its parameters: one text per key, however many measurements
            if len(_PARAMS_TEXT) >= _PARAMS_TEXT_MAX:
                _PARAMS_TEXT.clear()
            text = repr({k: v for k, v in sorted(info.params.items()) if k != "mode"})
            _PARAMS_TEXT[info.key] = text
        return self.host, self.device, info.probe, info.metric, text


def by_key(found: Iterable[Measurement]) -> dict[str, list[Measurement]]:
    """``found`` by baseline key, each key's in order: one pass over a sweep's results that
    every later pass needing a key's results reads (references, groups, typical clock costs)."""
    grouped: dict[str, list[Measurement]] = {}
    for m in found:
        key = m.info.key
        same = grouped.get(key)
        if same is None:
            grouped[key] = [m]
        else:
            same.append(m)
    return grouped


def values_by_key(found: Iterable[Measurement]) -> dict[str, list[float]]:
    """The values of ``found`` by baseline key, each key's in order (one host's, as it is read:
    gpudiag.analysis.suspects.SweepReader)."""
    values: dict[str, list[float]] = {}
    for m in found:
        key = m.info.key
        same = values.get(key)
        if same is None:
            values[key] = [m.value]
        else:
            same.append(m.value)
    return values


@dataclass
class KeyValues:
    """One key's values over a sweep, in the order of its measurements (``by_key``'s), and how
    many each host gave (host -> count): joined from the values each host's reading kept, so that
    the references of a key of 80,000 values need not read them out of its measurements."""

    values: list[float] = field(default_factory=list)
    per_host: dict[str, int] = field(default_factory=dict)
