"""What every topology reader shares: reading a file with its size bounded, strict JSON whose
objects remember their line, the errors that name the file and line, and the natural order of
NIC names.

A topology file comes from a person or a tool, never from a node, but a wrong path (a core
dump, a log) or a broken export must still end in one line naming the file and the fix: files
over ``MAX_FILE_BYTES``, lines over ``MAX_LINE_BYTES``, text that is not UTF-8 and JSON nested
past ``MAX_JSON_DEPTH`` are refused before anything is parsed.
"""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from ...errors import InputError
from ...schema.jsonin import DECODER, NotJson

MIB = 1024 * 1024
MAX_FILE_BYTES = 64 * MIB
MAX_LINE_BYTES = 64 * 1024
# Far above any real fabric (the largest InfiniBand subnets hold some 50,000 ports).
MAX_SWITCHES = 100_000
MAX_NODES = 100_000
MAX_JSON_DEPTH = 64
MAX_RAIL = 1023

_NUMBER_RUN = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Where:
    """A place in an input: the file as the user named it, the line (0: the whole file), and in
    a JSON file the path to the value (``planes[0].links[3]``; empty elsewhere)."""

    path: str
    line: int = 0
    pointer: str = ""

    def fail(self, problem: str, fix: str) -> NoReturn:
        """Raise InputError ``path:line: pointer: problem; fix`` (no line: ``path: ...``)."""
        text = f"{self.pointer}: {problem}" if self.pointer else problem
        if self.line:
            raise InputError.at_line(self.path, self.line, text, fix)
        raise InputError(f"{self.path}: {text}; {fix}")

    def at(self, key: str | int, value: Any = None) -> Where:
        """The place of ``key`` inside this value (``value``'s own line where it is an object)."""
        step = f"[{key}]" if isinstance(key, int) else (f".{key}" if self.pointer else key)
        return Where(self.path, line_of(value, self.line), self.pointer + step)


def read_text(path: str) -> str:
    """The text of the file at ``path`` (UTF-8; a byte-order mark dropped). Raises InputError for
    a missing, unreadable or non-regular file, one over MAX_FILE_BYTES, text that is not UTF-8,
    and a line over MAX_LINE_BYTES (naming the line)."""
    if os.path.exists(path) and not os.path.isfile(path):  # a folder, or a FIFO that would block the read
        Where(path).fail("not a regular file", "give the path of a topology file")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        Where(path).fail(f"cannot read it ({error.strerror or error})", "check the path and its permissions")
    if len(data) > MAX_FILE_BYTES:
        Where(path).fail(f"larger than {MAX_FILE_BYTES // MIB} MiB, too large for a topology file",
                         "give the topology itself (an ibnetdiscover capture, topology.conf or its JSON)")
    return decode_text(data, path)


def decode_text(data: bytes, path: str) -> str:
    """``data`` as text, checked as read_text checks a file's bytes. Raises InputError."""
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        Where(path, line).fail("a NUL byte: this is no text file", "give a topology file")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        Where(path, line).fail(f"not UTF-8 text (byte {data[error.start]:#04x})", "save the file as UTF-8")
    for number, line_text in enumerate(text.split("\n"), start=1):
        # len() counts characters, at most 4 bytes each: only a long line is encoded to be measured
        if len(line_text) > MAX_LINE_BYTES // 4 and len(line_text.encode("utf-8")) > MAX_LINE_BYTES:
            Where(path, number).fail(f"a line longer than {MAX_LINE_BYTES // 1024} KiB",
                                     "give the topology file itself, one entry per line")
    return text


class Located(dict):  # type: ignore[type-arg]
    """A JSON object that remembers the line it starts on (``line``)."""

    line: int = 0


def load_json(text: str, path: str) -> Any:
    """The JSON value of ``text`` (the file ``path``), strictly: no NaN or Infinity, no key twice
    in one object, no nesting past MAX_JSON_DEPTH; each object a ``Located`` dict. Raises
    InputError naming the line (and column) of the problem."""
    newlines = [index for index, character in enumerate(text) if character == "\n"]
    decoder = _located_decoder(newlines, path)
    try:
        value, end = decoder.raw_decode(text, _skip_space(text, 0))
    except json.JSONDecodeError as error:
        Where(path, error.lineno).fail(f"not valid JSON (column {error.colno}: {error.msg})", "fix the JSON")
    except NotJson as error:
        Where(path).fail(f"not strict JSON: {error}", "write finite numbers only")
    except (RecursionError, ValueError) as error:
        Where(path).fail(f"JSON this reader refuses: {str(error)[:120]}",
                         f"nest at most {MAX_JSON_DEPTH} deep and keep numbers short")
    if _skip_space(text, end) != len(text):
        line = bisect.bisect_left(newlines, end) + 1
        Where(path, line).fail("more after the JSON value", "give one JSON document per file")
    return value


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\r\n":
        index += 1
    return index


