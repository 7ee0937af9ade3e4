"""The statistics of a comparison against published worked examples and against references built
here from their definitions: Newcombe's paired and unpaired intervals, the exact McNemar p-value,
and the Holm and Benjamini-Hochberg adjustments."""

from __future__ import annotations

from math import comb

import pytest

from policybench.report.paired import (
    Adjustment,
    Pairs,
    adjust,
    mcnemar_p,
    paired_interval,
    unpaired_interval,
)

# Newcombe RG (1998) Statistics in Medicine 17:2635-2650, Table III, method 10. A row is the
# paired table (e both, f first only, g second only, h neither) and the 95% interval for
# p_first - p_second = (f - g) / n, to the paper's four decimals.
NEWCOMBE_PAIRED_TABLE_III = [
    ((36, 12, 2, 0), (0.0569, 0.3404)),
    ((20, 12, 2, 16), (0.0562, 0.3292)),
    ((18, 12, 2, 18), (0.0562, 0.3290)),
    ((36, 14, 0, 0), (0.1528, 0.4167)),
    ((35, 14, 0, 1), (0.1461, 0.4175)),
    ((18, 14, 0, 18), (0.1441, 0.3963)),
    ((2, 97, 1, 0), (0.8721, 0.9854)),
    ((1, 97, 1, 1), (0.8736, 0.9850)),
    ((0, 29, 1, 0), (0.6666, 0.9882)),
    ((2, 98, 0, 0), (0.9178, 0.9945)),
    ((1, 98, 0, 1), (0.9171, 0.9916)),
    ((0, 30, 0, 0), (0.8395, 1.0)),
    ((54, 0, 0, 0), (-0.0664, 0.0664)),
]

# Newcombe RG (1998) Statistics in Medicine 17:873-890, Table II, method 10: (k1/n1 - k2/n2)
# and its 95% interval.
NEWCOMBE_UNPAIRED_TABLE_II = [
    ((56, 70, 48, 80), (0.0524, 0.3339)),
    ((9, 10, 3, 10), (0.1705, 0.8090)),
    ((6, 7, 2, 7), (0.0582, 0.8062)),
    ((5, 56, 0, 29), (-0.0381, 0.1926)),
    ((0, 10, 0, 20), (-0.1611, 0.2775)),
    ((0, 10, 0, 10), (-0.2775, 0.2775)),
    ((10, 10, 0, 20), (0.6791, 1.0)),
    ((10, 10, 0, 10), (0.6075, 1.0)),
]


@pytest.mark.parametrize(("table", "expected"), NEWCOMBE_PAIRED_TABLE_III)
def test_paired_interval_matches_newcombe_1998_table_iii(table, expected):
    both, first_only, second_only, neither = table
    # Our change is after - before: the paper's first measurement is our `after`.
    pairs = Pairs(both=both, lost=second_only, gained=first_only, neither=neither)
    assert paired_interval(pairs) == pytest.approx(expected, abs=1.5e-4)


def test_paired_interval_of_a_drop_mirrors_the_paper_and_a_textbook_example():
    # Fagerland, Lydersen & Laake (2017), Statistical Analysis of Contingency Tables, ch. 8:
    # complete response before and after consolidation therapy (Cavo et al. 2012), 59 / 6 /
    # 16 / 80; before - after = -0.0621, Newcombe's square-and-add interval -0.1186 to -0.0046.
    rise = paired_interval(Pairs(both=59, lost=6, gained=16, neither=80))
    assert rise == pytest.approx((0.0046, 0.1186), abs=1e-4)
    drop = paired_interval(Pairs(both=59, lost=16, gained=6, neither=80))
    assert drop == pytest.approx((-0.1186, -0.0046), abs=1e-4)


@pytest.mark.parametrize(("counts", "expected"), NEWCOMBE_UNPAIRED_TABLE_II)
def test_unpaired_interval_matches_newcombe_1998_table_ii(counts, expected):
    solved_after, rollouts_after, solved_before, rollouts_before = counts
    interval = unpaired_interval(solved_before, rollouts_before, solved_after, rollouts_after)
    assert interval == pytest.approx(expected, abs=1e-4)


def binomial_two_sided(successes: int, trials: int) -> float:
    """The two-sided binomial test against one half from its definition: twice the smaller
    tail, at most one."""
    tail = min(successes, trials - successes)
    return min(1.0, 2 * sum(comb(trials, i) for i in range(tail + 1)) / 2**trials)


@pytest.mark.parametrize(
    ("lost", "gained"), [(6, 0), (0, 6), (7, 1), (1, 7), (10, 3), (5, 5), (12, 25), (1, 0)]
)
def test_mcnemar_p_is_the_exact_binomial_test_of_the_discordant_pairs(lost, gained):
    pairs = Pairs(both=40, lost=lost, gained=gained, neither=9)
    assert mcnemar_p(pairs) == pytest.approx(binomial_two_sided(gained, lost + gained), rel=1e-9)


def test_concordant_pairs_alone_give_p_one_and_a_zero_centred_interval():
    pairs = Pairs(both=54, lost=0, gained=0, neither=0)
    assert mcnemar_p(pairs) == 1.0
    low, high = paired_interval(pairs)
    assert low == pytest.approx(-high) and low < 0 < high


def test_an_interval_of_no_pairs_says_what_it_needs():
    with pytest.raises(ValueError, match="at least one pair of rollouts, got none"):
        paired_interval(Pairs(0, 0, 0, 0))
    with pytest.raises(ValueError, match="rollouts on both sides, got 0 before and 3 after"):
        unpaired_interval(0, 0, 1, 3)


P_VALUES = [0.01, 0.04, 0.03, 0.005, 0.2, 0.04]


def holm_by_definition(p: list[float]) -> list[float]:
    """Holm (1979): the i-th smallest p times (m - i + 1), made non-decreasing, at most 1."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    adjusted, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, (len(p) - rank) * p[i])
        adjusted[i] = min(1.0, running)
    return adjusted


def bh_by_definition(p: list[float]) -> list[float]:
    """Benjamini & Hochberg (1995): p_(j) m / j for the j-th smallest, the smallest of these
    over every p no smaller than this one, at most 1."""
    m, ranked = len(p), sorted(p)
    return [
        min(1.0, min(ranked[j] * m / (j + 1) for j in range(m) if ranked[j] >= value))
        for value in p
    ]


def test_holm_and_benjamini_hochberg_match_their_definitions():
    assert adjust(P_VALUES, Adjustment.HOLM) == pytest.approx(holm_by_definition(P_VALUES))
    assert adjust(P_VALUES, Adjustment.BH) == pytest.approx(bh_by_definition(P_VALUES))
    # Holm is the stricter: it bounds the chance of any false finding, BH their share.
    holm, bh = adjust(P_VALUES, Adjustment.HOLM), adjust(P_VALUES, Adjustment.BH)
    assert all(h >= b for h, b in zip(holm, bh, strict=True)) and holm != bh
    assert adjust([], Adjustment.HOLM) == []
