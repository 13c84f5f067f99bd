"""Text a node supplied, made safe to show: no control character, escape sequence or bidi
override survives, and no string is longer than its bound.

What is taken out: terminal escape sequences whole (CSI ``ESC [ … final``, OSC ``ESC ] … BEL``
titles and hyperlinks, DCS/SOS/PM/APC strings, two-character ``ESC x``, and their one-byte C1
forms), then every remaining C0 and C1 control character but tab (a line break becomes a space,
so a reason stays one line), every format character (Unicode ``Cf``: bidi overrides and
isolates, zero-width characters), the line and paragraph separators, and lone surrogates (which
no UTF-8 file can hold). It is an allow-list beyond ASCII: what is kept must be printable and
visible, so the code points Unicode marks default-ignorable (the Hangul fillers U+115F, U+1160,
U+3164 and U+FFA0, the variation selectors, U+034F, the soft hyphen...) and the blank Braille
pattern U+2800 go too, and every other space separator (a no-break or ideographic space) becomes
a plain space. A word that mixes Latin letters with look-alike letters of another script
(Cyrillic, Greek, Armenian, Cherokee, Coptic: ``nodе017`` with a Cyrillic ``е``) shows those
letters as escapes (``\\u0435``), so it never passes for the Latin name; fullwidth and
mathematical Latin letters (``ｎｏｄｅ``) are always shown so.
Printable text in one script, ASCII or not, is kept as it is.
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
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn"})
# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt) that are not already
# format characters, and U+2800: characters a terminal or browser draws as nothing.
_INVISIBLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
              (0x2800, 0x2800), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8),
              (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
# Scripts whose letters pass for Latin ones beside them (by the first word of their Unicode names).
_LOOKALIKE_SCRIPTS = frozenset({"CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"})
_LATIN_FORMS = frozenset({"FULLWIDTH", "MATHEMATICAL"})  # Latin letters in another width or style
_WORD = re.compile(r"\S+")


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
    text = "".join(_kept(character) for character in text)
    return text if text.isascii() else _WORD.sub(_unmasked, text)


def _kept(character: str) -> str:
    if character == "\t" or (character.isprintable() and character.isascii()):
        return character
    if character in _LINE_BREAKS:
        return " "
    category = unicodedata.category(character)
    if category in _DROPPED_CATEGORIES or _invisible(ord(character)):
        return ""
    return " " if category == "Zs" else character


def _invisible(code: int) -> bool:
    return any(low <= code <= high for low, high in _INVISIBLE)


def _unmasked(word: re.Match[str]) -> str:
    """A word as it is, unless it mixes ASCII letters with look-alike letters: those then as
    their escapes (backslash, ``u``, four hex digits)."""
    text = word.group()
    if text.isascii():
        return text
    mixed = any("a" <= c.lower() <= "z" for c in text)
    return "".join(_escaped(c) if not c.isascii() and c.isalpha() and _passes_for_latin(c, mixed) else c
                   for c in text)


def _escaped(character: str) -> str:
    code = ord(character)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _passes_for_latin(character: str, beside_latin: bool) -> bool:
    """A fullwidth or mathematical Latin letter always does; a Cyrillic, Greek, ... one beside
    Latin letters does."""
    script = unicodedata.name(character, "").split(" ", 1)[0]
    return script in _LATIN_FORMS or (beside_latin and script in _LOOKALIKE_SCRIPTS)


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """``clean_text`` for a message quoted on one line (a host's error, a stderr line)."""
    return clean_text(text, limit).strip()
