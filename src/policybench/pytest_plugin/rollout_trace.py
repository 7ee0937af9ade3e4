"""Rollout traces: each rollout's compact trace (record/rollout_trace.py) written by the worker
that ran it into the run directory's traces/, named as its video is, and added to its record."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.policy.base import Model, SessionContext
from policybench.pytest_plugin.collection import Planned, planned_of
from policybench.pytest_plugin.fixtures import EPISODE, add_observer, add_to_record, state_recorder
from policybench.pytest_plugin.rundir import run_dir_of, settings_of
from policybench.record.rollout_trace import (
    EXPERT_ACTION,
    KEPT_OBSERVATIONS,
    rollout_trace,
    write_trace,
)
from policybench.record.shadow import ObservationKeeper
from policybench.registry import SCRIPTED
from policybench.run.layout import KEPT, TRACES, video_name
from policybench.spec import Eval
from policybench.suites import eval_named
from policybench.trajectory.signals import element_names

SHADOWED = 1  # rollouts of each task the Eval's expert watches, by default


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--no-rollout-traces",
        action="store_true",
        help="write no per-rollout trace (traces/: actions, rewards, model calls and small "
        "state vectors per step, which each rollout's report page plots)",
    )
    group.addoption(
        "--expert-shadow",
        type=_shadowed,
        default=SHADOWED,
        metavar="N|all",
        help=f"how many rollouts of each task (the first N of its plan) keep the observations "
        f"the Eval's built-in expert reads when another policy drives, for a diagnosis to "
        f"replay the expert on after the run and set its actions beside the policy's (default "
        f"{SHADOWED}; 0: none; all: every rollout). Keeping is a copy a step; the expert runs "
        "only for a diagnosis that reads it",
    )


def _shadowed(text: str) -> int | None:
    """--expert-shadow's value: a count of rollouts a task, or None for all of them."""
    if text == "all":
        return None
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a count >= 0 or `all`, got {text!r}")
    return count


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    planned = planned_of(item)
    if item.config.getoption("no_rollout_traces", False) or planned is None:
        return (yield)
    states = state_recorder(item)
    keeper = _keeper(item, planned)
    if keeper is not None:
        add_observer(item, keeper)
    try:
        return (yield)
    finally:
        episode = item.stash.get(EPISODE, None)
        if episode is not None and episode.trace:
            name = video_name(item.nodeid)
            names = {
                entry: _named(item.config, planned.eval, entry, kept[0].size)
                for entry, kept in states.states.items()
                if kept
            }
            trace = rollout_trace(episode, states, names, states.precise)
            if keeper is not None:
                _keep(item, planned, keeper, trace, name)
            write_trace(run_dir_of(item.config) / f"{TRACES}/{name}.json", trace)
            add_to_record(item, {keys.ROLLOUT_TRACE: f"{TRACES}/{name}.json"})


def _keeper(item: pytest.Item, planned: Planned) -> ObservationKeeper | None:
    """What keeps the observations the Eval's expert reads, for a diagnosis to replay the
    expert on after the run (what it compares the policy's actions with), on the first
    --expert-shadow rollouts of each task another policy drives; None where the Eval has no
    expert, or the rollout is not among them."""
    eval = planned.eval
    arm = planned.arm or settings_of(item.config).arms[0]
    if eval.scripted is None or arm.policy == SCRIPTED:
        return None
    watched = item.config.getoption("expert_shadow", SHADOWED)
    if watched is not None and _ordinal_in_task(item.config, planned) >= watched:
        return None  # a bounded sample: the first rollouts of each task
    return ObservationKeeper(eval.expert_reads)


def _keep(
    item: pytest.Item, planned: Planned, keeper: ObservationKeeper, trace: dict, name: str
) -> None:
    """Writes what `keeper` kept beside the rollout's trace and names it there (or says in
    the trace why nothing was kept)."""
    eval, rollout = planned.eval, planned.rollout
    # Where the run's diagnosis finds the Eval again: as pytest imported its declaration (the
    # benchmark file's folder first on the path), or by its registered name.
    expert = {keys.EVAL: eval.name, "ref": planned.eval_ref, "folder": str(item.path.parent)}
    facing = {field: rollout.scene.fields[field] for field in eval.policy_facing}
    context = SessionContext(rollout.instruction, eval.control_hz, facing)
    path = f"{KEPT}/{name}.npz"
    try:
        why_not = keeper.write(run_dir_of(item.config) / path, trace[keys.STEPS], context, expert)
    except (OSError, TypeError, ValueError) as error:  # keeping never fails the rollout
        why_not = f"{type(error).__name__}: {error}"
    if why_not is None:
        trace[KEPT_OBSERVATIONS] = path
    else:
        trace["state_left_out"][EXPERT_ACTION] = f"nothing kept for the expert: {why_not}"


def expert_finder(config: pytest.Config) -> Callable[[Mapping[str, Any]], Model]:
    """What makes, in this run's controller, the expert of an Eval a kept file names: an Eval
    registered by that name, or the `module:attribute` pytest imported its declaration from,
    the module's folder first on the path as pytest's default import mode puts it, and only a
    folder within the run's root (what the run itself ran, not what a file says)."""
    root = config.rootpath.resolve()

    def expert_of(found: Mapping[str, Any]) -> Model:
        eval = _found_eval(found, root)
        if eval.scripted is None:
            raise LookupError(f"the Eval {eval.name!r} has no expert")
        return eval.scripted()

    return expert_of


def _found_eval(found: Mapping[str, Any], root: Path) -> Eval:
    ref, folder, name = found.get("ref"), found.get("folder"), str(found.get(keys.EVAL))
    if isinstance(ref, str) and isinstance(folder, str):
        path = Path(folder).resolve()
        if path.is_relative_to(root) and path.is_dir():
            if str(path) not in sys.path:
                sys.path.insert(0, str(path))
            try:
                return eval_named(ref)
            except LookupError:
                pass  # a registered Eval is found by its name
    return eval_named(name)


ORDINALS = pytest.StashKey[dict[str, list[int]]]()


def _ordinal_in_task(config: pytest.Config, planned: Planned) -> int:
    """Which of its task's rollouts in the Eval's plan `planned` runs (0: the task's first),
    found once per Eval in a process."""
    found = config.stash.setdefault(ORDINALS, {})
    eval = planned.eval
    if eval.name not in found:
        settings = settings_of(config)
        seen: dict[str, int] = {}
        ordinals = []
        for rollout in eval.rollouts(settings.rollouts, settings.policy_settings.seed):
            ordinals.append(seen.get(rollout.scene.task, 0))
            seen[rollout.scene.task] = ordinals[-1] + 1
        found[eval.name] = ordinals
    ordinals = found[eval.name]
    index = planned.rollout.index
    return ordinals[index] if index < len(ordinals) else index


NAMED = pytest.StashKey[dict[tuple[str, str, int], dict[int, str]]]()


def _named(config: pytest.Config, eval: Eval, entry: str, width: int) -> dict[int, str]:
    """The names an Eval's signals give an observation entry's numbers (element_names), and for
    its state the names of the parts its contract lays it out in where the signals name none;
    found once per Eval and entry in a process, not once per rollout."""
    found = config.stash.setdefault(NAMED, {})
    key = (eval.name, entry, width)
    if key not in found:
        laid_out = eval.contract.state_names(width) if eval.contract and entry == keys.STATE else {}
        found[key] = {**laid_out, **element_names(eval.signals, entry, width)}
    return found[key]
