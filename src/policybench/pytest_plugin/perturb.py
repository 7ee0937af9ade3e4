"""`--perturb AXIS=LEVELS`: the run's arms are one policy on its scenes as they are (`none`)
and under each perturbation (policybench.perturbation), each paired by scene with `none`. The
option itself is read with the arms (pytest_plugin.options); this plugin refuses, before
anything runs, an axis a selected Eval lacks or a level outside its range."""

from __future__ import annotations

import pytest

from policybench.perturbation import refusals
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.refusals import refuse
from policybench.pytest_plugin.rundir import settings_of


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
        if refused is not None:  # one Eval of several may lack an axis the others have
            why = f"{refused}; select the Evals to perturb with --suite or -k"
            return refuse(config, items, why)
