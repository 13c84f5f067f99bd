"""Strict JSON in: what a node prints is read as RFC 8259 JSON, one reader for the records and
the pair protocol's lines alike.

Python's json reads NaN, Infinity and -Infinity, and turns a number past a float's range (1e400)
into infinity; a node's output never holds them, so each is refused (``NotJson``) instead of
reaching a figure.
"""

from __future__ import annotations

import json
import math
from typing import Any


class NotJson(ValueError):
    """A value JSON does not have: NaN, Infinity, -Infinity, or a number past a float's range."""


def _refuse_constant(token: str) -> Any:
    raise NotJson(f"{token} is no JSON number (a node prints finite numbers only)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJson(f"{text[:40]} is beyond a float's range")
    return value


DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def loads(text: str) -> Any:
    """The JSON value of ``text``. Raises json.JSONDecodeError for text that is no JSON or breaks
    off, NotJson for NaN, Infinity or a float past its range, ValueError for a number Python will
    not read (an integer thousands of digits long), RecursionError for nesting too deep."""
    return DECODER.decode(text)
