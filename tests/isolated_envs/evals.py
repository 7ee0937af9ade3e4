"""The isolated Evals of the tests: each env runs in an interpreter built from its requirements."""

from __future__ import annotations

import numpy as np

from policybench.envserver import Interpreter, Isolated
from policybench.spec import Eval, seeded_per_task

# Clashes for real with the tests' own interpreter, which has numpy 2.
NUMPY1_INTERPRETER = Interpreter("numpy1", requirements=("numpy<2", "msgpack"))

NUMPY1 = Eval(
    name="numpy1-point",
    make_env=Isolated("tests.isolated_envs.numpy1_env:make", NUMPY1_INTERPRETER),
    plan=seeded_per_task({"drift": "move the point"}, timeout_s=1.0),
    control_hz=10.0,
    hold=lambda last, obs: np.zeros(2, np.float32),
    hold_name="zero",
)
