"""Pairwise links between nodes: which pairs test together (``schedule``) and, from their
figures, which NIC or link is slow and which pair could not be tested (``attribution``).

Both are pure functions of their inputs; running the pair tests is the sweep's business.
"""

from .attribution import (
    DEFAULT_THRESHOLDS,
    GroupReference,
    LinkAttribution,
    LinkError,
    LinkGroup,
    LinkResult,
    LinkShift,
    LinkSuspect,
    LinkThresholds,
    NicSuspect,
    PairFigure,
    attribute_links,
)
from .schedule import CONFIRM, FULL, SCREEN, Pair, Round, Suspects, confirm_rounds, full_rounds, pair_key, screen_rounds

__all__ = ["CONFIRM", "DEFAULT_THRESHOLDS", "FULL", "SCREEN", "GroupReference", "LinkAttribution", "LinkError",
           "LinkGroup", "LinkResult", "LinkShift", "LinkSuspect", "LinkThresholds", "NicSuspect", "Pair", "PairFigure",
           "Round", "Suspects", "attribute_links", "confirm_rounds", "full_rounds", "pair_key", "screen_rounds"]
