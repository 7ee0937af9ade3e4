"""The pytest plugin (registered through the `pytest11` entry point): options, collection,
fixtures, outcome reporting and aggregation, each in its own module."""

from __future__ import annotations

import pytest

from policybench.pytest_plugin.aggregation import Aggregator
from policybench.pytest_plugin.collection import (
    MARKER,
    pytest_collection_modifyitems,
    pytest_generate_tests,
)
from policybench.pytest_plugin.fixtures import harness, policybench_runner, settings_of
from policybench.pytest_plugin.options import pytest_addoption
from policybench.pytest_plugin.outcomes import pytest_report_teststatus, pytest_runtest_makereport

__all__ = [
    "harness",
    "policybench_runner",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_report_teststatus",
    "pytest_runtest_makereport",
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*evals): run this test once per planned Rollout of the Evals"
    )
    settings = settings_of(config)
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) aggregates
        config.pluginmanager.register(Aggregator(settings), "policybench-aggregator")
