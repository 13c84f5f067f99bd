"""Tails under estimated noise: how many sigmas a figure must fall when its sigma is itself
estimated from a few values (the Student t quantile of a normal tail), and how many degrees of
freedom a MAD-based spread rests on. Shared by the references, the re-test's judgement, the
links' levels and the history's slopes."""

from __future__ import annotations

import math

# The variance of the log of a MAD-based spread of n normal values, times n (the MAD's asymptotic
# variance, 0.62 sigma² / n, over its square, 0.455 sigma²).
MAD_LOG_VARIANCE = 1.36


def student_bar(z: float, dof: int) -> float:
    """The sigmas a figure must fall below its reference when its noise is estimated with ``dof``
    degrees of freedom: the Student t quantile of the normal tail beyond ``z`` (a Cornish–Fisher
    expansion; exact for 1 and 2 degrees of freedom; within 1 % of ``z`` from a few hundred on).
    ``z`` itself for a noise known (``dof`` 0: a floor)."""
    if dof <= 0:
        return z
    tail = 0.5 * math.erfc(z / math.sqrt(2))
    if dof == 1:
        return math.tan(math.pi * (0.5 - tail))
    if dof == 2:
        p = 1 - tail
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    return (z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * dof ** 3))


def spread_dof(values: float) -> int:
    """The degrees of freedom of a MAD-based spread of ``values`` normal values: a standard
    deviation's of as many has half its log variance over them (``MAD_LOG_VARIANCE``). A
    baseline stored from one node's eight GPUs knows its spread with 2: it came out 0.6 to 3 %
    over eight such baselines at 2 % noise, and at 0.6 % a healthy GPU's re-test 3.6 % low was
    4.7 of them, a warning."""
    return int(values / (2 * MAD_LOG_VARIANCE))
