"""Rollout traces: each rollout's compact trace (record/rollout_trace.py) written by the worker
that ran it into the run directory's traces/, named as its video is, and added to its record."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from policybench import keys
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.fixtures import EPISODE, add_to_record, state_recorder
from policybench.pytest_plugin.rundir import run_dir_of
from policybench.record.rollout_trace import rollout_trace, write_trace
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
            write_trace(run_dir_of(item.config) / name, rollout_trace(episode, states, names))
            add_to_record(item, {keys.ROLLOUT_TRACE: name})


NAMED = pytest.StashKey[dict[tuple[str, str, int], dict[int, str]]]()


def _named(config: pytest.Config, eval: Eval, entry: str, width: int) -> dict[int, str]:
    """The names an Eval's signals give an observation entry's numbers (element_names), found
    once per Eval and entry in a process, not once per rollout."""
    found = config.stash.setdefault(NAMED, {})
    key = (eval.name, entry, width)
    if key not in found:
        found[key] = element_names(eval.signals, entry, width)
    return found[key]
