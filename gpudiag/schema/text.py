"""Text a node supplied, made safe to show: no control character, escape sequence or bidi
override survives, and no string is longer than its bound.

What is taken out: terminal escape sequences whole (CSI ``ESC [ … final``, OSC ``ESC ] … BEL``
titles and hyperlinks, DCS/SOS/PM/APC strings, two-character ``ESC x``, and their one-byte C1
forms), then every remaining C0 and C1 control character but tab (a line break becomes a space,
so a reason stays one line), every format character (Unicode ``Cf``: bidi overrides and
isolates, zero-width characters), the line and paragraph separators, and lone surrogates (which
no UTF-8 file can hold). Printable text, ASCII or not, is kept as it is.
"""

from __future__ import annotations

import re
import unicodedata

# Bounds (characters) of the strings a node supplies, by what they are.
TOKEN_CHARS = 128  # a name, unit, status, version, UUID, bus id
TEXT_CHARS = 512  # a fact or a detail (a CPU model, an OS name, a log line)
REASON_CHARS = 2000  # why a probe could not measure (an error text)
KEY_CHARS = 64  # a key of a record's params or details
ELLIPSIS = "…"

_ESCAPE_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (the final byte may be cut off)
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # any other ESC sequence (and a lone ESC)
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # the C1 forms of CSI, OSC and the strings
    r"|\x9d[^\x07\x1b\x9c]*(?:\x07|\x9c)?"
    r"|[\x90\x98\x9e\x9f][^\x1b\x9c]*\x9c?"
)
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x85\u2028\u2029")
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def clean_text(text: str, limit: int = TEXT_CHARS) -> str:
    """``text`` without control characters and escape sequences (see the module docstring), cut
    to ``limit`` characters (the last one then ``…``)."""
    if not (text.isascii() and text.isprintable()):
        text = _cleaned(text)
    if len(text) > limit:
        return text[:max(0, limit - 1)] + ELLIPSIS
    return text


def is_clean(text: str) -> bool:
    """True when ``clean_text`` would leave ``text`` as it is (whatever its length)."""
    return (text.isascii() and text.isprintable()) or _cleaned(text) == text


def _cleaned(text: str) -> str:
    text = _ESCAPE_SEQUENCES.sub("", text)
    return "".join(_kept(character) for character in text)


def _kept(character: str) -> str:
    if character == "\t" or (character.isprintable() and character.isascii()):
        return character
    if character in _LINE_BREAKS:
        return " "
    return "" if unicodedata.category(character) in _DROPPED_CATEGORIES else character


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """``clean_text`` for a message quoted on one line (a host's error, a stderr line)."""
    return clean_text(text, limit).strip()
