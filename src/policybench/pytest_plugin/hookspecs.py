"""policybench's own hooks: the parts of resolving a run (see rundir) that other plugin modules
answer, so the resolver names its order instead of importing the modules that answer them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from policybench.pytest_plugin.options import RunSettings
    from policybench.run.resumed import Resumed
    from policybench.run.shard import Shard
    from policybench.spec import Eval
    from policybench.trajectory import TrajectorySpec


@pytest.hookspec(firstresult=True)
def pytest_policybench_shard(config: pytest.Config) -> Shard | None:
    """The shard this run's options name (None: the whole plan)."""


@pytest.hookspec(firstresult=True)
def pytest_policybench_resumed(
    config: pytest.Config, run_dir: Path, settings: RunSettings
) -> Resumed | None:
    """The run in `run_dir` that --resume continues under `settings` (refused if its protocol
    differs)."""


@pytest.hookspec
def pytest_policybench_specs(config: pytest.Config, eval: Eval) -> list[TrajectorySpec] | None:
    """Trajectory specs every rollout of `eval` is held to, beside those the Eval declares
    (a conftest.py adds its own this way, for any Eval)."""
