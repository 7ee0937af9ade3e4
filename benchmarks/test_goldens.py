"""Golden traces: the chunk pipeline and each suite's simulator, pinned under goldens/.

Review a change with `pytest benchmarks/ -m golden`; accept it with `--snapshot-update`.
"""

import importlib.util

import pytest

from benchmarks.golden_pipelines import (
    PERTURBED_GOLDENS,
    PERTURBED_SIM_GOLDENS,
    SIM_GOLDENS,
    SIM_REQUIRES,
    pipeline_trace,
    sim_trace,
)

pytestmark = pytest.mark.golden


def test_pipeline_golden(golden):
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    assert pipeline_trace() == golden


@pytest.mark.parametrize("axis", PERTURBED_GOLDENS)
def test_perturbed_pipeline_golden(axis, golden):
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    assert pipeline_trace(perturbation=PERTURBED_GOLDENS[axis]) == golden


@pytest.mark.parametrize("name", PERTURBED_SIM_GOLDENS)
def test_perturbed_sim_golden(name, golden):
    if importlib.util.find_spec(SIM_REQUIRES[name]) is None:
        pytest.skip(f"{SIM_REQUIRES[name]} not installed")
    perturbation = PERTURBED_SIM_GOLDENS[name]
    traced = sim_trace(name, perturbation=perturbation)
    assert traced == golden
    assert traced != sim_trace(name)  # the perturbation reached what the golden pins


@pytest.mark.parametrize("name", SIM_GOLDENS)
def test_sim_golden(name, golden):
    if importlib.util.find_spec(SIM_REQUIRES[name]) is None:
        pytest.skip(f"{SIM_REQUIRES[name]} not installed")
    assert sim_trace(name) == golden