def _located_decoder(newlines: list[int], path: str) -> json.JSONDecoder:
    """A JSONDecoder (the pure-Python scanner: the C one cannot be told where objects start)
    whose objects are Located, duplicate keys refused and nesting bounded."""
    decoder = json.JSONDecoder(parse_float=DECODER.parse_float, parse_constant=DECODER.parse_constant)
    depth = [0]

    def parse_object(state: tuple[str, int], strict: bool, scan_once: Callable[..., Any], object_hook: Any,
                     object_pairs_hook: Any, memo: dict | None = None) -> tuple[Located, int]:
        text, start = state
        line = bisect.bisect_left(newlines, start) + 1
        depth[0] += 1
        if depth[0] > MAX_JSON_DEPTH:
            raise ValueError(f"objects nested more than {MAX_JSON_DEPTH} deep (line {line})")
        try:
            return json.decoder.JSONObject(state, strict, scan_once, None, _pairs_to_located(line, path), memo)
        finally:
            depth[0] -= 1

    decoder.parse_object = parse_object  # type: ignore[assignment]
    decoder.memo = {}  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    return decoder


def _pairs_to_located(line: int, path: str) -> Callable[[list[tuple[str, Any]]], Located]:
    def build(pairs: list[tuple[str, Any]]) -> Located:
        located = Located()
        located.line = line
        for key, value in pairs:
            if key in located:
                Where(path, line).fail(f"the key {key!r} is given twice in one object", "keep one of them")
            located[key] = value
        return located

    return build


def line_of(value: Any, default: int = 0) -> int:
    """The line a JSON object started on (``default`` for any other value)."""
    return value.line if isinstance(value, Located) else default


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sorts NIC names as a person would: mlx5_2 before mlx5_10."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _NUMBER_RUN.split(name) if part)


def rails_from_json(value: Any, where: Where) -> dict[str, int]:
    """A rails map (NIC name -> rail number) from its JSON ``value`` (found at ``where``). Raises
    InputError where it is no object of NIC names to rail numbers."""
    if not isinstance(value, Mapping):
        where.fail("no JSON object of NIC names to rails", 'write it as {"mlx5_0": 0, "mlx5_1": 1, ...}')
    rails: dict[str, int] = {}
    for name, rail in value.items():
        if not name or not name.isprintable() or len(name) > 64:
            where.fail(f"{name[:64]!r} is no NIC name", "use the HCA or interface name, e.g. mlx5_0")
        if not is_rail(rail):
            where.at(name).fail(f"{rail!r} is no rail number", f"give a whole number from 0 to {MAX_RAIL}")
        rails[name] = rail
    return rails


def is_rail(value: Any) -> bool:
    """True for a rail number: a whole number from 0 to MAX_RAIL (a bool is none)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RAIL


def load_rails_map(path: str) -> dict[str, int]:
    """The rails map in the JSON file ``path`` (NIC name -> rail, e.g. ``{"mlx5_0": 0}``).
    Raises InputError naming the file (and line) where it is none."""
    value = load_json(read_text(path), path)
    return rails_from_json(value, Where(path, line_of(value)))


TOPOLOGY_SCHEMA = "gpudiag.topology/1"
IBNETDISCOVER, SLURM, TOPOLOGY_JSON, LLDP = "ibnetdiscover", "slurm", "json", "lldp"
FORMATS = ("an ibnetdiscover capture, a Slurm topology.conf (topology/tree), a gpudiag.topology/1 JSON file or an "
           "lldpctl -f json capture")
_IBNETDISCOVER_MARK = re.compile(r'^\s*(vendid=0x|Switch\s+\d+\s+"S-|Ca\s+\d+\s+"H-)', re.MULTILINE)
_SLURM_MARK = re.compile(r"^\s*switchname\s*=", re.MULTILINE | re.IGNORECASE)


def detect(path: str, text: str) -> tuple[str, Any]:
    """Which format ``text`` (the file ``path``) is in, by its content, and its JSON value (None
    for a text format). Raises InputError naming the formats where it is none of them."""
    if text.lstrip().startswith(("{", "[")):
        value = load_json(text, path)
        where = Where(path, line_of(value))
        if isinstance(value, Mapping) and value.get("schema") == TOPOLOGY_SCHEMA:
            return TOPOLOGY_JSON, value
        if isinstance(value, Mapping) and "schema" in value:
            where.fail(f"the schema {str(value['schema'])[:60]!r} is not {TOPOLOGY_SCHEMA}",
                       f'write "schema": "{TOPOLOGY_SCHEMA}"')
        if isinstance(value, Mapping) and "lldp" in value:
            return LLDP, value
        where.fail("JSON of no topology format gpudiag reads", f"give {FORMATS}")
    if _IBNETDISCOVER_MARK.search(text):
        return IBNETDISCOVER, None
    if _SLURM_MARK.search(text):
        return SLURM, None
    Where(path).fail("no topology format gpudiag reads", f"give {FORMATS}")
