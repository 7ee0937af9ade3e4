"""ALOHA: TransferCube and Insertion from the top camera and the 14-d joint state, as LeRobot
evaluates them (400 steps at 50 Hz); `--rollouts` seeds each."""

import policybench
from policybench.suites.aloha import ALOHA


@policybench.parametrize(ALOHA)
def test_aloha(rollout, harness):
    harness(rollout)
