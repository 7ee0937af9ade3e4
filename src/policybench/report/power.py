"""How many rollouts a claim needs, and the smallest change a run can detect: published sample-size
formulas for both designs, checked by the exact power of the tests `report compare` runs.

- unpaired (two runs on different scenes, Fisher's exact test): Fleiss JL, Levin B, Paik MC (2003)
  Statistical Methods for Rates and Proportions, 3rd ed., eq. 4.14, with the continuity correction
  of Fleiss JL, Tytun A, Ury HK (1980) Biometrics 36:343-346;
- paired (the same scenes under both, exact McNemar test): Connor RJ (1987) "Sample size for
  testing differences in proportions for the paired-sample design", Biometrics 43:207-211.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
POWER = 0.8
UNPAIRED_FORMULA = "Fleiss, Levin & Paik (2003) eq. 4.14, continuity-corrected (Biometrics 36:343)"
PAIRED_FORMULA = "Connor (1987) Biometrics 43:207"
# Exact power sums over every outcome: beyond this many rollouts a side it takes seconds, and
# the formulas are close to it there anyway.
EXACT_LIMIT = 3000


@functools.lru_cache(maxsize=256)  # a few levels, asked thousands of times by a report's rows
def _z(probability: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(probability))


def unpaired_size(before: float, after: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Rollouts per run (not rounded) for a two-sided test of `before` vs `after` success rates
    on independent rollouts to reach `power`."""
    delta = abs(after - before)
    if delta == 0:
        raise ValueError("the change to detect must not be zero")
    mean = (before + after) / 2
    n = (
        _z(1 - alpha / 2) * math.sqrt(2 * mean * (1 - mean))
        + _z(power) * math.sqrt(before * (1 - before) + after * (1 - after))
    ) ** 2 / delta**2
    return n / 4 * (1 + math.sqrt(1 + 4 / (n * delta))) ** 2


def paired_size(
    change: float, discordance: float, alpha: float = ALPHA, power: float = POWER
) -> float:
    """Scenes (each run under both policies; not rounded) for a two-sided exact McNemar test to
    detect a change of success rate `change` when a share `discordance` of scenes has
    different outcomes under the two."""
    if change == 0:
        raise ValueError("the change to detect must not be zero")
    return (
        _z(1 - alpha / 2) * math.sqrt(discordance) + _z(power) * math.sqrt(discordance - change**2)
    ) ** 2 / change**2


def mcnemar_power(scenes: int, lost: float, gained: float, alpha: float = ALPHA) -> float:
    """Exact power of the two-sided exact McNemar test (reject at p < alpha) over `scenes`
    pairs, when a pair is lost (solved only before) with probability `lost` and gained with
    probability `gained`: the discordant count d is binomial, and given it the gained count k.
    The test rejects where min(k, d - k) is at most its critical value c(d), which never falls
    as d grows, so each d's rejection chance is two binomial tails."""
    from scipy.special import bdtr, bdtrc

    if lost + gained == 0:
        return 0.0
    share = gained / (lost + gained)
    discordant = np.arange(scenes + 1)
    weights = _binomial_pmf(discordant, scenes, lost + gained)
    kept = discordant[(weights >= 1e-15) & (discordant > 0)]
    if not len(kept):
        return 0.0
    # c(d): the largest k with 2 P(Bin(d, 1/2) <= k) < alpha (-1 where none), found for the
    # first d kept by counting (the tail grows with k) and carried up from there.
    first = int(kept[0])
    critical = int(np.count_nonzero(2 * bdtr(np.arange(first + 1), first, 0.5) < alpha)) - 1
    criticals = np.empty(len(kept), dtype=np.int64)
    for i, d in enumerate(kept.tolist()):
        while critical + 1 <= d and 2 * bdtr(critical + 1, d, 0.5) < alpha:
            critical += 1
        criticals[i] = critical
    rejects = np.where(
        criticals >= 0,
        bdtr(np.maximum(criticals, 0), kept, share) + bdtrc(kept - criticals - 1, kept, share),
        0.0,
    )
    return float(np.sum(weights[kept] * rejects))


def _binomial_pmf(k: np.ndarray, n: int, p: float) -> np.ndarray:
    """scipy.stats.binom.pmf(k, n, p), from scipy.special without its per-call overhead (a
    power over a few hundred scenes calls it a few hundred times)."""
    from scipy.special import gammaln, xlog1py, xlogy

    log = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + xlogy(k, p) + xlog1py(n - k, -p)
    return np.exp(log)


