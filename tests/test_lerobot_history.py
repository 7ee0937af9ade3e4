"""LeRobot policies that remember their rollout between steps: Diffusion Policy and VQ-BeT
(`n_obs_steps > 1`, sampling) and ACT with temporal ensembling answer, step by step, exactly what
LeRobot's own `select_action` answers for the same observations and generator state, alone or
batched with other rollouts, in process or served. Runs in the `lerobot` tox env."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")
pytest.importorskip("gym_pusht", reason="needs the pusht extra")

from policybench import keys
from policybench.policy.base import SessionContext
from policybench.policy.lerobot import (
    LeRobotModel,
    as_lerobot_inputs,
    rollout_seed,
)
from policybench.policy.lerobot_checkpoints import save_random_checkpoint
from policybench.suites.pusht import LEROBOT
from tests.lerobot_eval import (
    lerobot_evals_episodes,
    outcomes,
    policybenchs_episodes,
    run_pusht,
)

IMAGE = "observation.image"
# Roughly PushT's scale: positions in [0, 512], images in [0, 1].
POSITION = {"mean": [256.0] * 2, "std": [100.0] * 2, "min": [0.0] * 2, "max": [512.0] * 2}
PUSHT_STATS = {
    IMAGE: {"mean": [[[0.5]]] * 3, "std": [[[0.25]]] * 3, "min": [[[0]]] * 3, "max": [[[1]]] * 3},
    "observation.state": POSITION,
    "action": POSITION,
}
CONTEXT = SessionContext("push the T", 10.0)
# A random-init VQ-BeT's Residual VQ is untrained (`discretized` False), which its select_action
# warns about at every step; it still samples codes and decodes them as a trained one does.
pytestmark = pytest.mark.filterwarnings(
    "ignore:To evaluate in the environment, your VQ-BeT model:UserWarning"
)


@pytest.fixture(scope="module")
def diffusion(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("diffusion-pusht")
    images = {IMAGE: (3, 96, 96)}
    return save_random_checkpoint(directory, images, 2, 2, PUSHT_STATS, policy_type="diffusion")


@pytest.fixture(scope="module")
def vqbet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("vqbet-pusht")
    return save_random_checkpoint(
        directory, {IMAGE: (3, 96, 96)}, 2, 2, PUSHT_STATS, policy_type="vqbet"
    )


@pytest.fixture(scope="module")
def ensembling_act(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("act-ensembling-pusht")
    return save_random_checkpoint(
        directory,
        {IMAGE: (3, 96, 96)},
        2,
        2,
        PUSHT_STATS,
        temporal_ensemble_coeff=0.01,
        n_action_steps=1,
    )


def observations(seed: int, count: int) -> list[dict[str, np.ndarray]]:
    """`count` PushT observations as the `lerobot` codec encodes them."""
    rng = np.random.default_rng(seed)
    return [
        LEROBOT.encode(
            {
                keys.IMAGE: rng.integers(0, 256, (96, 96, 3), dtype=np.uint8),
                keys.STATE: rng.uniform(0, 512, 2),
            },
            CONTEXT.instruction,
        )
        for _ in range(count)
    ]


def lerobots_own(model: LeRobotModel, history: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """What lerobot-eval's loop answers: reset, then per step preprocessor, select_action,
    postprocessor, with torch's global generator seeded as policybench seeds the rollout."""
    import torch

    policy = model._policy
    policy.reset()
    torch.manual_seed(rollout_seed(model.seed, as_lerobot_inputs(history[0])))
    answers = []
    for encoded in history:
        batch = {k: torch.from_numpy(v)[None] for k, v in as_lerobot_inputs(encoded).items()}
        batch["task"] = [CONTEXT.instruction]
        with torch.inference_mode():
            answers.append(model._post(policy.select_action(model._pre(batch))).numpy())
    return answers


@pytest.mark.parametrize("checkpoint_name", ["diffusion", "vqbet", "ensembling_act"])
def test_each_step_answers_what_select_action_answers_for_the_same_history(
    checkpoint_name, request
):
    model = LeRobotModel(request.getfixturevalue(checkpoint_name))
    # Past two of Diffusion Policy's 8-action queues and three of VQ-BeT's 5-action ones.
    history = observations(0, 19)
    source = model.open(CONTEXT)
    ours = [source(encoded).actions for encoded in history]
    assert all(actions.shape == (1, 2) for actions in ours), "one action per observation"
    for step, (mine, theirs) in enumerate(zip(ours, lerobots_own(model, history), strict=True)):
        np.testing.assert_array_equal(mine, theirs, err_msg=f"step {step}")


