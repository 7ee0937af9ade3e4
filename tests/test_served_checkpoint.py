"""`policybench serve --policy=lerobot:PATH` without `--eval` builds a served model for each Eval
a client names; the checkpoint behind them is loaded once, not once per Eval.

LeRobot is not installed in this test's environment (its own tox env runs the real checkpoint
tests), so a stand-in LeRobotModel counts the loads: what is under test is the loading rule."""

from __future__ import annotations

import os

import pytest

from policybench.policy import lerobot
from policybench.registry import PolicySettings
from policybench.serve.command import EvalModels


class Loaded:
    """Stands in for LeRobotModel (which would load torch weights): counts its loads."""

    loads = 0

    def __init__(self, checkpoint, device="cpu", seed=0):
        type(self).loads += 1
        self.checkpoint, self.action_shape, self.name = checkpoint, None, f"lerobot:{checkpoint}"


@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(lerobot, "LeRobotModel", Loaded)
    monkeypatch.setattr(lerobot, "_LOADED", {})
    Loaded.loads = 0
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    return tmp_path


def test_one_checkpoint_served_for_two_evals_is_loaded_once(checkpoint):
    models = EvalModels(f"lerobot:{checkpoint}", PolicySettings(), [])
    pusht, dp = models("pusht", None), models("pusht-dp", None)
    assert pusht is not dp and pusht.model is dp.model  # two Evals' codecs, one model
    assert pusht.model_codec.name == dp.model_codec.name == "lerobot"
    assert Loaded.loads == 1


def test_weights_rewritten_on_disk_are_loaded_again(checkpoint):
    first = lerobot.load_model(f"lerobot:{checkpoint}")
    assert lerobot.load_model(f"lerobot:{checkpoint}") is first
    weights = checkpoint / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert lerobot.load_model(f"lerobot:{checkpoint}") is not first
    assert lerobot.load_model(f"lerobot:{checkpoint}", seed=1) is not first
    assert Loaded.loads == 3
