"""gym-hil (LeRobot's HIL-SERL sim): PandaPickCube and PandaArrangeBoxes from state
(`gym-hil`) or from its two cameras (`gym-hil-pixels`), `--rollouts` seeds each. No built-in
expert: bring a policy (`--policy=random` runs)."""

import policybench
from policybench.suites.gym_hil import GYM_HIL, GYM_HIL_PIXELS


@policybench.parametrize(GYM_HIL)
def test_gym_hil(rollout, harness):
    harness(rollout)


@policybench.parametrize(GYM_HIL_PIXELS)
def test_gym_hil_pixels(rollout, harness):
    harness(rollout)