def fisher_power(rollouts: int, before: float, after: float, alpha: float = ALPHA) -> float:
    """Exact power of the two-sided Fisher exact test (reject at p < alpha) of two runs of
    `rollouts` each with success rates `before` and `after`: for every total of successes the
    hypergeometric p-value of each split, weighted by the two binomial probabilities."""
    from scipy.special import gammaln
    from scipy.stats import binom

    if rollouts > EXACT_LIMIT:
        raise ValueError(f"exact power is computed up to {EXACT_LIMIT} rollouts a run")
    n = rollouts
    log_factorial = gammaln(np.arange(2 * n + 2) + 1)
    weights_before = binom.pmf(np.arange(n + 1), n, before)
    weights_after = binom.pmf(np.arange(n + 1), n, after)
    total = 0.0
    for successes in range(2 * n + 1):
        x = np.arange(max(0, successes - n), min(n, successes) + 1)  # of them before
        null = np.exp(  # hypergeometric: C(n, x) C(n, successes - x) / C(2n, successes)
            2 * log_factorial[n]
            - log_factorial[x]
            - log_factorial[n - x]
            - log_factorial[successes - x]
            - log_factorial[n - successes + x]
            - log_factorial[2 * n]
            + log_factorial[successes]
            + log_factorial[2 * n - successes]
        )
        order = np.sort(null)
        # p-value: the chance of every split no more likely than this one (as R's fisher.test)
        p_values = np.cumsum(order)[np.searchsorted(order, null * (1 + 1e-7), side="right") - 1]
        chance = weights_before[x] * weights_after[successes - x]
        total += float(chance[p_values < alpha].sum())
    return total


@dataclass(frozen=True)
class Requirement:
    """What a claim `baseline -> target` needs in one design, by the formula and by the exact
    test `report compare` runs. Unpaired: rollouts per task under each policy; paired: scenes
    per task, each run under both policies."""

    baseline: float
    target: float
    rollouts: int  # by the formula
    exact_power: float | None  # of the exact test at `rollouts`; None: too many to compute
    exact_rollouts: int | None  # the fewest, from `rollouts` up, at which it reaches the power

    @property
    def needed(self) -> int:
        return self.exact_rollouts if self.exact_rollouts is not None else self.rollouts


def unpaired_requirement(
    baseline: float, target: float, alpha: float = ALPHA, power: float = POWER
) -> Requirement:
    rollouts = math.ceil(unpaired_size(baseline, target, alpha, power))
    return _checked(
        baseline, target, rollouts, lambda n: fisher_power(n, baseline, target, alpha), power
    )


def paired_requirement(
    baseline: float, target: float, discordance: float, alpha: float = ALPHA, power: float = POWER
) -> Requirement:
    """Raises ValueError when no joint distribution has these margins and this discordance."""
    change = target - baseline
    lost, gained = (discordance - change) / 2, (discordance + change) / 2
    if discordance < abs(change) or lost > baseline or gained > 1 - baseline:
        raise ValueError(
            f"a discordance of {discordance:g} cannot carry a change from {baseline:g} to "
            f"{target:g}: the share of scenes solved by only one policy lies between the change "
            f"({abs(change):g}) and {min(2 * baseline + change, 2 * (1 - baseline) - change):g}"
        )
    rollouts = math.ceil(paired_size(change, discordance, alpha, power))
    return _checked(
        baseline, target, rollouts, lambda n: mcnemar_power(n, lost, gained, alpha), power
    )


def _checked(
    baseline: float,
    target: float,
    rollouts: int,
    power_at: Callable[[int], float],
    power: float,
) -> Requirement:
    """The formula's count with the exact power of the real test there, and the fewest count
    at which that test reaches `power` (neither above EXACT_LIMIT, where enumeration is slow)."""
    if rollouts > EXACT_LIMIT:
        return Requirement(baseline, target, rollouts, None, None)
    return Requirement(
        baseline, target, rollouts, power_at(rollouts), _fewest(rollouts, power_at, power)
    )


def _fewest(start: int, power_at: Callable[[int], float], power: float) -> int | None:
    """The first count from `start` up to twice it (in steps of a hundredth of it) whose power
    reaches `power`. Exact power is not monotonic in the count, so this is where the claim
    first holds, not a guarantee for every larger count."""
    step = max(1, start // 100)
    for n in range(start, 2 * start + 1, step):
        if n > EXACT_LIMIT:
            break
        if power_at(n) >= power:
            return n
    return None


@dataclass(frozen=True)
class Detectable:
    """The smallest drop and rise of a success rate that a second run of the same size would
    detect with `power` in a two-sided unpaired test; None where none within [0, 1] would."""

    rollouts: int
    rate: float
    drop: float | None
    rise: float | None
    alpha: float = ALPHA
    power: float = POWER


@functools.lru_cache(maxsize=1024)  # a report asks it of each row, for its page and its JSON
def detectable_change(
    rollouts: int, rate: float, alpha: float = ALPHA, power: float = POWER
) -> Detectable:
    """Solves the unpaired formula for the change: conservative for a paired comparison."""
    from scipy.optimize import brentq

    def smallest(direction: int) -> float | None:
        room = rate if direction < 0 else 1 - rate
        if room <= 0 or unpaired_size(rate, rate + direction * room, alpha, power) > rollouts:
            return None

        def excess(change: float) -> float:
            return unpaired_size(rate, rate + direction * change, alpha, power) - rollouts

        return float(brentq(excess, min(1e-6, room), room, xtol=1e-6))

    return Detectable(rollouts, rate, smallest(-1), smallest(+1), alpha, power)
