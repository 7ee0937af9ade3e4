"""A MetaWorld record says whether the policy could see the goal: `goal_observable` in the
Eval's recorded settings, true where the state's goal slot holds the task's real goal."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip(
    "metaworld", reason="MetaWorld not installed: pip install 'policybench[metaworld]'"
)

from policybench import keys
from policybench.suites.metaworld import MT10_LEROBOT, MT10_STATE

GOAL = slice(36, 39)  # where MetaWorld's 39-d state holds the goal position


@pytest.mark.parametrize("eval", [MT10_STATE, MT10_LEROBOT], ids=lambda e: e.name)
def test_the_record_says_the_goal_is_observed_and_the_state_holds_it(eval):
    assert eval.metadata["goal_observable"] is True
    env = eval.make_env("reach-v3")
    try:
        obs, _ = env.reset(seed=3)
        state = obs if isinstance(obs, np.ndarray) else obs[keys.STATE]
        metaworld_env = getattr(env, "_env", None) or env.unwrapped
        assert not metaworld_env._partially_observable
        np.testing.assert_allclose(state[GOAL], metaworld_env._target_pos)
        assert np.abs(state[GOAL]).sum() > 0.1  # a hidden goal reads as zeros
    finally:
        env.close()
