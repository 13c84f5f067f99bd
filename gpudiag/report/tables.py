"""Rich tables that fit the console's width without cutting a host's name or a number's digits.

A table is described first (``TableSpec``: its columns, each with a kind, and its rows of text),
then laid out for a width: ``fit_table`` leaves out the columns marked as the first to go and
names them in the caption; ``split_table`` deals the columns out over several tables that each repeat the
name columns. Both give every column a fixed width, chosen here rather than by rich, because rich
shrinks a table that is too wide by cutting cells short with an ellipsis ("54.4 / 5…").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

Kind = Literal["name", "figure", "text"]
Row = Sequence[str] | None  # None draws a line between sections

# What rich's default table (box.HEAVY_HEAD with edges, padding (0, 1)) adds to the cells' text:
# a border left of every column, one at the right edge, and a space either side of each cell.
PER_COLUMN_CHARS = 3
EDGE_CHARS = 1
# Free text folds a long word (an error message's path, say) rather than go narrower than this.
TEXT_FOLD_MIN_CHARS = 12
# The narrowest widths tried, from the most room to the least (see column_widths): fit_table
# leaves columns out before it tries a tighter level.
LEVELS = ("comfortable", "tight", "hard")


def make_console(*, stderr: bool = False, file: TextIO | None = None) -> Console:
    """The console every command prints through: rich's emoji codes off, since a PCI bus id such as
    ``00000000:AB:00.0`` holds ``:ab:``, which rich would print as an emoji."""
    return Console(stderr=stderr, file=file, emoji=False)


@dataclass(frozen=True)
class Column:
    """One column of a fitted table.

    ``kind``: ``name`` (a host, sweep id, device, metric: shown whole on one line, never wrapped
    nor cut); ``figure`` (numbers, with their unit or peer: wrapped at spaces only, so no number
    loses a digit); ``text`` (free text: wrapped at spaces, a word wider than the room folded).
    ``drop_rank``: 0 for a column that is always shown; where the console is too narrow,
    ``fit_table`` leaves out the column of the highest rank first. ``short_title``: the header
    used where the full titles do not fit (all short titles, or none, are used).
    """

    title: str
    kind: Kind = "figure"
    drop_rank: int = 0
    justify: JustifyMethod | None = None
    short_title: str = ""

    @property
    def alignment(self) -> JustifyMethod:
        """The given justification, else right for figures and left for the rest."""
        return self.justify or ("right" if self.kind == "figure" else "left")


@dataclass(frozen=True)
class TableSpec:
    """A table before layout: title, columns, rows (cells as plain text, ``\\n`` for a line
    break; ``None`` for a section line), a caption, and how many lines a figure may wrap into
    before columns are left out or split off (``figure_lines``)."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    caption: str = ""
    figure_lines: int = 2


@dataclass(frozen=True)
class Widths:
    """A column's widths in characters: its widest cell or title (``natural``), the narrowest it
    may be drawn at each level of ``LEVELS``, and for a figure the widths (``steps``, widest first)
    at which its tallest cell takes one line fewer: room between two steps would be wasted on it."""

    natural: int
    comfortable: int
    tight: int
    hard: int
    steps: tuple[int, ...] = ()

    def at(self, level: str) -> int:
        """The width at ``level`` (one of LEVELS)."""
        return {"comfortable": self.comfortable, "tight": self.tight, "hard": self.hard}[level]


def fit_table(spec: TableSpec, width: int, hint: str = "") -> Table:
    """The table laid out within ``width`` characters, leaving out columns of drop rank above 0
    (highest first) only where their figures would otherwise wrap into more than
    ``spec.figure_lines`` lines. The caption names what was left out, followed by ``hint`` (where
    to see it). A table too wide even so keeps every name and number whole and runs past ``width``
    (print it with print_tables)."""
    bounds = [column_widths(spec, index) for index in range(len(spec.columns))]
    order = sorted((i for i, c in enumerate(spec.columns) if c.drop_rank > 0),
                   key=lambda i: (-spec.columns[i].drop_rank, -i))
    kept, level = _keep(bounds, order, width)
    left_out = [spec.columns[i].title for i in range(len(spec.columns)) if i not in kept]
    caption = "\n".join(part for part in (spec.caption, left_out_note(left_out, width, hint)) if part)
    return _lay_out(spec, spec.title, kept, level, width, caption)


