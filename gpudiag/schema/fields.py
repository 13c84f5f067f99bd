"""The kinds of value a record's field may hold, each a small frozen object that checks a value
(parsed JSON) and gives it back cleaned, or raises FieldError saying where and what was expected.

Two ways to fail: a value of the wrong *type* (a string where a number belongs, a list where a
mapping does) means the bundle and the controller disagree about the record — nothing of the
node can be trusted; a value of the right type *out of its range* (a negative count, a PCIe
width of 1e308) is one bad reading. FieldError says which (``out_of_range``).

Every string is cleaned (gpudiag.schema.text) and bounded; every number is finite (the decoder
refuses NaN and Infinity, and a float that overflowed to infinity is refused here); every list
and mapping is bounded in size and depth. Fields a table does not declare are kept as ``Json``:
any JSON value, cleaned and bounded the same way, read by no rule.

The controller reads some 300 records a node and 10,000 nodes a sweep, so the common case (a
well-formed value) takes a few type checks: the path of a field is only spelled out when a check
fails (``FieldError.under``), and clean ASCII strings are returned as they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .text import KEY_CHARS, TEXT_CHARS, TOKEN_CHARS, clean_text

# A JSON value nested deeper than this, or a list or mapping larger, is no record of ours.
MAX_DEPTH = 8
MAX_ITEMS = 4096
# No reading of ours needs more than an unsigned 64-bit counter; a longer integer could not even be
# written back as text (Python limits int-to-str conversion).
MAX_INTEGER = 2**64
_WORDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
          dict: "an object", type(None): "null"}


class FieldError(ValueError):
    """A field's value is not what its kind allows: ``path`` (e.g. ``details.links[3].state``),
    what was ``expected``, what it ``got`` (the value, shortened), and whether only its range was
    wrong (``out_of_range``)."""

    def __init__(self, path: str, expected: str, got: Any, out_of_range: bool = False) -> None:
        self.path = path
        self.expected = expected
        self.got = got
        self.out_of_range = out_of_range
        super().__init__(f"field {path!r} must be {expected}, got {shown(got)}" if path
                         else f"a record must be {expected}, got {shown(got)}")

    def under(self, parent: str) -> FieldError:
        """The same error, its path (a key, or ``[index]``, and what is below it) seen from
        ``parent``'s."""
        path = parent + self.path if self.path.startswith("[") else join(parent, self.path)
        return FieldError(path, self.expected, self.got, self.out_of_range)


def shown(value: Any) -> str:
    """A value as an error names it: its JSON type and, for a scalar, the value itself (cleaned
    and cut short)."""
    kind = _WORDS.get(type(value), type(value).__name__)
    if isinstance(value, str):
        return f"{kind} {clean_text(value, 40)!r}"
    if isinstance(value, bool):
        return f"{kind} {str(value).lower()}"
    if isinstance(value, float):
        return f"{kind} {value!r}"
    if isinstance(value, int):
        return f"{kind} {value}" if abs(value) < 10**30 else "a huge integer"
    return kind


class Kind(Protocol):
    """What a field may hold."""

    def check(self, value: Any, path: str) -> Any:
        """``value`` cleaned; raises FieldError (naming ``path``, the field's place)."""
        ...

    def describe(self) -> str:
        """What is expected, in words (for errors)."""
        ...


def is_number(value: Any) -> bool:
    """A JSON number: int or float, not a boolean."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A JSON number that is neither NaN nor infinite (a figure a report can draw)."""
    return is_number(value) and math.isfinite(value)


