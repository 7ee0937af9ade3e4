"""Goldens that hold on any x86-64 machine: where a suite's simulated values depend on the CPU's
numerics, its goldens state a tolerance (CpuNumerics) and accept what another CPU produced (the
values below were seen on another machine: robomimic's Transport under another OpenBLAS kernel
family, ManiSkill's PhysX on another CPU), while everything the pipeline computes (timing,
commands, outcomes) stays exact; a mismatch says first what differs in how the two were made."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from policybench.record.golden import GoldenExtension, dumps
from policybench.record.trace import CPU_TOLERANCE, PIXEL, differences

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"
TRANSPORT = GOLDENS / "test_robomimic" / "test_robomimic_golden[robomimic-transport].json"
PEG = GOLDENS / "test_maniskill" / "test_maniskill_golden[maniskill-peg-insertion-side].json"


def stored(path: Path) -> dict:
    golden = json.loads(path.read_text())
    assert CPU_TOLERANCE in golden, f"{path.name} states no CPU tolerance"
    return golden


def test_robomimic_transport_accepts_the_values_another_kernel_family_produced():
    golden = stored(TRANSPORT)
    other = copy.deepcopy(golden)
    assert other["trace"][2]["obs"]["object"][26] == pytest.approx(0.8045254977372683, abs=1e-15)
    other["trace"][2]["obs"]["object"][26] = 0.804514047652276  # seen with OpenBLAS's Prescott
    image = other["trace"][3]["obs"]["shouldercamera0_image"]
    image[0][10][10] += PIXEL  # a camera pixel one level apart
    assert differences(golden, other) == []


PUSH_T = GOLDENS / "test_maniskill" / "test_maniskill_golden[maniskill-push-t].json"


@pytest.mark.parametrize(
    ("path", "entry", "step", "index", "here", "there"),
    [  # the goldens' values (this machine's) and another x86-64 machine's, both OpenBLAS SkylakeX
        (PEG, "state", 6, 12, 0.5245123505592346, 0.5245177745819092),
        (PUSH_T, "agent/qvel", 3, 1, 0.25117403268814087, 0.2511726915836334),
        (PUSH_T, "agent/qvel", 6, 5, 0.347074419260025, 0.3471747636795044),
    ],
)
def test_maniskill_accepts_the_values_physx_produced_on_another_cpu(
    path, entry, step, index, here, there
):
    golden = stored(path)
    other = copy.deepcopy(golden)
    values = other["trace"][step]["obs"][entry]
    assert values[index] == pytest.approx(here, abs=1e-15)
    values[index] = there
    assert differences(golden, other) == []


def brighten(channel: list[list[float]]) -> None:
    """A patch of an image a quarter of a side wide made brighter by a tenth: a thing that
    moved, not an edge that shifted by a fraction of a pixel."""
    for row in channel[:21]:
        row[:21] = [min(value + 0.1, 1.0) for value in row[:21]]


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("command", lambda step: step["command"].__setitem__(0, step["command"][0] + 1e-3)),
        ("time", lambda step: step.__setitem__("time_ns", step["time_ns"] + 1)),
        ("success", lambda step: step.__setitem__("success", not step["success"])),
        (
            "object",
            lambda step: step["obs"]["object"].__setitem__(26, step["obs"]["object"][26] + 0.01),
        ),
        ("image", lambda step: brighten(step["obs"]["shouldercamera0_image"][0])),
    ],
)
def test_what_the_pipeline_computes_stays_exact_and_a_real_change_still_fails(where, change):
    golden = stored(TRANSPORT)
    other = copy.deepcopy(golden)
    change(other["trace"][2])
    assert differences(golden, other), f"a change of the {where} passed the golden"


def test_a_mismatch_names_the_numerics_and_packages_that_differ_first():
    golden = stored(TRANSPORT)
    other = copy.deepcopy(golden)
    other["recorded_with"]["numerics"]["blas"][0]["architecture"] = "Prescott"
    other["recorded_with"]["packages"]["mujoco"] = "2.3.8"
    other["trace"][2]["command"][0] += 1.0
    extension = GoldenExtension.__new__(GoldenExtension)
    lines = list(extension.diff_lines(dumps(other), dumps(golden)))
    assert lines[0].startswith(
        "this golden was recorded on other numerics (BLAS kernels openblas SkylakeX -> openblas "
        "Prescott): its values are compared within the tolerance it states"
    ), lines
    assert lines[1].startswith("packages differ from the golden's record: mujoco 2.3.7 -> 2.3.8")
    assert "pytest benchmarks/ --env-pins 'mujoco==2.3.8'" in lines[1]
    assert any("trace[2].command[0]" in line for line in lines)
