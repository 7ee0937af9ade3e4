"""gymnasium-robotics: FrankaKitchen-v1's tasks and the four Adroit hand tasks, from their state
vectors (no expert ships: give a policy, e.g. --policy=random or a served one)."""

import policybench
from policybench.suites.gymnasium_robotics import (
    ADROIT_DOOR,
    ADROIT_HAMMER,
    ADROIT_PEN,
    ADROIT_RELOCATE,
    KITCHEN,
)


@policybench.parametrize(KITCHEN)
def test_kitchen(rollout, harness):
    harness(rollout)


@policybench.parametrize(ADROIT_DOOR, ADROIT_HAMMER, ADROIT_PEN, ADROIT_RELOCATE)
def test_adroit(rollout, harness):
    harness(rollout)
