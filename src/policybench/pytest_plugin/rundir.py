"""Which directory a run writes its report to: the controller picks it (a new run id under
--report-dir) and hands it to xdist workers, which write rollout videos into it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from policybench.pytest_plugin.fixtures import settings_of
from policybench.report.results import new_run_id

RUN_DIR = pytest.StashKey[Path]()
WORKER_RUN_DIR = "policybench_run_dir"  # workerinput key


def run_dir_of(config: pytest.Config) -> Path:
    """This run's report directory, the same in the controller and every worker."""
    if RUN_DIR not in config.stash:
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None and WORKER_RUN_DIR in workerinput:
            config.stash[RUN_DIR] = Path(workerinput[WORKER_RUN_DIR])
        else:
            report_dir = settings_of(config).report_dir
            config.stash[RUN_DIR] = report_dir / new_run_id(report_dir)
    return config.stash[RUN_DIR]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: tells a worker the controller's run directory."""
    node.workerinput[WORKER_RUN_DIR] = str(run_dir_of(node.config))