def join(path: str, key: Any) -> str:
    """The path of ``key`` (a mapping's key, or a list's index) under ``path``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


@dataclass(frozen=True)
class Number:
    """A finite number in ``low``..``high`` (in ``unit``); ``whole``: an integer; ``nullable``:
    null allowed."""

    low: float = 0.0
    high: float = math.inf
    unit: str = ""
    whole: bool = False
    nullable: bool = False

    def check(self, value: Any, path: str) -> Any:
        kind = type(value)
        if kind is int:
            if self.low <= value <= self.high and -MAX_INTEGER <= value <= MAX_INTEGER:
                return value
        elif kind is float and not self.whole:
            if self.low <= value <= self.high and math.isfinite(value):
                return value
        elif value is None and self.nullable:
            return None
        raise self._error(value, path)

    def _error(self, value: Any, path: str) -> FieldError:
        if not is_number(value) or (self.whole and not isinstance(value, int)):
            return FieldError(path, self.describe(), value)
        if isinstance(value, float) and not math.isfinite(value):
            return FieldError(path, self.describe(), value)
        return FieldError(path, self.describe(), value, out_of_range=True)

    def describe(self) -> str:
        what = "an integer" if self.whole else "a number"
        if not math.isfinite(self.low) and not math.isfinite(self.high):
            return f"a finite {what.split()[-1]}" + (" or null" if self.nullable else "")
        unit = f" {self.unit}" if self.unit else ""
        span = f" from {self.low:g}" + (f" to {self.high:g}{unit}" if math.isfinite(self.high) else f"{unit} up")
        return what + span + (" or null" if self.nullable else "")


@dataclass(frozen=True)
class Text:
    """A string, cleaned and cut to ``limit``; ``pattern``: the whole string must match it (a
    token: a device name, a UUID); ``choices``: one of them; ``nullable``: null allowed;
    ``empty``: the empty string allowed."""

    limit: int = TEXT_CHARS
    nullable: bool = True
    pattern: str | None = None
    choices: tuple[str, ...] = ()
    empty: bool = True

    def check(self, value: Any, path: str) -> Any:
        if type(value) is str:
            if self.choices:
                if value in self.choices:
                    return value
                raise FieldError(path, self.describe(), value)
            if self.pattern is not None:
                if len(value) <= self.limit and _compiled(self.pattern).fullmatch(value):
                    return value
                raise FieldError(path, self.describe(), value)
            if not self.empty and not value.strip():
                raise FieldError(path, self.describe(), value)
            if len(value) <= self.limit and value.isascii() and value.isprintable():
                return value
            return clean_text(value, self.limit)
        if value is None and self.nullable:
            return None
        raise FieldError(path, self.describe(), value)

    def describe(self) -> str:
        if self.choices:
            what = "one of " + ", ".join(self.choices)
        elif self.pattern is not None:
            what = f"a name of at most {self.limit} characters ({self.pattern})"
        else:
            what = "a non-empty string" if not self.empty else "a string"
        return what + (" or null" if self.nullable else "")


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    found = _PATTERNS.get(pattern)
    if found is None:
        found = _PATTERNS[pattern] = re.compile(pattern)
    return found


@dataclass(frozen=True)
class Flag:
    """true or false (or null, ``nullable``)."""

    nullable: bool = True

    def check(self, value: Any, path: str) -> Any:
        if isinstance(value, bool) or (value is None and self.nullable):
            return value
        raise FieldError(path, self.describe(), value)

    def describe(self) -> str:
        return "true or false" + (" or null" if self.nullable else "")


def _key(key: str) -> str:
    """A mapping's key as it is kept: cleaned and bounded (most are short ASCII names)."""
    if len(key) <= KEY_CHARS and key.isascii() and key.isprintable():
        return key
    return clean_text(key, KEY_CHARS)


@dataclass(frozen=True)
class ListOf:
    """A list of at most ``max_items`` items, each of kind ``item``."""

    item: Kind
    max_items: int = MAX_ITEMS
    nullable: bool = True

    def check(self, value: Any, path: str) -> Any:
        if value is None and self.nullable:
            return None
        if not isinstance(value, list):
            raise FieldError(path, self.describe(), value)
        if len(value) > self.max_items:
            raise FieldError(path, self.describe(), value, out_of_range=True)
        checked = []
        check = self.item.check
        for index, item in enumerate(value):
            try:
                checked.append(check(item, f"[{index}]"))
            except FieldError as error:
                raise error.under(path) from None
        return checked

    def describe(self) -> str:
        return f"a list of at most {self.max_items} items, each {self.item.describe()}"


