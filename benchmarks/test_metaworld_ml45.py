"""MetaWorld ML45: the 45 training classes and the 5 held out, the goal hidden, rollout i of a
class on its i-th task of `metaworld.ML45(seed=42)`. No expert (MetaWorld's read the goal)."""

import policybench
from policybench.suites.metaworld_ml import ML45_TEST, ML45_TRAIN


@policybench.parametrize(ML45_TRAIN, ML45_TEST)
def test_metaworld_ml45(rollout, harness):
    harness(rollout)
