"""Host labels folded into node-set form (``node[001-062,064]``, ``10.0.[0-3].[0-255]``), in time and
memory that grow with the labels, not with their number of digit runs.

The text is what ClusterShell's ``NodeSet`` writes for the same labels where each label has one
run of digits (most fleets: ``node0042``, ``gpu-a17``): ranges sorted by length then value, zero
padding kept, ``9-10`` but ``09``/``9`` apart, patterns in order. Labels with several runs of digits
(IP addresses, ``rack3-node12``, ``host:port``) fold along the last run first, then each earlier
one over the rows that share the rest: a full grid is one vector (``10.0.[0-255].[0-255]``), and
what a grid lacks stays beside it, larger vectors first. ClusterShell's own multi-dimensional
folding builds an object per digit run of every label and merges vectors pairwise: 315 MiB and
14 s for one fold of 65,536 addresses, and a report folds its host lists several times.

Whatever the shape, the text expands (ClusterShell, ``--hosts``) to exactly
the labels folded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

_DIGITS = re.compile(r"[0-9]+")
SHORT_RUN = 3  # runs of up to this many digits recur across labels (at most 1,110 of them)

Axis = tuple[str, ...]  # one run of digits' values, as written ("007"), in range order


def fold_labels(labels: Iterable[str]) -> str:
    """``labels`` (letters, digits, ``.``, ``_``, ``-``, ``:``) folded, comma-separated; deterministic
    whatever their order; empty for none."""
    by_pattern: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    short: dict[str, str] = {}  # one string for each short run of digits (an address's octets)
    for label in labels:
        values = tuple(short.setdefault(run, run) if len(run) <= SHORT_RUN else run for run in _DIGITS.findall(label))
        by_pattern.setdefault(tuple(_DIGITS.split(label)), set()).add(values)
    folded: list[str] = []
    for texts in sorted(by_pattern, key="%s".join):
        folded += [_render(texts, vector) for vector in _vectors(by_pattern[texts])]
    return ",".join(folded)


def _vectors(values: set[tuple[str, ...]]) -> list[tuple[Axis, ...]]:
    """The labels of one pattern (their runs of digits) as vectors of axes whose products hold
    each label once: the last run that varies folded first, then each earlier one over the rows
    alike in every other run. Larger vectors first, then by each axis's size and first and last
    value. An axis is a tuple, a singleton one shared: a vector costs little more than its label."""
    dimensions = len(next(iter(values)))
    if dimensions == 0:
        return [()]
    varying = [axis for axis in range(dimensions) if len({value[axis] for value in values}) > 1] or [dimensions - 1]
    if len(varying) == 1:  # one run varies (node0001, 10.0.0.x): one vector
        (axis,), some = varying, next(iter(values))
        return [(*((run,) for run in some[:axis]), _ordered({value[axis] for value in values}),
                 *((run,) for run in some[axis + 1:]))]
    singles: dict[str, Axis] = {}
    # the last run that varies, folded straight from the labels' runs (no vector a label first)
    last = varying[-1]
    rows: dict[tuple[str, ...], set[str]] = {}
    for value in values:
        rows.setdefault(value[:last] + value[last + 1:], set()).add(value[last])
    vectors = [(*(singles.setdefault(run, (run,)) for run in rest[:last]), _ordered(runs),
                *(singles.setdefault(run, (run,)) for run in rest[last:])) for rest, runs in rows.items()]
    for axis in reversed(varying[:-1]):
        merged: dict[tuple[Axis, ...], set[str]] = {}
        for vector in vectors:
            merged.setdefault(vector[:axis] + vector[axis + 1:], set()).update(vector[axis])
        vectors = [(*rest[:axis], _ordered(runs), *rest[axis:]) for rest, runs in merged.items()]
    return sorted(vectors, key=_vector_order)


def _ordered(runs: Iterable[str]) -> Axis:
    """By length, then as text (``9``, ``10``, ``010``): a stable sort by length of the sorted runs."""
    return tuple(sorted(sorted(runs), key=len))


def _vector_order(vector: tuple[Axis, ...]) -> tuple:
    return (-math.prod(len(axis) for axis in vector), tuple((-len(axis), axis[0], axis[-1]) for axis in vector))


def _render(texts: tuple[str, ...], vector: tuple[Axis, ...]) -> str:
    parts = [texts[0]]
    for axis, text in zip(vector, texts[1:], strict=True):
        ranges = ",".join(_ranges(axis))
        parts += [f"[{ranges}]" if len(axis) > 1 else ranges, text]
    return "".join(parts)


def _ranges(runs: Axis) -> list[str]:
    """Sorted runs of digits as ``a-b`` ranges of consecutive values: a zero-padded range keeps its
    width (``098-100``), an unpadded one takes no padded value (``9-10``, but ``9,09``)."""
    ranges: list[str] = []
    start = runs[0]
    previous = int(start)
    for run in runs[1:]:
        value = int(run)
        padded = len(start) > 1 and start[0] == "0"
        fits = len(run) == len(start) if padded else not (len(run) > 1 and run[0] == "0")
        if not (fits and value == previous + 1):
            ranges.append(_range(start, previous))
            start = run
        previous = value
    ranges.append(_range(start, previous))
    return ranges


def _range(start: str, last: int) -> str:
    width = len(start) if len(start) > 1 and start[0] == "0" else 0
    return start if int(start) == last else f"{start}-{last:0{width}d}"
