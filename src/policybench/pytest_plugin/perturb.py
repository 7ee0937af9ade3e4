"""`--perturb AXIS=LEVELS`: the run's arms are one policy on its scenes as they are (`none`)
and under each perturbation (policybench.perturbation), each paired by scene with `none`. The
option itself is read with the arms (pytest_plugin.options); this plugin refuses, before
anything runs, an axis a selected Eval lacks or a level outside its range."""

from __future__ import annotations

import pytest

from policybench.perturbation import refusals
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.rundir import settings_of

REFUSED = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)  # after --suite, -k and shards have selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    perturbations = [arm.perturbation for arm in settings_of(config).arms if arm.perturbation]
    if not perturbations:
        return
    checked: set[str] = set()
    for item in items:
        planned = planned_of(item)
        if planned is None or planned.eval.name in checked:
            continue
        checked.add(planned.eval.name)
        refused = refusals(planned.eval, perturbations)
        if refused is None:  # one Eval of several may lack an axis the others have
            continue
        message = f"{refused}; select the Evals to perturb with --suite or -k"
        if not hasattr(config, "workerinput"):
            raise pytest.UsageError(message)
        # In an xdist worker a UsageError ends the worker, and the controller loses its message
        # (an INTERNALERROR): every item errors with it instead, at setup, before anything runs.
        for each in items:
            each.stash[REFUSED] = message
        return


def pytest_runtest_setup(item: pytest.Item) -> None:
    refused = item.stash.get(REFUSED, None)
    if refused is not None:
        raise pytest.UsageError(refused)
