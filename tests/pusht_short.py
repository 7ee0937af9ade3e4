"""PushT cut to 6 seconds (60 steps at 10 Hz, six chunks of a 10-step ACT), for the LeRobot
tests that run whole suites in subprocesses and compare their records: what they compare (in
process, per worker, shared, served, recorded) does not depend on the episode's length, and a
random-init policy solves no episode of any length. Not collected by `pytest tests` (no test_
prefix): a run names it, as it names benchmarks/test_pusht.py."""

import dataclasses

import policybench
from policybench.spec import seeded_per_task
from policybench.suites.pusht import INSTRUCTION, PUSHT, TASK

STEPS = 60
PUSHT_SHORT = dataclasses.replace(
    PUSHT, plan=seeded_per_task({TASK: INSTRUCTION}, timeout_s=STEPS / PUSHT.control_hz)
)


@policybench.parametrize(PUSHT_SHORT)
def test_pusht(rollout, harness):
    harness(rollout)
