"""`--policy=lerobot:PATH`: the checkpoint path is made absolute (from where pytest was invoked)
before anything uses it, so xdist workers and a shared server started elsewhere find it."""

from __future__ import annotations

from pathlib import Path

import pytest

from policybench.policy.registry import LEROBOT_PREFIX


@pytest.hookimpl(tryfirst=True)  # before the shared server starts with the policy's name
def pytest_configure(config: pytest.Config) -> None:
    policy = config.getoption("policy", None)
    if (
        isinstance(policy, str)
        and policy.startswith(LEROBOT_PREFIX)
        and not hasattr(config, "workerinput")
    ):
        path = config.invocation_params.dir / Path(policy[len(LEROBOT_PREFIX) :]).expanduser()
        config.option.policy = f"{LEROBOT_PREFIX}{path.resolve()}"
