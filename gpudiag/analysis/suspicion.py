"""One suspect: a measurement below one of its references, and the re-test of one run that
confirms it (``repeated_once``). Its own module so that the siblings' judging
(gpudiag.analysis.siblings) and the suspects' pass (gpudiag.analysis.suspects) share it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .identity import GpuIdentity
from .measurements import NODE_MEDIAN, Measurement
from .reference import SIBLINGS, Reference
from .thresholds import Thresholds


@dataclass(frozen=True)
class Suspect:
    """A measurement below one of its references (the first that flags it: fleet, baseline,
    SKU); ``note`` says why it is unconfirmed when a re-test could not measure it; ``why`` why
    it was pinned on this GPU (a P2P culprit)."""

    measurement: Measurement
    reference: Reference
    robust_z: float
    deficit_pct: float
    confirmed: bool = False
    note: str | None = None
    why: str | None = None
    retest_failed: bool = False
    # The same measurement judged against its siblings (the other GPUs of its node), when they
    # flag it too: a GPU far below its siblings is named even beside a slow_node.
    sibling: Suspect | None = None
    # The GPU it was measured on, by NVML's index (gpudiag.analysis.identity); None: not looked up.
    identity: GpuIdentity | None = None
    # The re-test runs it asks for: more than one on a noisy key, whose runs' mean alone confirms
    # it (gpudiag.analysis.noisy); ``screened``: only the noisy key's wide screen took it, and
    # unconfirmed it is no finding.
    runs: int = 1
    screened: bool = False


def sibling_judged(suspect: Suspect) -> Suspect | None:
    """``suspect`` as judged against its siblings (the other GPUs of its node), when they flag or
    screen it."""
    return suspect if suspect.reference.source == SIBLINGS else suspect.sibling


def below_its_siblings(suspect: Suspect) -> Suspect | None:
    """``suspect`` as its siblings judge it, where that is a verdict: not a screen the re-test
    did not confirm (gpudiag.analysis.siblings.sibling_screen)."""
    return None if cleared_by_siblings(suspect) else sibling_judged(suspect)


def cleared_by_siblings(suspect: Suspect) -> bool:
    """Whether ``suspect``'s siblings screened it and its re-test did not confirm it below them."""
    sibling = sibling_judged(suspect)
    return sibling is not None and sibling.screened and not sibling.confirmed


def repeated_once(suspect: Suspect, again: Measurement, thresholds: Thresholds) -> Suspect | None:
    """``suspect`` confirmed by its re-test's figure ``again``, or None when it did not repeat.
    A node median's re-test must itself be flagged too: against the tight spread of node medians,
    one run far below and a re-test half-way there would average past the bar, and a node slow as
    a whole is far below in every run."""
    ref = suspect.reference
    if suspect.measurement.device == NODE_MEDIAN and not ref.flags(again.value, thresholds):
        return None
    # The finding shows what confirmed it: the two runs' mean, and its deficit and z (both linear
    # in the value: the mean of the runs' deficits is the mean's).
    mean = (suspect.measurement.value + again.value) / 2
    mean_deficit, mean_z = ref.deficit_pct(mean), ref.robust_z(mean)
    repeated = again.value < ref.value and mean_deficit >= thresholds.retest_deficit_pct
    if repeated and ref.far_below(mean_z, thresholds):
        return dataclasses.replace(suspect, measurement=suspect.measurement._replace(value=mean),
                                   deficit_pct=mean_deficit, robust_z=mean_z, confirmed=True)
    return None