def split_table(spec: TableSpec, width: int) -> list[Table]:
    """The table laid out within ``width`` characters as one table or, where it does not fit,
    several: each repeats the name columns and takes as many of the others, in order, as fit
    without wrapping a figure into more than ``spec.figure_lines`` lines. Later tables' titles
    say they continue the first; the last carries the caption."""
    bounds = [column_widths(spec, index) for index in range(len(spec.columns))]
    keys = [i for i, c in enumerate(spec.columns) if c.kind == "name"]
    parts: list[list[int]] = []
    for index in (i for i in range(len(spec.columns)) if i not in keys):
        if parts and table_width([bounds[i].comfortable for i in [*keys, *parts[-1], index]]) <= width:
            parts[-1].append(index)
        else:
            parts.append([index])
    tables = []
    for number, part in enumerate(parts or [[]]):
        kept = sorted([*keys, *part])
        level = next((lv for lv in LEVELS if table_width([bounds[i].at(lv) for i in kept]) <= width), "hard")
        title = spec.title if number == 0 else f"{spec.title}, continued"
        caption = spec.caption if number == len(parts) - 1 else ""
        tables.append(_lay_out(spec, title, kept, level, width, caption))
    return tables


def print_tables(console: Console, tables: Iterable[Table]) -> None:
    """Print each table whole: one wider than the console (its names alone are wider) runs past
    the right edge, for the terminal to wrap, rather than being cropped there."""
    for table in tables:
        console.print(table, crop=False)


def left_out_note(titles: Sequence[str], width: int, hint: str) -> str:
    """``h2d GB/s, d2h GB/s left out at 80 columns; see --json`` ("" when nothing was)."""
    if not titles:
        return ""
    return f"{', '.join(titles)} left out at {width} columns" + (f"; {hint}" if hint else "")


def table_width(widths: Sequence[int]) -> int:
    """The characters a table takes whose columns' text is ``widths`` wide (borders and padding added)."""
    return sum(widths) + PER_COLUMN_CHARS * len(widths) + EDGE_CHARS


def column_widths(spec: TableSpec, index: int, short: bool = False) -> Widths:
    """How wide column ``index`` of ``spec`` is (under its short title if ``short``), and how
    narrow it may go (see Column.kind; its short title's words, where it has one, set the floor)."""
    column = spec.columns[index]
    lines = [line for row in spec.rows if row is not None for line in row[index].split("\n")]
    header = longest_word(column.short_title or column.title)
    natural = max([cell_len(column.short_title if short and column.short_title else column.title),
                   *map(cell_len, lines)])
    if column.kind == "name":
        widest = max([header, *map(cell_len, lines)])
        return Widths(natural, widest, widest, widest)
    words = max([header, *map(longest_word, lines)])
    if column.kind == "text":
        return Widths(natural, words, words, min(words, max(header, TEXT_FOLD_MIN_CHARS)))
    steps = figure_steps(lines, words)
    wrapped = max([words, *(narrowest_width(line, spec.figure_lines) for line in lines)])
    return Widths(natural, wrapped, words, words, steps)


def figure_steps(lines: Sequence[str], narrowest: int) -> tuple[int, ...]:
    """The widths, widest first and none below ``narrowest``, at which the tallest of ``lines``
    wraps into 1, 2, 3, ... lines."""
    steps: list[int] = []
    for count in range(1, max((len(line.split()) for line in lines), default=1) + 1):
        step = max([narrowest, *(narrowest_width(line, count) for line in lines)])
        if not steps or step < steps[-1]:
            steps.append(step)
        if step == narrowest:
            break
    return tuple(steps)


def longest_word(text: str) -> int:
    """The width of the widest space-separated word of ``text`` (0 for blank text)."""
    return max((cell_len(word) for word in text.split()), default=0)


