"""MetaWorld MT10 as lerobot-eval runs LeRobot's MetaWorld env: its camera (480x480 `corner2`,
moved and flipped), its placement draws and its step limit; `--rollouts` draws per task."""

import policybench
from policybench.suites.metaworld import MT10_LEROBOT


@policybench.parametrize(MT10_LEROBOT)
def test_metaworld_lerobot(rollout, harness):
    harness(rollout)
