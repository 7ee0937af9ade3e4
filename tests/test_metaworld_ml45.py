"""ML45 staged as MetaWorld's own meta-learning loop stages it: `metaworld.ML45(seed)`, a class's
env from the benchmark, `set_task` with the class's i-th task, `reset`, step. Rollout i of a
class equals that loop bit for bit, the goal is hidden, and the classes are ML45's.

ML45(seed) draws its tasks class by class from one seeded stream (metaworld's `_make_tasks`,
which ML45 calls once per split): the tasks of the test split and of the first train classes are
drawn here exactly as ML45 draws them, without the minute all 45 classes take."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("metaworld")

from policybench.suites.metaworld_ml import (
    ML45_TEST,
    ML45_TRAIN,
    ML_SEED,
    TEST_CLASSES,
    TRAIN_CLASSES,
    placements,
)

ACTIONS = np.random.default_rng(5).uniform(-1, 1, (10, 4))


TRAIN_PREFIX = 3  # train classes drawn here: ML45's first three, the same draws as its own


@pytest.fixture(scope="module")
def benchmark():
    """ML45's test split and first train classes, with the tasks ML45(seed=ML_SEED) gives them."""
    from metaworld import _ML_OVERRIDE, _make_tasks
    from metaworld.env_dict import ML45_ARGS_KWARGS, ML45_V3

    def split(name: str, classes: int):
        kwargs = dict(list(ML45_ARGS_KWARGS[name].items())[:classes])
        return ML45_V3[name], _make_tasks(ML45_V3[name], kwargs, _ML_OVERRIDE, seed=ML_SEED)

    train_classes, train_tasks = split("train", TRAIN_PREFIX)
    test_classes, test_tasks = split("test", len(TEST_CLASSES))
    return SimpleNamespace(
        train_classes=train_classes,
        train_tasks=train_tasks,
        test_classes=test_classes,
        test_tasks=test_tasks,
    )


def plain_loop(benchmark, split: str, task: str, index: int):
    """MetaWorld's meta-RL loop: the class's env, its index-th task set, reset, the actions."""
    classes = benchmark.train_classes if split == "train" else benchmark.test_classes
    tasks = benchmark.train_tasks if split == "train" else benchmark.test_tasks
    env = classes[task]()
    env.set_task([t for t in tasks if t.env_name == task][index])
    obs, _ = env.reset()
    steps = [env.step(action) for action in ACTIONS]
    env.close()
    return obs, [(s[0], s[1], s[4]["success"]) for s in steps]


@pytest.mark.parametrize(
    ("eval", "split", "task"),
    [(ML45_TRAIN, "train", TRAIN_CLASSES[2]), (ML45_TEST, "test", "door-lock-v3")],
    ids=["train", "test"],
)
def test_rollout_i_is_the_classes_ith_task_bit_for_bit(benchmark, eval, split, task):
    rollouts = [r for r in eval.rollouts(3, 0) if r.scene.task == task]
    env = eval.make_env(task)
    try:
        for index, rollout in enumerate(rollouts):
            obs, _ = env.reset(seed=rollout.scene.seed)
            steps = [env.step(action) for action in ACTIONS]
            theirs, their_steps = plain_loop(benchmark, split, task, index)
            np.testing.assert_array_equal(obs, theirs)
            np.testing.assert_array_equal(obs[36:39], 0.0)  # the goal, hidden
            for (o, r, *_, info), (their_o, their_r, their_success) in zip(
                steps, their_steps, strict=True
            ):
                np.testing.assert_array_equal(o, their_o)
                assert r == their_r and info["success"] == their_success
    finally:
        env.close()
    assert len({rollout.scene.seed for rollout in rollouts}) == 3


def test_the_splits_and_their_placements_are_ml45s(benchmark):
    from metaworld.env_dict import ML45_V3

    assert list(ML45_V3["train"]) == list(TRAIN_CLASSES)
    assert list(ML45_V3["test"]) == list(TEST_CLASSES)
    assert len(TRAIN_CLASSES) == 45 and len(TEST_CLASSES) == 5
    assert {r.scene.task for r in ML45_TRAIN.rollouts(1, 0)} == set(TRAIN_CLASSES)
    kept = placements()
    assert set(kept) == {f"train/{c}" for c in TRAIN_CLASSES} | {f"test/{c}" for c in TEST_CLASSES}
    for split, tasks in (("train", benchmark.train_tasks), ("test", benchmark.test_tasks)):
        for task in tasks:
            index = [t for t in tasks if t.env_name == task.env_name].index(task)
            their = pickle.loads(task.data)
            np.testing.assert_array_equal(
                kept[f"{split}/{task.env_name}"][index], their["rand_vec"]
            )
            assert their["partially_observable"] is True
