"""Report text for a terminal: each long line wrapped to the terminal's width with a hanging indent,
broken only between words, never inside a host name, a number with its unit, or a pair of hosts.

Off a terminal (a pipe, a file, a log) nothing is wrapped: one finding stays one line, so that
``grep node017`` finds all of it (gpudiag.cli.textout decides which).
"""

from __future__ import annotations

import re

# Tokens glued to the word before them: a unit after its number ("612.0 TFLOP/s", "-17.5 %"), the
# far end of a pair after its arrow.
_UNIT = re.compile(r"^(%|[A-Za-z]{1,3}/s|[TGMK]?(?:FLOP|B|bit)/s|[MGK]?Hz|MiB|GiB|KiB|GB|MB|W|°?C|s|ms|lanes|x\d+)"
                   r"[,;:)]*$")
_NUMBER = re.compile(r"^[(]?[-+]?\d[\d.,]*$")
_ARROWS = ("↔", "->", "→", "<->")
# The hanging indent of a wrapped line's continuation, past the line's own indent.
HANG = 4


def wrap_text(text: str, width: int) -> str:
    """``text`` with every line longer than ``width`` wrapped (see the module docstring); lines
    that fit, and the line breaks already there, are kept as they are."""
    return "\n".join(wrapped for line in text.split("\n") for wrapped in wrap_line(line, width))


def wrap_line(line: str, width: int) -> list[str]:
    """One line as the lines that show it within ``width`` columns. A word longer than the room a
    line has is put on a line of its own, whole: a cut host name or number is worse than a long line."""
    if len(line) <= width:
        return [line]
    indent = line[:len(line) - len(line.lstrip(" "))]
    hang = indent + " " * HANG
    lines: list[str] = []
    current = ""
    for word in _words(line.strip(" ")):
        if not current:
            current = indent + word
        elif len(current) + 1 + len(word) > width:
            lines.append(current)
            current = hang + word
        else:
            current += " " + word
    return [*lines, current] if current else lines


def _words(text: str) -> list[str]:
    """The words of ``text`` between which a line may break; a unit stays with its number and a
    pair's arrow with both its ends. A wrapped line's runs of spaces become one."""
    words: list[str] = []
    glue_next = False
    for word in text.split():
        if words and (glue_next or word in _ARROWS or (_UNIT.match(word) and _NUMBER.match(words[-1]))):
            words[-1] = f"{words[-1]} {word}"
        else:
            words.append(word)
        glue_next = word in _ARROWS
    return words
