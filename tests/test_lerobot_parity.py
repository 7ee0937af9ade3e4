"""policybench against lerobot-eval's own rollout loop, step by step: on MetaWorld's LeRobot
protocol and on ALOHA a random-init ACT plays bit-equal actions and gets equal rewards in both
(a few dozen steps each), and `--policy-device=cpu-onednn` answers with lerobot-eval's CPU
kernels where the default's native kernels differ. Runs in the `lerobot` tox env."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import SessionContext
from policybench.policy.lerobot import LeRobotModel
from policybench.policy.lerobot_checkpoints import save_random_checkpoint
from policybench.record.episode import OutcomeKind
from policybench.registry import PolicySettings, build_policy
from policybench.spec import Eval
from policybench.world import World

STEPS = 24  # enough for two ACT chunks (n_action_steps 10) and a third call
SEED = 1000
IMAGE_STATS = {"mean": [[[0.5]]] * 3, "std": [[[0.25]]] * 3}


def checkpoint(directory: Path, image: str, shape: tuple[int, int, int], width: int) -> Path:
    """A random-init ACT for one camera, a `width`-d state and `width`-d actions."""
    vector = {"mean": [0.0] * width, "std": [0.5] * width}
    stats = {image: IMAGE_STATS, "observation.state": vector, "action": vector}
    return save_random_checkpoint(directory, {image: shape}, width, width, stats)


def lerobots_loop(env_config: Any, model: LeRobotModel, *, onednn: bool = False) -> dict:
    """One episode of `STEPS` steps in lerobot-eval's `rollout` (its vectorized env, one env,
    seeded as `--seed SEED` seeds it), with the model's policy and processors."""
    import torch
    from lerobot.envs.factory import make_env, make_env_pre_post_processors
    from lerobot.scripts.lerobot_eval import rollout
    from lerobot.utils.random_utils import set_seed

    set_seed(SEED)  # as lerobot-eval does before it builds its envs
    (tasks,) = make_env(env_config, n_envs=1).values()
    (vector_env,) = tasks.values()
    vector_env.envs[0]._max_episode_steps = STEPS
    env_pre, env_post = make_env_pre_post_processors(env_config, model._policy.config)
    torch.backends.mkldnn.enabled = onednn
    try:
        with torch.no_grad():
            done = rollout(
                vector_env,
                model._policy,
                env_pre,
                env_post,
                model._pre,
                model._post,
                seeds=[SEED],
            )
    finally:
        vector_env.close()
    return {"actions": done["action"][0].numpy(), "rewards": done["reward"][0].numpy()}


def policybenchs_rollout(eval: Eval, ckpt: Path, task: str) -> dict:
    """The Eval's first rollout of `task` at seed SEED, cut to STEPS steps."""
    world = World(eval)
    policy = build_policy(
        f"lerobot:{ckpt}", eval, PolicySettings(), lambda: world.env_for(task).action_space
    )
    rollout = next(r for r in eval.rollouts(1, SEED) if r.scene.task == task)
    rollout = dataclasses.replace(rollout, timeout_s=STEPS / eval.control_hz)
    try:
        episode = run_rollout(rollout, world, policy)
    finally:
        world.close()
    assert episode.outcome.kind is OutcomeKind.UNSOLVED, episode.outcome
    return {
        "actions": np.stack([step.command for step in episode.trace]),
        "rewards": np.array([step.reward for step in episode.trace]),
    }


def assert_same_steps(ours: dict, theirs: dict) -> None:
    assert ours["actions"].shape == theirs["actions"].shape == (STEPS, ours["actions"].shape[1])
    np.testing.assert_array_equal(ours["actions"], theirs["actions"])
    np.testing.assert_array_equal(ours["rewards"], theirs["rewards"])


@pytest.mark.slow
def test_metaworlds_lerobot_protocol_plays_lerobot_evals_actions_and_rewards(tmp_path):
    pytest.importorskip("metaworld", reason="needs the metaworld extra")
    from lerobot.envs.configs import MetaworldEnv

    from policybench.suites.metaworld import MT10_LEROBOT_04

    ckpt = checkpoint(tmp_path, "observation.image", (3, 480, 480), 4)
    model = LeRobotModel(ckpt)
    theirs = lerobots_loop(MetaworldEnv(task="reach-v3"), model)
    ours = policybenchs_rollout(MT10_LEROBOT_04, ckpt, "reach-v3")
    assert_same_steps(ours, theirs)


@pytest.mark.slow
def test_aloha_plays_lerobot_evals_actions_and_rewards(tmp_path):
    pytest.importorskip("gym_aloha", reason="needs the aloha extra")
    from lerobot.envs.configs import AlohaEnv

    from policybench.suites.aloha import aloha

    ckpt = checkpoint(tmp_path, "observation.images.top", (3, 480, 640), 14)
    model = LeRobotModel(ckpt)
    theirs = lerobots_loop(AlohaEnv(task="AlohaTransferCube-v0", episode_length=STEPS), model)
    ours = policybenchs_rollout(aloha(max_steps=STEPS), ckpt, "transfer_cube")
    assert_same_steps(ours, theirs)


def test_cpu_onednn_answers_with_lerobot_evals_kernels(tmp_path):
    """select_action under oneDNN (lerobot-eval's CPU kernels) and under torch's native kernels
    answer differently; each device setting answers what select_action does under its kernels."""
    import torch

    ckpt = checkpoint(tmp_path, "observation.image", (3, 96, 96), 4)
    native, onednn = LeRobotModel(ckpt, "cpu"), LeRobotModel(ckpt, "cpu-onednn")
    rng = np.random.default_rng(0)
    obs = {
        "observation.image": rng.integers(0, 256, (96, 96, 3), dtype=np.uint8),
        "observation.state": rng.normal(size=4),
        "task": "reach",
    }
    answers = {
        device: model.predict_batch([(SessionContext("reach", 80.0), obs)])[0].actions[0]
        for device, model in (("cpu", native), ("cpu-onednn", onednn))
    }
    batch = {
        "observation.image": torch.from_numpy(obs["observation.image"]).permute(2, 0, 1)[None]
        / 255.0,
        "observation.state": torch.from_numpy(obs["observation.state"]).float()[None],
        "task": ["reach"],
    }
    for device, enabled in (("cpu", False), ("cpu-onednn", True)):
        torch.backends.mkldnn.enabled = enabled
        native._policy.reset()
        with torch.inference_mode():
            action = native._post(native._policy.select_action(native._pre(batch)))
        np.testing.assert_array_equal(answers[device], action[0].numpy(), err_msg=device)
    assert not np.array_equal(answers["cpu"], answers["cpu-onednn"])
    assert native.describe()["cpu_kernels"].startswith("native (oneDNN off)")
    assert onednn.describe()["cpu_kernels"].startswith("oneDNN")
    assert onednn.describe()[keys.POLICY_NAME] == native.describe()[keys.POLICY_NAME]
