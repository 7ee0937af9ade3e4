"""PushT: push the T block onto its target, from pixels and the agent's position."""

import policybench
from policybench.suites.pusht import PUSHT


@policybench.parametrize(PUSHT)
def test_pusht(rollout, harness):
    harness(rollout)
