"""Rollout traces: each rollout's compact trace (record/rollout_trace.py) written by the worker
that ran it into the run directory's traces/, named as its video is, and added to its record."""

from __future__ import annotations

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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("policybench").addoption(
        "--no-rollout-traces",
        action="store_true",
        help="write no per-rollout trace (traces/: actions, rewards, model calls and small "
        "state vectors per step, which each rollout's report page plots)",
    )


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
    far below expectation compares the policy's actions with); None where there is none."""
    eval, rollout = planned.eval, planned.rollout
    arm = planned.arm or settings_of(item.config).arms[0]
    if eval.scripted is None or arm.policy == SCRIPTED:
        return None
    facing = {name: rollout.scene.fields[name] for name in eval.policy_facing}
    try:
        model = eval.scripted()
    except Exception:  # the policy's run goes on; its diagnosis has no expert to compare with
        return None
    return ShadowExpert(model, SessionContext(rollout.instruction, eval.control_hz, facing))


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
