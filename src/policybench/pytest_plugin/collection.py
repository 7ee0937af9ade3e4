"""Collection: `@policybench.parametrize(*evals)` turns a test function into one item per Rollout
(in an A/B run, per Rollout and arm: a scene's arms side by side, scenes in plan order). Each
item carries its Eval, Rollout and arm (`planned_of(item)`); nothing looks an Eval up by name."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from typing import Any

import pytest

from policybench import keys
from policybench.envserver import Isolated, remote
from policybench.envserver.interpreters import (
    InterpreterBuildFailed,
    InterpreterMissing,
    install,
    install_command,
    python_of,
)
from policybench.perturbation import perturbed
from policybench.pins import under_pins
from policybench.pytest_plugin.arms import Arm, Assignment, assign_balanced, item_id
from policybench.pytest_plugin.options import RunSettings
from policybench.pytest_plugin.rundir import settings_of
from policybench.spec import Eval, Rollout
from policybench.suites import reference_in

MARKER = "policybench_evaluate"
PLANNED = pytest.StashKey["Planned"]()


@dataclass(frozen=True)
class Planned:
    """What one item runs: a Rollout of an Eval, and where the Eval is declared (`module:attr`,
    so a policybench server can import it; None when it is not held at module level)."""

    eval: Eval
    rollout: Rollout
    eval_ref: str | None = None
    arm: Arm | None = None  # in an A/B run, the arm this item runs (None: the run's one policy)
    assignment: Assignment | None = None  # how the scene was given this one arm (--assign)

    def record_fields(self) -> dict[str, Any]:
        """What the rollout's record says of its arm (nothing in a one-policy run)."""
        if self.arm is None:
            return {}
        fields: dict[str, Any] = {keys.ARM: self.arm.label}
        if self.arm.perturbation is not None:
            fields[keys.PERTURBATION] = self.arm.perturbation.as_json()
        if self.assignment is not None:
            fields[keys.ASSIGNMENT] = self.assignment.as_record()
        return fields


def parametrize(*evals: Eval) -> pytest.MarkDecorator:
    """Runs the decorated `test_x(rollout, harness)` once per planned Rollout of `evals`."""
    if not evals or not all(isinstance(candidate, Eval) for candidate in evals):
        raise TypeError(f"parametrize() takes one or more Evals, got {evals!r}")
    return getattr(pytest.mark, MARKER)(*evals)


def planned_of(item: pytest.Item) -> Planned | None:
    """The Eval and Rollout an item runs; None for any other test."""
    return item.stash.get(PLANNED, None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*evals): run this test once per planned Rollout of the Evals"
    )


@pytest.fixture
def rollout(request: pytest.FixtureRequest) -> Rollout:
    """The Rollout this item runs (an item of `@policybench.parametrize`)."""
    planned = getattr(request, "param", None)
    if not isinstance(planned, Planned):
        raise pytest.UsageError(
            f"{request.node.nodeid} asks for `rollout` but is not declared with "
            "@policybench.parametrize(*evals)"
        )
    return planned.rollout


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    settings = settings_of(metafunc.config)
    params, seen = [], {}
    for eval in marker.args:
        skip = _missing_requirement(eval)
        ref = reference_in(eval, metafunc.module)
        rollouts = eval.rollouts(settings.rollouts, settings.policy_settings.seed)
        if not rollouts:
            raise ValueError(
                f"eval {eval.name!r} planned no rollouts (--rollouts={settings.rollouts}); ask "
                "for at least one per task"
            )
        arms = arms_of(rollouts, settings)
        for planned in rollouts:
            if planned.id in seen:
                raise pytest.UsageError(
                    f"rollout id {planned.id!r} is planned by both {seen[planned.id]!r} and "
                    f"{eval.name!r} in {metafunc.definition.nodeid}; give them distinct task "
                    "names or declare them in separate test functions"
                )
            seen[planned.id] = eval.name
            for arm in arms[planned.index]:
                played = perturbed(planned, arm and arm.perturbation, eval)
                mine = eval if arm is None or arm.pins is None else _under_pins(eval, arm)
                ran = Planned(mine, played, ref, arm, settings.assignment if arm else None)
                id = planned.id if arm is None else item_id(planned.id, arm)
                params.append(pytest.param(ran, id=id, marks=skip))
    metafunc.parametrize("rollout", params, indirect=True)


