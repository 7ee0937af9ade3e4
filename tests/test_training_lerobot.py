"""`policybench.evaluate` with a LeRobot policy straight from a training loop: the training
example records PushT, trains a small ACT and evaluates it in memory between steps; an in-memory
LeRobotModel plays through the Eval's `lerobot` codec, runs its calls in eval mode, hands the
policy back in train mode and leaves the process's torch settings alone. Runs in the `lerobot`
tox env."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")
pytest.importorskip("gym_pusht", reason="needs the pusht extra")

import torch

from policybench import keys
from policybench.policy.base import SessionContext
from policybench.policy.lerobot import FeatureMismatch, LeRobotModel
from policybench.registry import PolicySettings, as_policy
from policybench.serve.command import action_space_of
from policybench.suites.pusht import PUSHT
from tests.lerobot_act import CHUNK, small_act_config
from tests.test_lerobot import PUSHT_STATS

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "training" / "train_act_pusht.py"


def small_act(action_dim: int = 2) -> tuple[torch.nn.Module, object, object]:
    """A random-init ACT for PushT's LeRobot features and its processors, as a training loop
    holds them after LeRobot's factory made them."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    torch.manual_seed(0)
    config = small_act_config(
        input_features={
            "observation.image": PolicyFeature(FeatureType.VISUAL, (3, 96, 96)),
            "observation.state": PolicyFeature(FeatureType.STATE, (2,)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (action_dim,))},
    )
    stats = {
        name: {
            stat: torch.tensor(values)[..., : action_dim if name == "action" else None]
            for stat, values in by_stat.items()
        }
        for name, by_stat in PUSHT_STATS.items()
        if name != "observation.images.top"
    }
    policy = get_policy_class("act")(config)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    return policy, pre, post


def test_an_in_memory_policy_answers_in_eval_mode_and_is_handed_back_as_it_was():
    policy, pre, post = small_act()
    policy.train()  # between training steps
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    model = LeRobotModel.in_memory(policy, pre, post)
    played = as_policy(model.name, model, PUSHT, PolicySettings(), lambda: action_space_of(PUSHT))
    assert played.codec.name == "lerobot", "an in-memory LeRobotModel sees LeRobot's names"

    rng = np.random.default_rng(0)
    obs = {
        "observation.image": rng.integers(0, 256, (96, 96, 3), dtype=np.uint8),
        "observation.state": np.array([200.0, 300.0]),
        "task": "push the T",
    }
    context = SessionContext("push the T", 10.0)
    # ACT in train mode wants the batch's actions (its VAE): an answer at all means eval mode.
    first = model.predict_batch([(context, obs)])[0]
    again = model.predict_batch([(context, obs)])[0]
    assert first.actions.shape == (CHUNK, 2)
    np.testing.assert_array_equal(first.actions, again.actions)  # no dropout
    assert policy.training, "the training loop gets its policy back in train mode"
    assert (torch.get_num_threads(), torch.backends.mkldnn.enabled) == (threads, onednn)

    described = model.describe()
    assert described[keys.POLICY_NAME] == "lerobot-act-in-memory"
    assert "checkpoint" not in described and described["in_memory"]
    with torch.no_grad():
        next(iter(policy.parameters())).add_(1.0)  # a training step
    later = LeRobotModel.in_memory(policy, pre, post)
    assert later.weights_sha256 != model.weights_sha256, "the record names the weights now"


def test_an_in_memory_policy_with_narrower_actions_than_the_env_is_refused():
    policy, pre, post = small_act(action_dim=1)
    model = LeRobotModel.in_memory(policy, pre, post)
    with pytest.raises(FeatureMismatch, match=r"in-memory LeRobot policy .* width 2"):
        as_policy(model.name, model, PUSHT, PolicySettings(), lambda: action_space_of(PUSHT))


def test_a_bare_pretrained_policy_is_refused_with_how_to_wrap_it():
    policy, _, _ = small_act()
    with pytest.raises(TypeError, match=r"LeRobotModel\.in_memory\(policy, preprocessor"):
        as_policy("act", policy, PUSHT, PolicySettings(), lambda: action_space_of(PUSHT))


@pytest.mark.slow
def test_the_training_example_evaluates_its_act_in_memory_between_steps(tmp_path):
    command = [sys.executable, str(EXAMPLE), "--out", str(tmp_path), "--steps", "2"]
    command += ["--eval-every", "1", "--rollouts", "1", "--workers", "2", "--batch-size", "4"]
    command += ["--record-rollouts", "1"]  # one expert episode holds far more than a batch
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    evaluated = re.findall(r"step (\d+): evaluated (\d+)/1 solved .* in (\S+)", done.stdout)
    assert [step for step, _, _ in evaluated] == ["1", "2"], done.stdout[-3000:]
    weights = []
    for _, _, run_dir in evaluated:
        (record,) = [json.loads(line) for line in (Path(run_dir) / "results.jsonl").open()]
        assert record[keys.OUTCOME] in ("solved", "unsolved"), record.get(keys.REASON)
        model = record[keys.POLICY]["model"]
        assert model[keys.POLICY_NAME] == "lerobot-act-in-memory"
        assert model["codec"] == "lerobot" and model["in_memory"]
        weights.append(model["weights_sha256"])
    assert weights[0] != weights[1], "each evaluation names the weights of its training step"
    assert not list(tmp_path.rglob("model.safetensors")), "no checkpoint is written"
