"""Rollout traces: each rollout's compact trace (record/rollout_trace.py) written by the worker
that ran it into the run directory's traces/, named as its video is, and added to its record."""

from __future__ import annotations

import argparse
from collections.abc import Generator

import pytest

from policybench import keys
from policybench.policy.base import SessionContext
from policybench.pytest_plugin.collection import Planned, planned_of
from policybench.pytest_plugin.fixtures import EPISODE, add_observer, add_to_record, state_recorder
from policybench.pytest_plugin.rundir import run_dir_of, settings_of
from policybench.record.rollout_trace import rollout_trace, write_trace
from policybench.record.shadow import ShadowExpert
from policybench.registry import SCRIPTED
from policybench.run.layout import TRACES, video_name
from policybench.spec import Eval
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
        help=f"how many rollouts of each task (the first N of its plan) the Eval's built-in "
        f"expert watches when another policy drives, its action at each observation kept in "
        f"the trace for a diagnosis (default {SHADOWED}; 0: none; all: every rollout). Watching "
        "costs what the expert costs a step (PushT's reads the block's pose from pixels)",
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
    expert = _shadow(item, planned)
    if expert is not None:
        add_observer(item, expert)
    try:
        return (yield)
    finally:
        episode = item.stash.get(EPISODE, None)
        if episode is not None and episode.trace:
            name = f"{TRACES}/{video_name(item.nodeid)}.json"
            names = {
                entry: _named(item.config, planned.eval, entry, kept[0].size)
                for entry, kept in states.states.items()
                if kept
            }
            trace = rollout_trace(episode, states, names, expert, states.precise)
            write_trace(run_dir_of(item.config) / name, trace)
            add_to_record(item, {keys.ROLLOUT_TRACE: name})


def _shadow(item: pytest.Item, planned: Planned) -> ShadowExpert | None:
    """The Eval's expert, to watch a rollout another policy drives (what a diagnosis of a run
    far below expectation compares the policy's actions with), on the first --expert-shadow
    rollouts of each task; None where there is none, or the rollout is not among them."""
    eval, rollout = planned.eval, planned.rollout
    arm = planned.arm or settings_of(item.config).arms[0]
    if eval.scripted is None or arm.policy == SCRIPTED:
        return None
    watched = item.config.getoption("expert_shadow", SHADOWED)
    if watched is not None and _ordinal_in_task(item.config, planned) >= watched:
        return None  # a bounded sample: the first rollouts of each task
    facing = {name: rollout.scene.fields[name] for name in eval.policy_facing}
    try:
        model = eval.scripted()
    except Exception:  # the policy's run goes on; its diagnosis has no expert to compare with
        return None
    return ShadowExpert(model, SessionContext(rollout.instruction, eval.control_hz, facing))


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
