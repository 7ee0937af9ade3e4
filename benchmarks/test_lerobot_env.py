"""LeRobot's env plugins: every installed `lerobot_env_*` distribution's envs, staged as
lerobot-eval 0.6.1 stages a plugin env (`pip install lerobot_env_so101`, say; none ships an
expert: give a policy, e.g. --policy=random or a served one)."""

import pytest

import policybench
from policybench.suites.lerobot_env import plugin_evals

EVALS = plugin_evals()

if EVALS:

    @policybench.parametrize(*EVALS.values())
    def test_lerobot_env(rollout, harness):
        harness(rollout)

else:

    def test_lerobot_env():
        pytest.skip(
            "no LeRobot env plugin installed (a lerobot_env_* distribution): "
            "pip install lerobot_env_so101, say"
        )