@pytest.mark.parametrize("checkpoint_name", ["diffusion", "vqbet", "ensembling_act"])
def test_rollouts_batched_together_each_answer_what_they_answer_alone(checkpoint_name, request):
    """Three rollouts started at different steps share model calls; each one's actions (and
    Diffusion Policy's noise, VQ-BeT's sampled codes) are what it gets when it runs alone."""
    model = LeRobotModel(request.getfixturevalue(checkpoint_name))
    histories = [observations(seed, 12) for seed in (1, 2, 3)]
    alone = []
    for history in histories:
        source = model.open(CONTEXT)
        alone.append([source(encoded).actions for encoded in history])
    contexts = [SessionContext(CONTEXT.instruction, CONTEXT.control_hz) for _ in histories]
    starts = (0, 3, 5)  # the rollouts' histories are out of step, as served rollouts are
    together: list[list[np.ndarray]] = [[] for _ in histories]
    for tick in range(12 + max(starts)):
        asking = [i for i, start in enumerate(starts) if 0 <= tick - start < 12]
        requests = [(contexts[i], histories[i][tick - starts[i]]) for i in asking]
        for i, chunk in zip(asking, model.predict_batch(requests), strict=True):
            together[i].append(chunk.actions)
    for i in range(len(histories)):
        np.testing.assert_array_equal(np.stack(together[i]), np.stack(alone[i]))


@pytest.mark.parametrize("checkpoint_name", ["diffusion", "vqbet"])
def test_a_finished_rollouts_memory_goes_with_its_context(checkpoint_name, request):
    model = LeRobotModel(request.getfixturevalue(checkpoint_name))
    context = SessionContext(CONTEXT.instruction, CONTEXT.control_hz)
    model.predict_batch([(context, observations(0, 1)[0])])
    assert len(model._memories) == 1
    del context
    assert model._memories == {}


@pytest.mark.parametrize(
    ("checkpoint_name", "n_obs_steps", "n_action_steps"), [("diffusion", 2, 8), ("vqbet", 3, 5)]
)
def test_a_history_checkpoint_describes_how_it_is_played(
    checkpoint_name, n_obs_steps, n_action_steps, request
):
    """n_action_steps is what one generation queues: VQ-BeT's `action_chunk_size`."""
    described = LeRobotModel(request.getfixturevalue(checkpoint_name), seed=5).describe()
    assert described["policy_type"] == checkpoint_name
    assert described["n_obs_steps"] == n_obs_steps and described["actions_per_call"] == 1
    assert described["n_action_steps"] == n_action_steps
    assert "seed 5" in described["sampling"]


@pytest.mark.slow
def test_a_diffusion_rollout_is_the_same_in_process_and_on_the_shared_server(diffusion, tmp_path):
    policy = f"--policy=lerobot:{diffusion}"
    in_process = run_pusht(tmp_path / "n0", policy, "-n", "0", rollouts=1, timeout_s=600)
    shared = run_pusht(tmp_path / "n2", policy, "-n", "2", rollouts=1, timeout_s=600)
    assert outcomes(shared) == outcomes(in_process)
    assert shared[0][keys.POLICY]["served"] == "shared"
    assert in_process[0][keys.MODEL_CALLS] == in_process[0][keys.STEPS], "one call per step"


def test_an_ensembling_act_rollout_matches_lerobot_evals_own_loop(ensembling_act):
    """lerobot-eval's eval_policy (its vectorized PushT env, seeds start_seed + i): the same
    success, sum and max reward per seed as policybench, for ACT with temporal ensembling."""
    # 30 steps, one call each: past the first 20, every action averages a full 20-step window.
    theirs = lerobot_evals_episodes(ensembling_act, 2, 7, steps=30)
    ours = policybenchs_episodes(ensembling_act, 2, 7, steps=30)
    assert [o[0] for o in ours] == [t[0] for t in theirs]
    np.testing.assert_allclose([o[1:] for o in ours], [t[1:] for t in theirs], rtol=1e-9, atol=1e-9)
