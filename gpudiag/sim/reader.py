"""Reading a fleet file's JSON: typed fields, each error one line naming the file and the field path."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import InputError

# The default of a field that must be there.
ABSENT = object()


class FieldReader:
    """Reads typed fields of the fleet file; each error names the file and the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, problem: str) -> InputError:
        return InputError(f"{self.source}: {path or '(top level)'}: {problem}")

    def keys(self, data: Any, path: str, allowed: Sequence[str], required: Sequence[str]) -> None:
        if not isinstance(data, dict):
            raise self.error(path, f"expected a JSON object, got {json_type(data)}")
        for key in data:
            if key not in allowed:
                raise self.error(join_path(path, key), f"unknown field; allowed: {', '.join(allowed)}")
        for key in required:
            if key not in data:
                raise self.error(join_path(path, key), f"missing (required: {', '.join(required)})")

    def value(self, data: dict[str, Any], key: str, default: Any, kind: type, path: str = "") -> Any:
        value = data.get(key, default)
        if value is ABSENT:
            raise self.error(join_path(path, key), "missing")
        wanted = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}[kind]
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = is_number if kind is float else isinstance(value, kind) and not isinstance(value, bool)
        if not ok:
            raise self.error(join_path(path, key), f"expected {wanted}, got {json_type(value)} {json.dumps(value)}")
        return value

    def integer(self, data: dict[str, Any], key: str, default: Any = ABSENT, path: str = "",
                low: int | None = None, high: int | None = None) -> int:
        value: int = self.value(data, key, default, int, path)
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"in {low}..{high}"
            raise self.error(join_path(path, key), f"{value} is out of range; it must be {bounds}")
        return value

    def text(self, data: dict[str, Any], key: str, default: Any = ABSENT, path: str = "") -> str:
        value: str = self.value(data, key, default, str, path)
        if not value.strip():
            raise self.error(join_path(path, key), "must not be empty")
        return value

    def factor(self, data: dict[str, Any], key: str, default: Any, path: str) -> float:
        value = float(self.value(data, key, default, float, path))
        if not 0.0 < value <= 1.0:
            raise self.error(join_path(path, key), f"{json.dumps(data[key])} is not in (0, 1]")
        return value

    def flag(self, data: dict[str, Any], key: str, default: bool, path: str) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(join_path(path, key),
                             f"expected true or false, got {json_type(value)} {json.dumps(value)}")
        return value


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def one_of(read: FieldReader, entry: dict[str, Any], key: str, path: str, choices: Sequence[Any], what: str) -> Any:
    """``entry[key]`` when it is one of ``choices``; else the reader's error naming ``path.key``,
    ``what`` it should be and the choices."""
    value = entry[key]
    if isinstance(value, bool) or value not in choices:
        raise read.error(f"{path}.{key}", f"{json.dumps(value)} is not {what}; choose from "
                         f"{', '.join(str(choice) for choice in choices)}")
    return value
