"""MetaWorld MT10: every task, `--rollouts` seeds each."""

import policybench
from policybench.suites.metaworld import MT10_STATE


@policybench.parametrize(MT10_STATE)
def test_metaworld(rollout, harness):
    harness(rollout)
