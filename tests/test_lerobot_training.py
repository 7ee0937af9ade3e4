"""A dataset that `--record-dataset` writes on a suite with a `lerobot` codec holds that codec's
features (LeRobot's env names and shapes), so LeRobot trains on it unchanged: its own
`make_policy` builds ACT from the dataset's metadata and one training step runs forward and
backward on a batch of recorded frames. Runs in the `lerobot` tox env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")
pytest.importorskip("metaworld", reason="needs the metaworld extra")

from policybench import keys
from policybench.record.dataset import OUTCOMES
from tests.lerobot_act import CHUNK, small_act_config

REPO = Path(__file__).resolve().parents[1]
EVAL = "metaworld-mt10-lerobot"


@pytest.mark.slow
def test_a_recorded_metaworld_run_trains_act_with_lerobots_own_factory(tmp_path):
    import torch
    from lerobot.configs.types import FeatureType
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.envs.configs import MetaworldEnv
    from lerobot.envs.utils import env_to_policy_features
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    path = tmp_path / "datasets"
    command = [sys.executable, "-m", "pytest", "benchmarks/test_metaworld_lerobot.py", "-q"]
    command += ["-p", "no:cacheprovider", "-k", "reach-v3", "--policy=scripted", "--rollouts=1"]
    command += [f"--report-dir={tmp_path / 'reports'}", f"--record-dataset={path}"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (record,) = [json.loads(line) for line in (path / EVAL / "meta" / OUTCOMES).open()]
    assert record[keys.OUTCOME] == "solved", "MetaWorld's expert reaches the goal"

    fps = 80  # `--record-dataset` keeps the Eval's control rate
    dataset = LeRobotDataset(
        f"policybench/{EVAL}",
        root=path / EVAL,
        video_backend="pyav",  # LeRobot's default decoder (torchcodec) needs the system's FFmpeg
        delta_timestamps={"action": [i / fps for i in range(CHUNK)]},
    )
    assert dataset.num_frames == record[keys.STEPS]
    assert dataset.fps == fps
    # The recorded features are those of LeRobot's own MetaWorld env (what its checkpoints take).
    wanted = {
        name: tuple(feature.shape)
        for name, feature in env_to_policy_features(MetaworldEnv()).items()
        if feature.type is not FeatureType.ACTION
    }
    recorded = {
        name: tuple(dataset.meta.features[name]["shape"])
        for name in dataset.meta.features
        if name.startswith("observation.")
    }
    assert set(recorded) == set(wanted) == {"observation.image", "observation.state"}
    assert recorded["observation.state"] == wanted["observation.state"] == (4,)
    # LeRobot's features hold HxWxC; a policy takes CxHxW.
    assert recorded["observation.image"] == (480, 480, 3)
    assert wanted["observation.image"] == (3, 480, 480)
    assert dataset[0]["observation.image"].shape == (3, 480, 480)

    torch.manual_seed(0)
    config = small_act_config()
    policy = make_policy(config, ds_meta=dataset.meta)
    assert set(policy.config.input_features) == set(wanted)
    assert policy.config.output_features["action"].shape == (4,)
    preprocessor, _ = make_pre_post_processors(config, dataset_stats=dataset.meta.stats)
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, shuffle=False)
    batch = preprocessor(next(iter(loader)))
    policy.train()
    loss, _ = policy.forward(batch)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
