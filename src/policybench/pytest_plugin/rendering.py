"""MuJoCo's OpenGL backend chosen before any simulator loads, on the controller (xdist workers
and env servers inherit it), and said in the run's header (policybench.gl)."""

from __future__ import annotations

import pytest

from policybench.gl import choose_backend
from policybench.pytest_plugin.workers import is_worker

CHOSEN = pytest.StashKey["Choice | None"]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):
        config.stash[CHOSEN] = choose_backend()


def pytest_report_header(config: pytest.Config) -> str | None:
    choice = config.stash.get(CHOSEN, None)
    return None if choice is None else f"policybench: rendering: {choice.line}"