_PINNED: dict[tuple[str, str], Eval] = {}


def _under_pins(eval: Eval, arm: Arm) -> Eval:
    """The Eval as the arm's candidate pins run it, its interpreter built on first use (one
    object a process, so that its rollouts share their envs)."""
    assert arm.pins is not None
    key = (eval.name, arm.label)
    if key not in _PINNED:
        try:
            pinned = under_pins(eval, arm.pins)
            assert isinstance(pinned.make_env, Isolated)
            install(pinned.make_env.interpreter)  # once, under a lock other processes wait on
        except (ValueError, InterpreterBuildFailed) as error:
            raise pytest.UsageError(f"--env-pins {' '.join(arm.pins.pins)}: {error}") from None
        _PINNED[key] = pinned
    return _PINNED[key]


def arms_of(plan: tuple[Rollout, ...], settings: RunSettings) -> dict[int, tuple[Arm | None, ...]]:
    """The arms each planned scene (by rollout index) runs under: every arm, its one assigned
    arm (--assign), or, in a one-policy run, the run's policy (None)."""
    if not settings.ab:
        return {rollout.index: (None,) for rollout in plan}
    if settings.assignment is None:
        return {rollout.index: settings.arms for rollout in plan}
    eval = plan[0].eval if plan else ""
    assigned = assign_balanced(eval, plan, settings.arms, settings.assignment.seed)
    return {index: (arm,) for index, arm in assigned.items()}


def pytest_itemcollected(item: pytest.Item) -> None:
    callspec = getattr(item, "callspec", None)
    planned = None if callspec is None else callspec.params.get("rollout")
    if isinstance(planned, Planned):
        item.stash[PLANNED] = planned


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = settings_of(config).suites
    if not wanted:
        return
    keep, drop = [], []
    for item in items:
        planned = planned_of(item)
        unwanted = planned is not None and not any(text in planned.eval.name for text in wanted)
        (drop if unwanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# A skip reason of `_missing_requirement`: the Eval's name, then what is missing and what to do.
NOT_INSTALLED = re.compile(r"^(?:Skipped: )?([^:]+): (.+ not installed; .+)$")


def _missing_requirement(eval: Eval) -> tuple[pytest.MarkDecorator, ...]:
    """A skip mark naming the extra to install when the Eval's simulator is absent, or, for an
    Eval isolated in an interpreter of its own, the command that builds the interpreter when it
    is not built (unless an env server elsewhere serves it: --env-url)."""
    if isinstance(eval.make_env, Isolated) and remote.endpoint_in_use() is None:
        interpreter = eval.make_env.interpreter
        try:
            python_of(interpreter)
        except InterpreterMissing:
            return (
                pytest.mark.skip(
                    reason=f"{eval.name}: its interpreter {interpreter.name!r} not installed; "
                    f"build it with `{install_command(interpreter)}` (or run it on a machine "
                    "that has it, with --env-url)"
                ),
            )
    missing = [name for name in eval.requires if importlib.util.find_spec(name) is None]
    if not missing:
        return ()
    extra = f"pip install 'policybench[{eval.extra}]'" if eval.extra else "install it"
    extra = eval.install or extra
    return (pytest.mark.skip(reason=f"{eval.name}: {', '.join(missing)} not installed; {extra}"),)


def not_installed(report: pytest.TestReport) -> tuple[str, str] | None:
    """(Eval name, what is missing and how to install it) when `report` skipped a rollout
    because its Eval's simulator is not installed."""
    if not (report.skipped and report.when == "setup" and isinstance(report.longrepr, tuple)):
        return None
    found = NOT_INSTALLED.match(report.longrepr[2])
    return None if found is None else (found[1], found[2])


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    """A suite that is not installed is summed up in one line at the end, not one `s` per item
    (`-rs` still lists them, and the skipped count stays)."""
    if not_installed(report) is not None:
        return "skipped", "", "SKIPPED"
    return None
