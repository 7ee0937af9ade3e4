"""Which directory a run writes its report to: the controller picks it (a new run id under
--report-dir) and hands it to xdist workers, which write rollout videos into it."""

from __future__ import annotations

from pathlib import Path

import pytest

from policybench.pytest_plugin.options import settings_of
from policybench.pytest_plugin.workers import from_controller, hand_to_workers, is_worker
from policybench.report.results import new_run_id

RUN_DIR = pytest.StashKey[Path]()


def run_dir_of(config: pytest.Config) -> Path:
    """This run's report directory, the same in the controller and every worker."""
    if RUN_DIR not in config.stash:
        handed = from_controller(config, "run_dir")
        if handed is not None:
            config.stash[RUN_DIR] = Path(handed)
        else:
            report_dir = settings_of(config).report_dir
            config.stash[RUN_DIR] = report_dir / new_run_id(report_dir)
    return config.stash[RUN_DIR]


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):
        hand_to_workers(config, "run_dir", str(run_dir_of(config)))
