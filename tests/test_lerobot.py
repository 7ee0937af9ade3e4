"""LeRobot checkpoints through `--policy=lerobot:PATH`: a random-init ACT saved with
save_pretrained plus its processors runs PushT in process, per worker and over the shared server
with identical outcomes, matches lerobot-eval's own rollout loop, and a checkpoint whose features
do not match the suite fails with both feature lists. Runs in the `lerobot` tox env."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")
pytest.importorskip("gym_pusht", reason="needs the pusht extra")

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import SessionContext
from policybench.policy.lerobot import LeRobotModel
from policybench.policy.lerobot_checkpoints import save_random_checkpoint
from policybench.record.episode import OutcomeKind
from policybench.registry import (
    PolicySettings,
    PolicyUnavailable,
    build_policy,
)
from policybench.suites.pusht import LEROBOT, PUSHT, pusht
from policybench.world import World
from tests.lerobot_eval import (
    lerobot_evals_episodes,
    outcomes,
    policybenchs_episodes,
    run_pusht,
)

# Roughly PushT's scale: positions in [0, 512], images in [0, 1].
PUSHT_STATS = {
    "observation.image": {"mean": [[[0.5]]] * 3, "std": [[[0.25]]] * 3},
    "observation.images.top": {"mean": [[[0.5]]] * 3, "std": [[[0.25]]] * 3},
    "observation.state": {"mean": [256.0, 256.0], "std": [100.0, 100.0]},
    "action": {"mean": [256.0, 256.0], "std": [100.0, 100.0]},
}


def write_checkpoint(directory: Path, image_key: str = "observation.image") -> Path:
    stats = {k: v for k, v in PUSHT_STATS.items() if not k.startswith("observation.image")}
    stats[image_key] = PUSHT_STATS[image_key]
    return save_random_checkpoint(directory, {image_key: (3, 96, 96)}, 2, 2, stats)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("act-pusht"))


@pytest.fixture(scope="module")
def alone(checkpoint, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Three rollouts in one process, one at a time: what the other ways of running them must
    give (run once for both tests that compare against it)."""
    policy = f"--policy=lerobot:{checkpoint}"
    return run_pusht(tmp_path_factory.mktemp("alone"), policy, "-n", "0", rollouts=3)


@pytest.mark.slow
def test_a_checkpoint_runs_pusht_alike_in_process_per_worker_and_shared(
    checkpoint, alone, tmp_path
):
    policy = f"--policy=lerobot:{checkpoint}"
    per_worker = run_pusht(tmp_path / "n2", policy, "-n", "2", "--policy-sharing=per-worker")
    shared = run_pusht(tmp_path / "shared", policy, "-n", "2")
    in_process = alone[:2]  # the same two rollouts, seeds 0 and 1
    assert len(per_worker) == len(shared) == 2
    assert outcomes(per_worker) == outcomes(in_process)
    assert outcomes(shared) == outcomes(in_process)
    first = in_process[0]
    assert first[keys.POLICY]["policy_type"] == "act"
    assert first[keys.POLICY]["n_action_steps"] == 10
    assert len(first[keys.POLICY]["weights_sha256"]) == 16
    served = shared[0][keys.POLICY]
    assert served["served"] == "shared", "with -n 2 a model with weights is served once"
    assert served["model"]["weights_sha256"] == first[keys.POLICY]["weights_sha256"]
    # The checkpoint's n_action_steps (10) is the replan interval: a call every 10 steps.
    assert all(r[keys.MODEL_CALLS] == -(-r[keys.STEPS] // 10) for r in in_process)


def test_rollouts_side_by_side_in_one_process_equal_those_run_one_at_a_time(
    checkpoint, alone, tmp_path
):
    policy = f"--policy=lerobot:{checkpoint}"
    side_by_side = run_pusht(
        tmp_path / "k3", policy, "-n", "0", "--envs-per-worker", "3", rollouts=3
    )
    assert outcomes(side_by_side) == outcomes(alone)
    assert [r[keys.MODEL_CALLS] for r in side_by_side] == [r[keys.MODEL_CALLS] for r in alone]


def test_a_batch_answers_what_each_rollout_gets_alone(checkpoint):
    model = LeRobotModel(checkpoint)
    rng = np.random.default_rng(0)
    context = SessionContext("push", 10.0)
    observations = [
        {
            keys.IMAGE: rng.integers(0, 256, (96, 96, 3), dtype=np.uint8),
            keys.STATE: rng.uniform(0, 512, 2),
        }
        for _ in range(3)
    ]
    encoded = [LEROBOT.encode(obs, context.instruction) for obs in observations]
    together = model.predict_batch([(context, obs) for obs in encoded])
    for obs, chunk in zip(encoded, together, strict=True):
        alone = model.predict_batch([(context, obs)])[0]
        assert chunk.actions.shape == (10, 2)
        np.testing.assert_array_equal(chunk.actions, alone.actions)


def test_a_checkpoint_with_other_features_fails_its_first_rollout_naming_both(tmp_path):
    other = write_checkpoint(tmp_path / "aloha-like", image_key="observation.images.top")
    world = World(PUSHT)
    rollout = PUSHT.rollouts(1, 0)[0]
    world.reset(rollout.scene)
    policy = build_policy(f"lerobot:{other}", PUSHT, PolicySettings(), lambda: world.action_space)
    episode = run_rollout(rollout, world, policy)
    assert episode.outcome.kind is OutcomeKind.ERROR
    reason = episode.outcome.reason
    assert "FeatureMismatch" in reason and episode.steps == 0
    assert "expects input features {observation.images.top: (3, 96, 96)" in reason
    assert "provides {observation.image: (3, 96, 96), observation.state: (2,)}" in reason
    assert "mismatched: observation.images.top" in reason


def test_a_directory_without_a_checkpoint_is_named(tmp_path):
    world = World(PUSHT)
    with pytest.raises(ValueError, match=r"no LeRobot checkpoint at .*expected config.json"):
        build_policy(
            f"lerobot:{tmp_path}",
            PUSHT,
            PolicySettings(),
            lambda: world.env_for("push-t").action_space,
        )


def test_an_eval_without_a_lerobot_codec_is_unavailable(checkpoint):
    bare = dataclasses.replace(pusht(), codecs={})
    with pytest.raises(PolicyUnavailable, match="declares no LeRobot codec"):
        build_policy(f"lerobot:{checkpoint}", bare, PolicySettings(), lambda: None)


def test_rollouts_match_lerobot_evals_own_loop(checkpoint):
    """lerobot-eval's eval_policy (its vectorized PushT env, seeds start_seed + i) and policybench
    give each seed the same success, sum and max reward (over 60 steps: six chunks)."""
    theirs = lerobot_evals_episodes(checkpoint, 2, 7, steps=60)
    ours = policybenchs_episodes(checkpoint, 2, 7, steps=60)
    assert [success for success, _, _ in ours] == [success for success, _, _ in theirs]
    np.testing.assert_allclose([o[1:] for o in ours], [t[1:] for t in theirs], rtol=1e-9, atol=1e-9)


def test_the_record_names_the_weights_loaded_even_if_the_file_changes_later(tmp_path):
    import hashlib
    import shutil

    directory = shutil.copytree(write_checkpoint(tmp_path / "source"), tmp_path / "ckpt")
    weights = directory / "model.safetensors"
    loaded = hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
    model = LeRobotModel(directory)
    weights.write_bytes(b"overwritten by a training run that saves into the same directory")
    assert model.describe()["weights_sha256"] == loaded
