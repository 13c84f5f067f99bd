"""Strict JSON out: every JSON the controller writes is RFC 8259 JSON.

Python's json writes NaN and Infinity as bare tokens no other reader accepts. Nothing a node
prints can carry them past the boundary (gpudiag.schema.recordcheck refuses them), but a figure the
controller computes could still be non-finite (a ratio of zeros): such a value is written as
null, and ``allow_nan=False`` makes sure nothing else slips through.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, Infinity) inside it replaced by None; mappings
    and lists copied only where they change."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)`` as strict JSON: a non-finite number is null. Raises what
    json.dumps raises for a value JSON cannot hold (an object, a circular reference)."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:  # a NaN or an Infinity somewhere (the rare case): written as null
        return json.dumps(finite(value), allow_nan=False, **options)
