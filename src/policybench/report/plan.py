"""`policybench plan`: how many rollouts per task (and for an Eval) a claim about a change of
success rate needs, in the unpaired or the paired design, with the formula it comes from."""

from __future__ import annotations

import argparse
import math
import sys

from policybench.report.power import (
    ALPHA,
    PAIRED_FORMULA,
    POWER,
    UNPAIRED_FORMULA,
    Requirement,
    paired_requirement,
    unpaired_requirement,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="how many rollouts per task a claim about a change of success rate needs"
    )
    parser.add_argument(
        "--baseline",
        type=float,
        required=True,
        metavar="RATE",
        help="success rate of the policy you compare against (0..1), e.g. 0.7",
    )
    parser.add_argument(
        "--detect",
        type=float,
        required=True,
        metavar="CHANGE",
        help="smallest change of success rate to detect, either way, e.g. 0.1",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="every scene runs under both policies (the same plan twice)",
    )
    parser.add_argument(
        "--discordance",
        type=float,
        default=None,
        metavar="SHARE",
        help="with --paired: the share of scenes only one policy solves; an "
        "earlier comparison's (lost + gained) / pairs",
    )
    parser.add_argument("--power", type=float, default=POWER, help=f"default {POWER}")
    parser.add_argument(
        "--alpha", type=float, default=ALPHA, help=f"two-sided significance level (default {ALPHA})"
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--tasks", type=int, default=1, help="tasks in the Eval (default 1)")
    size.add_argument(
        "--eval",
        default=None,
        metavar="EVAL",
        help="count the tasks of this Eval (registered name or module:attribute)",
    )
    parser.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    problem = _problem(args)
    if problem:
        sys.exit(f"policybench plan: {problem}")
    tasks, name = args.tasks, None
    if args.eval is not None:
        from policybench.suites import eval_named

        try:
            value = eval_named(args.eval)
        except (LookupError, ImportError) as error:
            sys.exit(f"policybench plan: --eval {args.eval}: {error}")
        tasks, name = len({rollout.scene.task for rollout in value.rollouts(1, 0)}), value.name
    try:
        lines = plan_lines(
            args.baseline, args.detect, args.discordance, args.alpha, args.power, tasks, name
        )
    except ValueError as error:
        sys.exit(f"policybench plan: {error}")
    print("\n".join(lines))
    return 0


def _problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the numbers given, or None."""
    checks = [
        (0 <= args.baseline <= 1, f"--baseline is a success rate in [0, 1], got {args.baseline}"),
        (0 < args.detect < 1, f"--detect is a change of success rate in (0, 1), got {args.detect}"),
        (0 < args.alpha < 1, f"--alpha must lie in (0, 1), got {args.alpha}"),
        (0 < args.power < 1, f"--power must lie in (0, 1), got {args.power}"),
        (args.tasks >= 1, f"--tasks must be at least 1, got {args.tasks}"),
        (
            not args.paired or args.discordance is not None,
            "--paired needs --discordance SHARE: the share of scenes that only one of the two "
            "policies solves (an earlier paired comparison's (lost + gained) / pairs; 0.2 if "
            "you have no better guess)",
        ),
        (
            args.paired or args.discordance is None,
            "--discordance describes a paired design; add --paired",
        ),
        (
            args.discordance is None or 0 < args.discordance <= 1,
            f"--discordance is a share of scenes in (0, 1], got {args.discordance}",
        ),
    ]
    return next((message for ok, message in checks if not ok), None)


def plan_lines(
    baseline: float,
    detect: float,
    discordance: float | None,
    alpha: float = ALPHA,
    power: float = POWER,
    tasks: int = 1,
    eval: str | None = None,
) -> list[str]:
    """The plan as printed. Raises ValueError when no change either way is possible."""
    paired = discordance is not None

    def requirements(level: float) -> list[Requirement]:
        return _requirements(baseline, detect, discordance, level, power)

    unit = "scenes" if paired else "rollouts"
    design = (
        f"paired (every scene under both policies; exact McNemar test), {discordance:.0%} "
        "of scenes solved by only one policy"
        if paired
        else "unpaired (two runs, different scenes; Fisher's exact test)"
    )
    lines = [
        f"design: {design}",
        f"claim: a change of {detect * 100:.1f} points from {baseline:.1%}, two-sided alpha "
        f"{alpha:g}, power {power:.0%}",
        f"formula: {PAIRED_FORMULA if paired else UNPAIRED_FORMULA}",
    ]
    found = requirements(alpha)
    for row in found:
        lines.append(f"  {row.baseline:.1%} -> {row.target:.1%}: {_row(row, unit, power)}")
    needed = max(row.needed for row in found)
    lines.append(
        f"needed: {needed} scenes per task, each run under both policies ({2 * needed} rollouts)"
        if paired
        else f"needed: {needed} rollouts per task under each policy ({2 * needed} for both)"
    )
    if tasks > 1:
        strict = max(row.needed for row in requirements(alpha / tasks))
        lines += [
            f"{'eval ' + eval if eval else 'an Eval'} with {tasks} tasks:",
            f"  each task's own claim: {needed * tasks} {unit} in all ({needed} per task); "
            f"after adjusting across the {tasks} tasks (Bonferroni alpha {alpha / tasks:.3g}, "
            f"which bounds Holm and Benjamini-Hochberg): {strict} {unit} per task, "
            f"{strict * tasks} in all",
            f"  the Eval's pooled claim (every task changing alike): {needed} {unit} in all, "
            f"{math.ceil(needed / tasks)} per task",
        ]
    return lines


def _requirements(
    baseline: float, detect: float, discordance: float | None, alpha: float, power: float
) -> list[Requirement]:
    """What each claim of a change of `detect` (up, down, where the rate stays a rate) needs;
    ValueError when neither can be made."""
    found, problems = [], []
    for target in (baseline + detect, baseline - detect):
        if not 0 <= target <= 1:
            continue
        try:
            found.append(
                unpaired_requirement(baseline, target, alpha, power)
                if discordance is None
                else paired_requirement(baseline, target, discordance, alpha, power)
            )
        except ValueError as error:
            problems.append(str(error))
    if not found:
        raise ValueError("; ".join(problems) or f"no rate lies {detect:g} from {baseline:g}")
    return found


def _row(row: Requirement, unit: str, power: float) -> str:
    text = f"{row.rollouts} {unit} per task by the formula"
    if row.exact_power is None:
        return text + " (too many to check by the exact test)"
    text += f"; the exact test has {row.exact_power:.1%} power there"
    if row.exact_rollouts is None:
        return text + f" and does not reach {power:.0%} below {2 * row.rollouts}"
    if row.exact_rollouts > row.rollouts:
        return text + f" and reaches {power:.0%} at {row.exact_rollouts}"
    return text
