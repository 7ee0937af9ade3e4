"""Trajectory specs (policybench.trajectory) in a run: each rollout of an Eval is held to the
specs the Eval declares and those a conftest.py adds (`pytest_policybench_specs`). Its record
keeps each spec's margin (`specs`) and the Eval's specs (`trajectory_specs`, part of the
protocol); a violated spec fails the item with an assertion naming the spec, the step, the
signals' values there and the margin, while the rollout's outcome stays what the env said.

A spec that names a signal no rollout of its Eval can have is refused before anything runs, as
is one that reads observations under --envs-per-worker K (side by side rollouts record none)."""

from __future__ import annotations

from collections.abc import Generator, Sequence

import pytest

from policybench import keys
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.fixtures import EPISODE, add_to_record, state_recorder
from policybench.pytest_plugin.lockstep import slots_of
from policybench.pytest_plugin.refusals import refuse
from policybench.record.rollout_trace import StateRecorder
from policybench.spec import Eval
from policybench.trajectory import TrajectorySpec
from policybench.trajectory.library import spec_values
from policybench.trajectory.signals import BASE, signals_of, unknown_names

SPECS = pytest.StashKey[dict[str, tuple[TrajectorySpec, ...]]]()  # eval name -> its specs


class SpecViolated(AssertionError):
    """A rollout broke a trajectory spec of its Eval."""


class SpecUnjudged(Exception):
    """A trajectory spec could not be judged on a rollout (a signal of another shape, say)."""


def specs_of(config: pytest.Config, eval: Eval) -> tuple[TrajectorySpec, ...]:
    """The specs `eval`'s rollouts are held to: its own, then those conftests add."""
    known = config.stash.setdefault(SPECS, {})
    if eval.name not in known:
        added = config.hook.pytest_policybench_specs(config=config, eval=eval)
        specs = (*eval.specs, *(spec for found in added if found for spec in found))
        wrong = [spec for spec in specs if not isinstance(spec, TrajectorySpec)]
        if wrong:
            raise pytest.UsageError(
                f"{eval.name}: a trajectory spec must be a policybench.trajectory.TrajectorySpec, "
                f"got {wrong[0]!r}"
            )
        known[eval.name] = specs
    return known[eval.name]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuses, before anything runs, a spec naming a signal its Eval's rollouts cannot have."""
    checked: set[str] = set()
    for item in items:
        planned = planned_of(item)
        if planned is None or planned.eval.name in checked:
            continue
        eval = planned.eval
        checked.add(eval.name)
        known = {*BASE, *eval.signals}
        slots = slots_of(config)
        for spec in specs_of(config, eval):
            if slots > 1 and spec.signal_names() - set(BASE):
                return refuse(
                    config,
                    items,
                    f"{eval.name}: trajectory spec {spec.name!r} reads observations, which "
                    f"--envs-per-worker {slots} does not record (rollouts run side by side); "
                    "run it with --envs-per-worker 1, or hold it to action, reward and success "
                    "signals alone",
                )
            unknown = unknown_names(spec.signal_names(), known)
            if unknown:
                return refuse(
                    config,
                    items,
                    f"{eval.name}: trajectory spec {spec.name!r} names signal "
                    f"{', '.join(unknown)}, which its rollouts do not have; they have "
                    f"{', '.join(sorted(known))}, and obs.NAME for an observation entry NAME",
                )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    planned = planned_of(item)
    specs = () if planned is None else specs_of(item.config, planned.eval)
    if not specs:
        return (yield)
    assert planned is not None
    states = state_recorder(item)
    add_to_record(item, {keys.TRAJECTORY_SPECS: [repr(spec) for spec in specs]})
    result = yield  # a rollout that broke (an error) raises here: it has nothing to judge
    episode = item.stash.get(EPISODE, None)
    if episode is not None and episode.trace:
        _judge(item, planned.eval, specs, episode.trace, states)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A violated or unjudged spec is reported by its message alone, as an assertion is."""
    report = yield
    if call.excinfo is not None and isinstance(call.excinfo.value, SpecViolated | SpecUnjudged):
        report.longrepr = str(call.excinfo.value)
    return report


def _judge(
    item: pytest.Item,
    eval: Eval,
    specs: Sequence[TrajectorySpec],
    trace: Sequence,
    states: StateRecorder,
) -> None:
    """Records each spec's margin; raises SpecViolated naming the violated ones."""
    margins = {}
    judging = "its signals"
    try:
        signals = signals_of(trace, states.states, eval.control_hz, eval.signals)
        for spec in specs:
            judging = f"trajectory spec {spec.name!r}"
            margins[spec.name] = spec.margin(signals)
    except (KeyError, ValueError, IndexError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise SpecUnjudged(f"{eval.name}: cannot judge {judging}: {message}") from None
    add_to_record(item, {keys.SPECS: {name: spec_values(m) for name, m in margins.items()}})
    broken = [(name, margin) for name, margin in margins.items() if not margin.held]
    if broken:
        period = 1 / eval.control_hz
        lines = [
            f"trajectory spec {name!r} violated at step {m.step} (t={m.time_s:g} s): margin "
            f"{m.value:.4g}; {', '.join(f'{k}={v}' for k, v in m.values.items())}"
            + ("" if m.first is None else f" (first at step {m.first}, t={m.first * period:g} s)")
            for name, m in broken
        ]
        raise SpecViolated("\n".join(lines))
