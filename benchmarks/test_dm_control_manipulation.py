"""dm_control's manipulation tasks: a Kinova Jaco lifting, placing, reaching and stacking, each
task's `_features` variant, `--rollouts` seeds a task. No built-in expert: bring a policy
(`--policy=random` runs)."""

import policybench
from policybench.suites.dm_control_manipulation import DM_CONTROL_MANIPULATION


@policybench.parametrize(DM_CONTROL_MANIPULATION)
def test_dm_control_manipulation(rollout, harness):
    harness(rollout)
