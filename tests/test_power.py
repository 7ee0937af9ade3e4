"""How many rollouts a claim needs: the sample-size formulas against published numbers and
references typed here from the formulas, the exact power of McNemar's and Fisher's tests against
brute-force enumeration, `policybench plan`, and the detectable change in the run's report."""

from __future__ import annotations

import json
import math
import re
from math import comb
from statistics import NormalDist

import pytest

from policybench.cli import main as policybench_main
from policybench.report.html import Findings, write_html
from policybench.report.power import (
    detectable_change,
    fisher_power,
    mcnemar_power,
    paired_requirement,
    paired_size,
    unpaired_size,
)
from policybench.report.summary import Summary

Z = NormalDist().inv_cdf


def fleiss(p1: float, p2: float, alpha: float = 0.05, power: float = 0.8) -> tuple[float, float]:
    """Fleiss, Levin & Paik (2003) eq. 4.14, and with the Fleiss, Tytun & Ury (1980) continuity
    correction: rollouts per group."""
    mean, delta = (p1 + p2) / 2, abs(p2 - p1)
    n = (
        Z(1 - alpha / 2) * math.sqrt(2 * mean * (1 - mean))
        + Z(power) * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    ) ** 2 / delta**2
    return n, n / 4 * (1 + math.sqrt(1 + 4 / (n * delta))) ** 2


def test_unpaired_size_is_fleiss_with_continuity_correction():
    # 70% vs 80%, two-sided 0.05, power 0.8: 294 per group uncorrected, 313 corrected.
    uncorrected, corrected = fleiss(0.7, 0.8)
    assert math.ceil(uncorrected) == 294 and math.ceil(corrected) == 313
    assert unpaired_size(0.7, 0.8) == pytest.approx(corrected, rel=1e-9)
    assert unpaired_size(0.3, 0.1, alpha=0.01, power=0.9) == pytest.approx(
        fleiss(0.3, 0.1, 0.01, 0.9)[1], rel=1e-9
    )


def test_paired_size_is_connors_formula():
    # Connor (1987) Biometrics 43:207, as worked in common calculators: p10 = 0.05, p01 = 0.45,
    # two-sided 0.05, power 0.8 -> 23 pairs.
    assert math.ceil(paired_size(0.4, 0.5)) == 23
    psi, delta = 0.2, 0.1
    reference = (Z(0.975) * math.sqrt(psi) + Z(0.8) * math.sqrt(psi - delta**2)) ** 2 / delta**2
    assert paired_size(-delta, psi) == pytest.approx(reference, rel=1e-9)


def exact_mcnemar_power_by_enumeration(n: int, lost: float, gained: float, alpha: float):
    """Every (lost, gained, concordant) split of n pairs, weighted by its multinomial
    probability, counted where the binomial(1/2) two-sided p of the discordant ones is < alpha."""
    total = 0.0
    for l_count in range(n + 1):
        for g_count in range(n + 1 - l_count):
            rest = n - l_count - g_count
            chance = (
                math.factorial(n)
                / (math.factorial(l_count) * math.factorial(g_count) * math.factorial(rest))
                * lost**l_count
                * gained**g_count
                * (1 - lost - gained) ** rest
            )
            d = l_count + g_count
            tail = min(l_count, g_count)
            p = 1.0 if d == 0 else min(1.0, 2 * sum(comb(d, i) for i in range(tail + 1)) / 2**d)
            total += chance * (p < alpha)
    return total


def hypergeometric(x: int, n: int, successes: int) -> float:
    """The chance that `x` of `successes` among two groups of `n` fall in the first group."""
    return comb(n, x) * comb(n, successes - x) / comb(2 * n, successes)


def exact_fisher_power_by_enumeration(n: int, p1: float, p2: float, alpha: float) -> float:
    """Every pair of counts, weighted by the two binomials, counted where Fisher's two-sided
    p (the hypergeometric probability of every table no likelier than this one) is < alpha."""
    total = 0.0
    for x1 in range(n + 1):
        for x2 in range(n + 1):
            s = x1 + x2
            splits = [hypergeometric(x, n, s) for x in range(max(0, s - n), min(n, s) + 1)]
            observed = hypergeometric(x1, n, s)
            p = sum(chance for chance in splits if chance <= observed * (1 + 1e-7))
            chance = comb(n, x1) * p1**x1 * (1 - p1) ** (n - x1)
            chance *= comb(n, x2) * p2**x2 * (1 - p2) ** (n - x2)
            total += chance * (p < alpha)
    return total


@pytest.mark.parametrize(("n", "lost", "gained"), [(12, 0.1, 0.3), (15, 0.05, 0.2), (9, 0.3, 0.3)])
def test_exact_mcnemar_power_matches_enumeration(n, lost, gained):
    expected = exact_mcnemar_power_by_enumeration(n, lost, gained, 0.05)
    assert mcnemar_power(n, lost, gained) == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("n", "p1", "p2"), [(8, 0.3, 0.8), (12, 0.5, 0.9), (10, 0.4, 0.4)])
