"""What a pair peer sends, checked: strict JSON (no NaN, Infinity or a number past a float's
range) and every field of a message of the expected type and range, so a stranger's or a broken
peer's message is a ``ProtocolError`` naming the field, never an exception deeper in a backend."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

# Strings a peer sends (host names, reasons) are cut to this many characters.
MAX_TEXT = 1000


class ProtocolError(Exception):
    """The peer said something this protocol does not expect; the message says what."""


def strict_json(text: str | bytes) -> Any:
    """The JSON value of ``text``; NaN, Infinity and -Infinity are refused (Python's json takes
    them), and so is a number too large for a float (1e400). Raises ProtocolError."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as error:
        raise ProtocolError(f"not a JSON message: {bytes(text[:80]) if isinstance(text, bytes) else text[:80]!r} "
                            f"({error})") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond a float's range")
    return value


def expect_str(message: Mapping[str, Any], key: str, *, limit: int = MAX_TEXT, optional: bool = False) -> Any:
    """``message[key]`` as a string of at most ``limit`` characters (None when ``optional`` and
    absent or null). Raises ProtocolError naming the field."""
    value = message.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise ProtocolError(f"{key!r} must be a string of at most {limit} characters, not {_shown(value)}")
    return value


def expect_int(message: Mapping[str, Any], key: str, low: int, high: int, *, optional: bool = False) -> Any:
    """``message[key]`` as an integer in [low, high] (None when ``optional`` and absent or null).
    Raises ProtocolError naming the field."""
    value = message.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"{key!r} must be an integer from {low} to {high}, not {_shown(value)}")
    return value


def expect_number(message: Mapping[str, Any], key: str, low: float, high: float, *, optional: bool = False,
                  above: bool = False) -> Any:
    """``message[key]`` as a finite number in [low, high] ((low, high] with ``above``); None
    when ``optional`` and absent or null. Raises ProtocolError naming the field."""
    value = message.get(key)
    if value is None and optional:
        return None
    if not is_number(value) or not (low < value if above else low <= value) or value > high:
        raise ProtocolError(f"{key!r} must be a number from {low:g} to {high:g}, not {_shown(value)}")
    return float(value)


def expect_numbers(message: Mapping[str, Any], key: str, high: float, limit: int = 100_000) -> list[float]:
    """``message[key]`` as a list of at most ``limit`` finite numbers in [0, high]."""
    values = message.get(key)
    if not isinstance(values, list) or len(values) > limit or not all(is_number(v) and 0 <= v <= high
                                                                        for v in values):
        raise ProtocolError(f"{key!r} must be a list of at most {limit} numbers from 0 to {high:g}")
    return [float(value) for value in values]


def expect_choice(message: Mapping[str, Any], key: str, choices: Sequence[str]) -> str:
    value = message.get(key)
    if not isinstance(value, str) or value not in choices:
        raise ProtocolError(f"{key!r} must be one of {', '.join(choices)}, not {_shown(value)}")
    return value


def expect_mapping(message: Mapping[str, Any], key: str, limit: int = 1024) -> dict[str, Any]:
    value = message.get(key)
    if not isinstance(value, dict) or len(value) > limit:
        raise ProtocolError(f"{key!r} must be an object of at most {limit} entries, not {_shown(value)}")
    return value


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: object) -> str:
    text = json.dumps(value)[:40] if isinstance(value, str | int | float | bool | type(None)) else type(value).__name__
    return text
