"""panda-gym's Franka tasks on PyBullet, goal-conditioned: reach (with panda-gym's README policy
as its expert), push and slide, pick and place and stack, `--rollouts` seeds a task."""

import policybench
from policybench.suites.panda_gym import PANDA_GYM_PICK, PANDA_GYM_PUSH, PANDA_GYM_REACH


@policybench.parametrize(PANDA_GYM_REACH)
def test_panda_gym_reach(rollout, harness):
    harness(rollout)


@policybench.parametrize(PANDA_GYM_PUSH)
def test_panda_gym_push(rollout, harness):
    harness(rollout)


@policybench.parametrize(PANDA_GYM_PICK)
def test_panda_gym_pick(rollout, harness):
    harness(rollout)
