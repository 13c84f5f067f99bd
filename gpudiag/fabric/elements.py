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

    @classmethod
    def link(cls, key: tuple[str, str], rail: int | None) -> Element:
        return cls(LINK, key, rail)

    @classmethod
    def switch(cls, name: str, rail: int | None) -> Element:
        return cls(SWITCH, (name,), rail)

    @classmethod
    def uplinks(cls, leaf: str, rail: int | None) -> Element:
        return cls(UPLINKS, (leaf,), rail)

    def touches(self, switch: str) -> bool:
        return switch in self.names

    def describe(self) -> str:
        """``leaf01–spine02``, ``switch spine02`` or ``the uplinks of leaf01``."""
        if self.kind == LINK:
            return "–".join(self.names)
        if self.kind == UPLINKS:
            return f"the uplinks of {self.names[0]}"
        return f"switch {self.names[0]}"
