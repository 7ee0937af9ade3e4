"""With `-n N`, rollouts are scheduled task-affine: xdist's work stealing hands each worker a
contiguous run of items (plan order keeps a task's rollouts together), so a worker reuses its
few live envs, and an idle worker takes work from the busiest. `--dist` given by the user wins."""

from __future__ import annotations

import os
import shlex

import pytest

DEFAULT_DIST, TASK_AFFINE = "load", "worksteal"


def pytest_configure(config: pytest.Config) -> None:
    # xdist turns `-n N` into `--dist load` before plugins configure; take its place unless the
    # user asked for a distribution mode.
    if getattr(config.option, "dist", "no") == DEFAULT_DIST and not _dist_given(config):
        config.option.dist = TASK_AFFINE


def _dist_given(config: pytest.Config) -> bool:
    words = [
        *config.invocation_params.args,
        *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
        *config.getini("addopts"),
    ]
    return any(word in ("--dist", "-d") or word.startswith("--dist=") for word in words)