def test_exact_fisher_power_matches_enumeration(n, p1, p2):
    expected = exact_fisher_power_by_enumeration(n, p1, p2, 0.05)
    assert fisher_power(n, p1, p2) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_paired_requirement_goes_past_the_formula_until_the_exact_test_has_the_power():
    row = paired_requirement(0.7, 0.8, 0.2)
    assert row.rollouts == math.ceil(paired_size(0.1, 0.2)) == 155
    lost, gained = 0.05, 0.15
    assert (
        row.exact_power == pytest.approx(mcnemar_power(155, lost, gained)) and row.exact_power < 0.8
    )
    assert mcnemar_power(row.exact_rollouts, lost, gained) >= 0.8
    assert mcnemar_power(row.exact_rollouts - 1, lost, gained) < 0.8


def test_a_discordance_that_cannot_carry_the_change_is_refused():
    with pytest.raises(ValueError, match=re.escape("lies between the change (0.1) and 0.2")):
        paired_requirement(0.95, 0.85, 0.05)


def test_plan_prints_rollouts_per_task_with_the_formula_and_the_eval_total(capsys):
    argv = ["plan", "--baseline", "0.7", "--detect", "0.1", "--tasks", "4"]
    assert policybench_main(argv) == 0
    out = capsys.readouterr().out
    assert "formula: Fleiss, Levin & Paik (2003) eq. 4.14" in out
    assert "70.0% -> 80.0%: 313 rollouts per task by the formula" in out
    drop = math.ceil(fleiss(0.7, 0.6)[1])  # the larger of the two directions
    assert f"needed: {drop} rollouts per task under each policy" in out
    assert f"each task's own claim: {4 * drop} rollouts in all" in out
    strict = math.ceil(fleiss(0.7, 0.6, alpha=0.05 / 4)[1])
    assert f"alpha 0.0125, which bounds Holm and Benjamini-Hochberg): {strict} rollouts" in out


def test_plan_for_a_paired_design_reports_scenes_and_the_exact_tests_count(capsys):
    argv = ["plan", "--baseline", "0.7", "--detect", "0.1", "--paired", "--discordance", "0.2"]
    assert policybench_main(argv) == 0
    out = capsys.readouterr().out
    assert "formula: Connor (1987) Biometrics 43:207" in out
    assert "70.0% -> 80.0%: 155 scenes per task by the formula" in out
    needed = int(re.search(r"needed: (\d+) scenes per task, each run under both", out)[1])
    assert needed > 155 and mcnemar_power(needed, 0.05, 0.15) >= 0.8


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--paired"], "--paired needs --discordance SHARE"),
        (["--discordance", "0.2"], "--discordance describes a paired design; add --paired"),
        (["--paired", "--discordance", "0.05"], "cannot carry a change from 0.7 to 0.8"),
        (["--alpha", "1.5"], "--alpha must lie in (0, 1), got 1.5"),
        (["--eval", "no-such-eval"], "--eval no-such-eval: no registered eval"),
    ],
)
def test_plan_says_what_is_wrong_with_its_numbers(argv, message):
    with pytest.raises(SystemExit) as refused:
        policybench_main(["plan", "--baseline", "0.7", "--detect", "0.1", *argv])
    assert message in str(refused.value)


def test_detectable_change_is_where_the_formula_needs_exactly_the_runs_rollouts():
    found = detectable_change(50, 0.7)
    assert fleiss(0.7, 0.7 - found.drop)[1] == pytest.approx(50, abs=1e-3)
    assert fleiss(0.7, 0.7 + found.rise)[1] == pytest.approx(50, abs=1e-3)
    assert found.drop > found.rise  # a drop from 70% is harder to see than a rise
    assert detectable_change(10, 1.0).rise is None and detectable_change(10, 1.0).drop
    assert detectable_change(3, 0.5) == detectable_change(3, 0.5, 0.05, 0.8)
    assert detectable_change(3, 0.5).drop is None  # three rollouts detect nothing


def test_summary_and_html_report_show_each_evals_detectable_change(tmp_path):
    records = [
        {"eval": "e", "task": "t", "outcome": "solved" if i < 35 else "unsolved", "steps": 5,
         "sim_s": 1.0, "wall_s": 0.01}
        for i in range(50)
    ]  # fmt: skip
    summary = Summary.of(records)
    found = detectable_change(50, 0.7)
    summary.write(tmp_path, None)
    written = json.loads((tmp_path / "summary.json").read_text())["evals"][0]
    assert written["detectable_change"]["drop"] == pytest.approx(found.drop)
    assert written["detectable_change"]["rise"] == pytest.approx(found.rise)
    html = write_html(tmp_path, Findings(summary, tuple(records), None)).read_text()
    expected = f"-{100 * found.drop:.0f} pts / +{100 * found.rise:.0f} pts"
    assert html.count(expected) == 2  # the Eval and the whole run
    assert "detectable change" in html
