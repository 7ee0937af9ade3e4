"""PushT on Diffusion Policy's scenes: the seed rule of its PushTEnv (and gym-pusht 0.1.5), from
its runner's test seeds (100000 on), so that published PushT numbers can be reproduced."""

import policybench
from policybench.suites.pusht import PUSHT_DP


@policybench.parametrize(PUSHT_DP)
def test_pusht_dp(rollout, harness):
    harness(rollout)
