"""Collection: `@policybench.evaluate(*evals)` turns a test function into one item per Rollout."""

from __future__ import annotations

import importlib.util

import pytest

from policybench.spec import Eval, Rollout

MARKER = "policybench_evaluate"


def evaluate(*evals: Eval) -> pytest.MarkDecorator:
    """Runs the decorated `test_x(rollout, harness)` once per planned Rollout of `evals`."""
    if not evals or not all(isinstance(candidate, Eval) for candidate in evals):
        raise TypeError(f"evaluate() takes one or more Evals, got {evals!r}")
    return getattr(pytest.mark, MARKER)(*evals)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*evals): run this test once per planned Rollout of the Evals"
    )


def evals_of(node: pytest.Item | pytest.Function) -> dict[str, Eval]:
    marker = node.get_closest_marker(MARKER)
    return {} if marker is None else {candidate.name: candidate for candidate in marker.args}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    from policybench.pytest_plugin.fixtures import settings_of

    settings = settings_of(metafunc.config)
    params, seen = [], {}
    for eval in marker.args:
        skip = _missing_requirement(eval)
        rollouts = eval.rollouts(settings.rollouts, settings.policy_settings.seed)
        if not rollouts:
            # An Eval that plans nothing is a visible error, not a silently empty collection.
            params.append(pytest.param(eval, id=f"{eval.name}/no-rollouts"))
            continue
        for rollout in rollouts:
            if rollout.id in seen:
                raise pytest.UsageError(
                    f"rollout id {rollout.id!r} is planned by both {seen[rollout.id]!r} and "
                    f"{eval.name!r} in {metafunc.definition.nodeid}; give them distinct task names "
                    "or declare them in separate test functions"
                )
            seen[rollout.id] = eval.name
            params.append(pytest.param(rollout, id=rollout.id, marks=skip))
    metafunc.parametrize("rollout", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from policybench.pytest_plugin.fixtures import settings_of

    wanted = settings_of(config).suites
    if not wanted:
        return
    keep, drop = [], []
    for item in items:
        name = _eval_name(item)
        (drop if name is not None and not any(text in name for text in wanted) else keep).append(
            item
        )
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _eval_name(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or MARKER not in {mark.name for mark in item.iter_markers()}:
        return None
    planned = callspec.params.get("rollout")
    return planned.eval if isinstance(planned, Rollout) else getattr(planned, "name", None)


def _missing_requirement(eval: Eval) -> tuple[pytest.MarkDecorator, ...]:
    """A skip mark naming the extra to install when the Eval's simulator is absent."""
    missing = [name for name in eval.requires if importlib.util.find_spec(name) is None]
    if not missing:
        return ()
    extra = f"pip install 'policybench[{eval.extra}]'" if eval.extra else "install it"
    extra = eval.install or extra
    return (pytest.mark.skip(reason=f"{eval.name}: {', '.join(missing)} not installed; {extra}"),)
