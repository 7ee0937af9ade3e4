"""A run that ends far below expectation says why, from its own traces: MetaWorld's expert run
through a wrapper that breaks one convention (the gripper's sign, the order of two action
dimensions, the image's orientation: the usual causes of an official checkpoint's silent 0%)
ends with a diagnosis naming that convention, and the expert itself is not diagnosed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("metaworld")

BENCHMARK = """
import dataclasses

import policybench
from policybench.spec import seeded_per_task
from policybench.suites.metaworld import MT10, MT10_STATE, mt10

# A small camera, and rollouts cut at 0.5 s: what the image's diagnosis reads is the preflight.
CAMERA = dataclasses.replace(
    mt10(camera="corner", size=64), plan=seeded_per_task(MT10, timeout_s=0.5)
)


@policybench.parametrize(MT10_STATE)
def test_metaworld(rollout, harness):
    harness(rollout)


@policybench.parametrize(CAMERA)
def test_metaworld_camera(rollout, harness):
    harness(rollout)
"""

# Stand-ins for checkpoints with a convention wrong: MetaWorld's expert, one thing changed.
CONVENTIONS = """
import numpy as np
from policybench.policy.base import Chunk
from policybench.suites.metaworld import MT10, MetaWorldExpert


class Changed:
    def __init__(self, name, actions=lambda a, obs: a, image=lambda i: i):
        self.name, self.inner = name, MetaWorldExpert(MT10)
        self.actions, self.image = actions, image

    def open(self, context):
        source = self.inner.open(context)

        def predict(obs):
            if "image" in obs:
                obs = {**obs, "image": self.image(obs["image"])}
            return Chunk(self.actions(source(obs).actions.copy(), obs), context.control_hz)

        return predict

    def describe(self):
        return {"name": self.name}


def flip_gripper(actions, obs):
    actions[:, 3] *= -1
    return actions


def swap_xy(actions, obs):
    actions[:, [0, 1]] = actions[:, [1, 0]]
    return actions


def sees_upright(actions, obs):
    # A vision policy's stand-in: it acts as the expert only on an image the right way up
    # (this camera's image is darker at its top and at its left), and badly otherwise.
    image = obs["image"].astype(float)
    third = len(image) // 4
    upright = image[:third].mean() < image[-third:].mean() and (
        image[:, :third].mean() < image[:, -third:].mean()
    )
    return actions if upright else -actions


SAME = Changed("same")
GRIPPER = Changed("flipped-gripper", flip_gripper)
SWAPPED = Changed("swapped-xy", swap_xy)
FLIPPED_IMAGE = Changed("flipped-image", sees_upright, image=lambda image: image[::-1])
"""


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_metaworld=BENCHMARK, conventions=CONVENTIONS)
    return pytester


def diagnoses(pytester: pytest.Pytester) -> list[dict]:
    summary = json.loads((pytester.path / "reports/latest/summary.json").read_text())
    return summary.get("diagnoses", [])


@pytest.mark.parametrize(
    ("policy", "select", "said"),
    [
        (
            "GRIPPER",
            "not camera and pick-place",
            "action[3] runs opposite to the expert's (r = -1.00): gripper sign flipped?",
        ),
        (
            "SWAPPED",
            "not camera and pick-place",
            "action[[]0] follows the expert's action[[]1] "
            "(r = 1.00), not its own (r = *): dimensions in another order*",
        ),
        (
            "FLIPPED_IMAGE",
            "camera and pick-place",
            "shown its first image flipped upside down, "
            "the model's action is 0 from the expert's, against * as rendered: image flipped*",
        ),
    ],
    ids=["gripper-sign", "swapped-dimensions", "flipped-image"],
)
def test_a_run_at_zero_names_the_convention_it_broke(bench, policy, select, said):
    result = bench.runpytest_subprocess(
        "--rollouts", "2", "-k", select, f"--policy=conventions:{policy}"
    )
    result.stdout.fnmatch_lines(
        ["diagnosis of metaworld-mt10* (0% solved, 2 traces read):", f"  {said}"]
    )
    [diagnosis] = diagnoses(bench)
    assert diagnosis["rate"] == 0.0 and diagnosis["findings"], diagnosis
    page = (bench.path / "reports/latest/index.html").read_text()
    assert 'id="diagnoses"' in page


def test_a_flipped_gripper_over_all_of_mt10_is_named_though_most_tasks_pass(bench):
    # Only the tasks that grasp fail (pick-place, peg-insert): the Eval is far above 10%.
    result = bench.runpytest_subprocess(
        "--rollouts", "2", "-k", "not camera", "--policy=conventions:GRIPPER", "-n", "2"
    )
    result.stdout.fnmatch_lines(
        [
            "diagnosis of metaworld-mt10 (*% solved, * traces read):",
            "  action[[]3[]] runs opposite to the expert's (r = *): gripper sign flipped?",
        ]
    )
    [diagnosis] = diagnoses(bench)
    assert diagnosis["rate"] > 0.5, diagnosis


def test_a_policy_unrelated_to_the_expert_is_told_apart_from_a_convention(bench):
    result = bench.runpytest_subprocess(
        "--rollouts", "2", "-k", "not camera and reach", "--policy=random"
    )
    result.stdout.fnmatch_lines(
        ["*no action dimension follows any of the expert's*not a convention*"]
    )


def test_the_expert_itself_is_not_diagnosed(bench):
    result = bench.runpytest_subprocess("--rollouts", "2", "-k", "not camera and reach")
    assert result.ret == 0
    assert diagnoses(bench) == []
    assert "diagnosis" not in result.stdout.str()


@pytest.mark.parametrize(
    ("shadow", "watched"), [(None, ["push-v3/seed=0", "reach-v3/seed=0"]), ("all", 4), ("0", [])]
)
def test_the_first_rollout_of_each_task_keeps_what_the_expert_replays_unless_told_otherwise(
    bench, shadow, watched
):
    # A random policy solves none: the diagnosis replays the expert on every kept rollout.
    given = () if shadow is None else ("--expert-shadow", shadow)
    result = bench.runpytest_subprocess(
        "--rollouts", "2", "-k", "not camera and (reach or push-v3)", "--policy=random", *given
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    run = bench.path / "reports" / "latest"
    found, kept = [], []
    for line in (run / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        trace = json.loads((run / record["rollout_trace"]).read_text())
        rollout = record["nodeid"].split("[")[1].rstrip("]")
        if "expert_action" in trace["arrays"]:
            found.append(rollout)
        if "kept_observations" in trace:
            assert (run / trace["kept_observations"]).is_file()
            kept.append(rollout)
    assert (len(found) if isinstance(watched, int) else sorted(found)) == watched
    assert sorted(kept) == sorted(found)


def test_a_run_no_diagnosis_looks_at_never_runs_the_expert(bench):
    # The expert through the policy's door: every rollout solved, nothing to diagnose, so the
    # observations the first rollouts kept are never replayed.
    result = bench.runpytest_subprocess(
        "--rollouts", "2", "-k", "not camera and reach", "--policy=conventions:SAME"
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    run = bench.path / "reports" / "latest"
    traces = [
        json.loads((run / json.loads(line)["rollout_trace"]).read_text())
        for line in (run / "results.jsonl").read_text().splitlines()
    ]
    assert sum("kept_observations" in t for t in traces) == 1
    assert not any("expert_action" in t["arrays"] for t in traces)


def test_an_expert_shadow_that_is_not_a_count_is_refused(bench):
    result = bench.runpytest_subprocess("--expert-shadow", "some")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--expert-shadow*expected a count >= 0 or `all`, got 'some'*"])