@dataclass(frozen=True)
class MapOf:
    """A mapping of at most ``max_items`` string keys, each value of kind ``value``."""

    value: Kind
    max_items: int = 256
    nullable: bool = True

    def check(self, value: Any, path: str) -> Any:
        if value is None and self.nullable:
            return None
        if not isinstance(value, dict):
            raise FieldError(path, self.describe(), value)
        if len(value) > self.max_items:
            raise FieldError(path, self.describe(), value, out_of_range=True)
        checked = {}
        check = self.value.check
        for key, item in value.items():
            try:
                checked[_key(key)] = check(item, key)
            except FieldError as error:
                raise error.under(path) from None
        return checked

    def describe(self) -> str:
        return f"an object of at most {self.max_items} entries, each {self.value.describe()}"


@dataclass(frozen=True)
class Shape:
    """A mapping whose declared ``fields`` have their kinds; any other key holds ``others`` (by
    default any JSON value, cleaned and bounded). A declared field that is absent stays absent,
    unless it is ``required``."""

    fields: Mapping[str, Kind] = field(default_factory=dict)
    others: Kind | None = None
    nullable: bool = False
    required: tuple[str, ...] = ()

    def check(self, value: Any, path: str) -> Any:
        if value is None and self.nullable:
            return None
        if not isinstance(value, dict):
            raise FieldError(path, self.describe(), value)
        if not value and not self.required:
            return {}
        if len(value) > MAX_ITEMS:
            raise FieldError(path, self.describe(), value, out_of_range=True)
        for name in self.required:
            if name not in value:
                raise FieldError(join(path, name), "a value (the field is required)", None)
        others = self.others or JSON
        declared = self.fields
        checked = {}
        for key, item in value.items():
            try:
                checked[key if len(key) <= KEY_CHARS and key.isascii() and key.isprintable() else _key(key)] = \
                    (declared.get(key) or others).check(item, key)
            except FieldError as error:
                raise error.under(path) from None
        return checked

    def describe(self) -> str:
        return "an object"


@dataclass(frozen=True)
class Json:
    """Any JSON value (a field no rule reads): strings cleaned and cut to ``limit``, numbers
    finite, lists and mappings at most MAX_ITEMS long and MAX_DEPTH deep."""

    limit: int = TEXT_CHARS

    def check(self, value: Any, path: str) -> Any:
        try:
            return self._checked(value, 0)
        except FieldError as error:
            raise FieldError(path + error.path, error.expected, error.got, error.out_of_range) from None

    def _checked(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            return value if len(value) <= self.limit and value.isascii() and value.isprintable() \
                else clean_text(value, self.limit)
        if value is None or kind is bool:
            return value
        if kind is int:
            if not -MAX_INTEGER <= value <= MAX_INTEGER:
                raise FieldError("", f"an integer of at most {MAX_INTEGER}", value, out_of_range=True)
            return value
        if kind is float:
            if not math.isfinite(value):
                raise FieldError("", "a finite number", value)
            return value
        if depth >= MAX_DEPTH or kind not in (list, dict):
            raise FieldError("", f"JSON nested at most {MAX_DEPTH} deep", value)
        if len(value) > MAX_ITEMS:
            raise FieldError("", f"at most {MAX_ITEMS} items", value, out_of_range=True)
        if kind is list:
            return self._list(value, depth)
        checked = {}
        for key, item in value.items():
            try:
                checked[_key(key)] = self._checked(item, depth + 1)
            except FieldError as error:
                raise FieldError(f".{key}{error.path}", error.expected, error.got, error.out_of_range) from None
        return checked

    def _list(self, value: list[Any], depth: int) -> list[Any]:
        if all(type(item) is float for item in value):  # a per-SM array: checked at C speed
            if all(map(math.isfinite, value)):
                return value
        elif all(type(item) is int for item in value) and all(-MAX_INTEGER <= item <= MAX_INTEGER for item in value):
            return value
        checked = []
        for index, item in enumerate(value):
            try:
                checked.append(self._checked(item, depth + 1))
            except FieldError as error:
                raise FieldError(f"[{index}]{error.path}", error.expected, error.got, error.out_of_range) from None
        return checked

    def describe(self) -> str:
        return "any JSON value"


JSON = Json()
# The common kinds of the tables.
COUNT = Number(whole=True)
OPTIONAL_COUNT = Number(whole=True, nullable=True)
TOKEN = Text(limit=TOKEN_CHARS)
NAME = Text(limit=TEXT_CHARS)
