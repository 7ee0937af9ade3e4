"""MetaWorld MT10 as lerobot-eval runs LeRobot's MetaWorld env: its camera (480x480 `corner2`,
moved and flipped), its task descriptions and its step limit; each placement from its seed, as
LeRobot 0.6.1 stages it, or (`metaworld-mt10-lerobot-0.4`) drawn in turn from one seeded stream,
as LeRobot 0.4.4 did. `--rollouts` episodes per task."""

import policybench
from policybench.suites.metaworld import MT10_LEROBOT, MT10_LEROBOT_04


@policybench.parametrize(MT10_LEROBOT)
def test_metaworld_lerobot(rollout, harness):
    harness(rollout)


@policybench.parametrize(MT10_LEROBOT_04)
def test_metaworld_lerobot_04(rollout, harness):
    harness(rollout)
