"""Checks that a narrow rendering of rich tables lost nothing but the columns its captions name.

The oracle is the same tables rendered wide (WIDE characters), where every cell is one line: each
word of each cell there must appear whole in the narrow rendering, unless its column is named as
left out in a caption ("h2d GB/s, d2h GB/s left out at 80 columns; ...").
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable

from rich.cells import cell_len
from rich.console import Console

WIDTHS = (60, 80, 100, 132)
WIDE = 400
BOX = re.compile(r"[│┃]")


def render(draw: Callable[[Console], None], width: int) -> str:
    """What ``draw`` prints on a console ``width`` characters wide that is not a terminal."""
    stream = io.StringIO()
    draw(Console(width=width, file=stream, force_terminal=False))
    return stream.getvalue()


def table_cells(text: str) -> list[tuple[str, str]]:
    """(column title, cell line) for every cell line of every table in ``text``, rendered wide
    enough that no header wraps."""
    cells: list[tuple[str, str]] = []
    titles: list[str] = []
    for line in text.splitlines():
        if line.startswith("┃"):
            titles = [part.strip() for part in line.split("┃")[1:-1]]
        elif line.startswith("│"):
            cells.extend(zip(titles, (part.strip() for part in line.split("│")[1:-1]), strict=True))
    return cells


def left_out(text: str, titles: Iterable[str]) -> set[str]:
    """Which of ``titles`` the captions of ``text`` name as left out ("a, b left out at N columns",
    after any other caption)."""
    flat = " ".join(text.split())
    known = sorted({title for title in titles if title}, key=len, reverse=True)
    found: set[str] = set()
    for match in re.finditer(r"┘([^┘]*?) left out at \d+ columns", flat):
        segment = match.group(1)
        starts = [i for i in range(len(segment)) if segment[i - 1] == " "]
        found |= next((parsed for i in starts if (parsed := _title_list(segment[i:], known))), set())
    return found


def _title_list(text: str, known: list[str]) -> set[str] | None:
    """``text`` read as "title, title, ..." of ``known`` titles (the longest first), else None."""
    found = set()
    while text:
        title = next((t for t in known if text.startswith(t) and text[len(t):][:2] in ("", ", ")), None)
        if title is None:
            return None
        found.add(title)
        text = text[len(title) + 2:]
    return found or None


def words(text: str) -> Counter[str]:
    """Every word of ``text``, box lines taken for spaces."""
    return Counter(BOX.sub(" ", text).split())


def assert_readable(narrow: str, wide: str, width: int, names: Iterable[str] = (),
                    folded: Collection[str] = ()) -> None:
    """``narrow`` fits ``width``, cuts nothing short with an ellipsis, shows each of ``names``
    whole, and every word of every cell of ``wide`` whose column it does not name as left out
    (but for the free-text columns titled in ``folded``, whose long words may fold)."""
    too_wide = [line for line in narrow.splitlines() if cell_len(line) > width]
    assert not too_wide, too_wide
    assert "…" not in narrow
    for name in names:
        assert re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", narrow), name
    cells = table_cells(wide)
    dropped = left_out(narrow, (title for title, _ in cells))
    expected = Counter(word for title, cell in cells if title not in dropped and title not in folded
                       for word in cell.split())
    missing = expected - words(narrow)
    assert not missing, (width, dropped, missing)