def wrapped_line_count(text: str, width: int) -> int:
    """How many lines ``text`` takes when wrapped at spaces into ``width`` characters (words
    wider than ``width`` count as one line each, as if they overflowed)."""
    count, used = 1, 0
    for word in text.split():
        size = cell_len(word)
        if used and used + 1 + size > width:
            count, used = count + 1, size
        else:
            used = used + 1 + size if used else size
    return count


def narrowest_width(text: str, lines: int) -> int:
    """The narrowest width at which ``text`` wraps at spaces into at most ``lines`` lines."""
    width = longest_word(text)
    while wrapped_line_count(text, width) > lines:
        width += 1
    return width


def _keep(bounds: Sequence[Widths], order: Sequence[int], width: int) -> tuple[list[int], str]:
    """The columns kept and the level they are drawn at: the first level of LEVELS at which
    leaving out the fewest of ``order`` (in that order) makes the table fit, else all of them
    left out at the last level."""
    for level in LEVELS:
        kept = _fewest_left_out(bounds, order, level, width)
        if kept is not None:
            return kept, level
    return [i for i in range(len(bounds)) if i not in order], LEVELS[-1]


def _fewest_left_out(bounds: Sequence[Widths], order: Sequence[int], level: str, width: int) -> list[int] | None:
    """The columns kept when as few as possible of ``order`` are left out so that the table fits
    at ``level``; None when leaving them all out is not enough."""
    for count in range(len(order) + 1):
        kept = [i for i in range(len(bounds)) if i not in order[:count]]
        if table_width([bounds[i].at(level) for i in kept]) <= width:
            return kept
    return None


def _lay_out(spec: TableSpec, title: str, kept: Sequence[int], level: str, width: int, caption: str) -> Table:
    """The Table of the ``kept`` columns: each at its natural width under its full title where
    all fit, else under short titles, each at least as wide as ``level`` asks (see _spread)."""
    full = {i: column_widths(spec, i) for i in kept}
    if table_width([full[i].natural for i in kept]) <= width:
        return _build(spec, title, {i: full[i].natural for i in kept}, caption, short=False)
    short = {i: column_widths(spec, i, short=True) for i in kept}
    return _build(spec, title, _spread(short, kept, level, width), caption, short=True)


def _spread(bounds: Mapping[int, Widths], kept: Sequence[int], level: str, width: int) -> dict[int, int]:
    """Each kept column's width: its narrowest at ``level``, then the room left given first to
    the columns it lets reach their natural width (the smallest need first), the rest left to
    right, a figure only as far as a width that saves it a line (Widths.steps)."""
    widths = {i: bounds[i].at(level) for i in kept}
    room = width - table_width(list(widths.values()))
    for i in sorted(kept, key=lambda i: bounds[i].natural - widths[i]):
        need = bounds[i].natural - widths[i]
        if 0 < need <= room:
            widths[i], room = bounds[i].natural, room - need
    for i in kept:
        reach = min(bounds[i].natural, widths[i] + room)
        if bounds[i].steps:
            reach = next((step for step in bounds[i].steps if step <= reach), widths[i])
        grow = max(0, reach - widths[i])
        widths[i], room = widths[i] + grow, room - grow
    return widths


def _build(spec: TableSpec, title: str, widths: dict[int, int], caption: str, short: bool) -> Table:
    """The rich Table of ``spec``'s columns in ``widths``, each exactly that wide, under its
    short title (where it has one) if ``short``."""
    kept = sorted(widths)
    # A fixed width: rich would otherwise shrink a table too wide for the console by cutting cells.
    # Every title, header and cell is escaped: a node's text (a reason, a source) is never rich markup.
    table = Table(title=escape(title), title_justify="left", caption=escape(caption) if caption else None,
                  caption_justify="left", width=table_width([widths[i] for i in kept]))
    for i in kept:
        column = spec.columns[i]
        header = column.short_title if short and column.short_title else column.title
        table.add_column(escape(header), justify=column.alignment, width=widths[i],
                         no_wrap=column.kind == "name", overflow="fold")
    for row in spec.rows:
        if row is None:
            table.add_section()
        else:
            table.add_row(*(escape(row[i]) for i in kept))
    return table
