"""The parts of a fabric the attribution can blame: a link between two switches, a switch, or a
leaf's uplinks taken together (what a leaf's traffic to other leaves crosses, and its own nodes'
traffic does not)."""

from __future__ import annotations

from dataclasses import dataclass

LINK, SWITCH, UPLINKS = "link", "switch", "uplinks"


@dataclass(frozen=True, order=True)
class Element:
    """A link (``names``: its two switches, canonical), a switch (its name) or a leaf's uplinks
    (the leaf's name), in the plane of ``rail`` (None: the plane every rail shares)."""

    kind: str
    names: tuple[str, ...]
    rail: int | None = None

    def __hash__(self) -> int:
        # taken millions of times by the attribution's indexes: kept, not recomputed
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.kind, self.names, self.rail))
            object.__setattr__(self, "_hash", cached)
        return cached

    @classmethod
    def link(cls, key: tuple[str, str], rail: int | None) -> Element:
        return _known(cls, LINK, tuple(key), rail)

    @classmethod
    def switch(cls, name: str, rail: int | None) -> Element:
        return _known(cls, SWITCH, (name,), rail)

    @classmethod
    def uplinks(cls, leaf: str, rail: int | None) -> Element:
        return _known(cls, UPLINKS, (leaf,), rail)

    def touches(self, switch: str) -> bool:
        return switch in self.names

    def describe(self) -> str:
        """``leaf01–spine02``, ``switch spine02`` or ``the uplinks of leaf01``."""
        if self.kind == LINK:
            return "–".join(self.names)
        if self.kind == UPLINKS:
            return f"the uplinks of {self.names[0]}"
        return f"switch {self.names[0]}"


# One Element for each part, so that the attribution's indexes find it by identity, not by
# comparing fields (millions of lookups a sweep); bounded, as a fabric's parts are.
_KNOWN: dict[tuple[str, tuple[str, ...], int | None], Element] = {}
_KNOWN_MAX = 1 << 18


def _known(cls: type[Element], kind: str, names: tuple[str, ...], rail: int | None) -> Element:
    key = (kind, names, rail)
    found = _KNOWN.get(key)
    if found is None or type(found) is not cls:
        if len(_KNOWN) >= _KNOWN_MAX:
            _KNOWN.clear()
        found = _KNOWN[key] = cls(kind, names, rail)
    return found
