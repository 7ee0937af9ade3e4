"""The tests and intervals behind a comparison of two success rates: exact McNemar and Newcombe's
paired interval for rollouts matched by scene, Fisher and Newcombe's unpaired interval otherwise.

Newcombe's hybrid score intervals are not in scipy; they are built here from scipy's Wilson
intervals, as published:
- paired: Newcombe RG (1998), "Improved confidence intervals for the difference between binomial
  proportions based on paired data", Statistics in Medicine 17:2635-2650, method 10;
- unpaired: Newcombe RG (1998), "Interval estimation for the difference between independent
  proportions: comparison of eleven methods", Statistics in Medicine 17:873-890, method 10.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from policybench.run.records import wilson

CONFIDENCE = 0.95


class Adjustment(StrEnum):
    """How p-values are adjusted across the tasks of a comparison."""

    BH = "bh"  # Benjamini & Hochberg (1995): controls the false discovery rate
    HOLM = "holm"  # Holm (1979): controls the chance of any false regression

    @property
    def title(self) -> str:
        return {Adjustment.BH: "Benjamini-Hochberg", Adjustment.HOLM: "Holm"}[self]


@dataclass(frozen=True)
class Pairs:
    """Rollouts of the same scene under both runs, by what each run made of it."""

    both: int  # solved in both runs
    lost: int  # solved before, not after
    gained: int  # solved after, not before
    neither: int

    @property
    def count(self) -> int:
        return self.both + self.lost + self.gained + self.neither

    @property
    def discordant(self) -> int:
        return self.lost + self.gained


def mcnemar_p(pairs: Pairs) -> float:
    """Exact (conditional) McNemar p-value: the two-sided binomial test of the gained pairs among
    the discordant ones against one half. 1 when no pair is discordant."""
    from scipy.stats import binomtest

    if not pairs.discordant:
        return 1.0
    return float(binomtest(pairs.gained, pairs.discordant, 0.5).pvalue)


def fisher_p(solved_before: int, rollouts_before: int, solved_after: int, rollouts_after: int):
    """Two-sided Fisher exact p-value of two independent success counts (scipy)."""
    from scipy.stats import fisher_exact

    table = [
        [solved_before, rollouts_before - solved_before],
        [solved_after, rollouts_after - solved_after],
    ]
    return float(fisher_exact(table, alternative="two-sided").pvalue)


def stratified_p(strata: Sequence[tuple[int, int, int, int]]) -> float:
    """Two-sided exact p-value that two runs share their success rates within every stratum
    (task), of independent counts (solved before, rollouts before, solved after, rollouts after)
    per stratum: the exact conditional test of a common odds ratio of 1 (Mantel-Haenszel's
    question asked exactly; Gart 1970, Biometrika 57:471). Given each task's margins, the count
    solved after is hypergeometric in each; their sum's distribution is the convolution, and the
    p-value sums the sums no more likely than the one seen, as Fisher's test does. A single
    stratum gives Fisher's p."""
    from scipy.stats import hypergeom

    distribution, seen = np.ones(1), 0
    for solved_before, rollouts_before, solved_after, rollouts_after in strata:
        solved = solved_before + solved_after
        low = max(0, solved - rollouts_before)
        counts = np.arange(low, min(solved, rollouts_after) + 1)
        pmf = hypergeom.pmf(counts, rollouts_before + rollouts_after, solved, rollouts_after)
        distribution = np.convolve(distribution, np.concatenate([np.zeros(low), pmf]))
        seen += solved_after
    observed = distribution[seen]
    return float(min(1.0, distribution[distribution <= observed * (1 + 1e-7)].sum()))


def paired_interval(pairs: Pairs, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Newcombe's method 10 interval for (success after) - (success before) on paired rollouts:
    the Wilson intervals of both rates, combined with the pairs' phi correlation, whose
    numerator is continuity corrected as the paper prescribes."""
    n = pairs.count
    if n == 0:
        raise ValueError("a paired interval needs at least one pair of rollouts, got none")
    after, before = pairs.both + pairs.gained, pairs.both + pairs.lost
    p_after, p_before = after / n, before / n
    low_after, high_after = wilson(after, n, confidence)
    low_before, high_before = wilson(before, n, confidence)
    numerator = pairs.both * pairs.neither - pairs.gained * pairs.lost
    if numerator > 0:
        numerator = max(numerator - n / 2, 0.0)
    margins = after * (n - after) * before * (n - before)
    phi = numerator / math.sqrt(margins) if margins else 0.0
    d_low_after, d_high_after = p_after - low_after, high_after - p_after
    d_low_before, d_high_before = p_before - low_before, high_before - p_before
    below = d_low_after**2 - 2 * phi * d_low_after * d_high_before + d_high_before**2
    above = d_high_after**2 - 2 * phi * d_high_after * d_low_before + d_low_before**2
    difference = p_after - p_before
    return (
        max(-1.0, difference - math.sqrt(max(below, 0.0))),
        min(1.0, difference + math.sqrt(max(above, 0.0))),
    )


def unpaired_interval(
    solved_before: int,
    rollouts_before: int,
    solved_after: int,
    rollouts_after: int,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Newcombe's method 10 interval for (success after) - (success before) on independent
    rollouts: the two Wilson intervals combined square-and-add."""
    if not rollouts_before or not rollouts_after:
        raise ValueError(
            f"an interval for a difference needs rollouts on both sides, got {rollouts_before} "
            f"before and {rollouts_after} after"
        )
    p_before, p_after = solved_before / rollouts_before, solved_after / rollouts_after
    low_before, high_before = wilson(solved_before, rollouts_before, confidence)
    low_after, high_after = wilson(solved_after, rollouts_after, confidence)
    difference = p_after - p_before
    return (
        difference - math.hypot(p_after - low_after, high_before - p_before),
        difference + math.hypot(high_after - p_after, p_before - low_before),
    )


def adjust(p_values: Sequence[float], method: Adjustment) -> list[float]:
    """p-values adjusted for testing them all: Benjamini-Hochberg (scipy) or Holm step-down."""
    if not p_values:
        return []
    if method is Adjustment.BH:
        from scipy.stats import false_discovery_control

        return [float(q) for q in false_discovery_control(list(p_values))]
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
