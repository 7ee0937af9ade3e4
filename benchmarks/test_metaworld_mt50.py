"""MetaWorld MT50: every task, `--rollouts` seeds each; state observations as MT10's
(`metaworld-mt50`), and LeRobot 0.6.1's protocol in its four difficulty groups
(`metaworld-mt50-lerobot-easy|medium|hard|very-hard`: the 480x480 `corner2` camera, LeRobot's
task descriptions and step limit, placements seeded as lerobot-eval seeds them)."""

import policybench
from policybench.suites.metaworld import (
    MT50_LEROBOT_EASY,
    MT50_LEROBOT_HARD,
    MT50_LEROBOT_MEDIUM,
    MT50_LEROBOT_VERY_HARD,
    MT50_STATE,
)


@policybench.parametrize(MT50_STATE)
def test_metaworld_mt50(rollout, harness):
    harness(rollout)


@policybench.parametrize(
    MT50_LEROBOT_EASY, MT50_LEROBOT_MEDIUM, MT50_LEROBOT_HARD, MT50_LEROBOT_VERY_HARD
)
def test_metaworld_mt50_lerobot(rollout, harness):
    harness(rollout)
