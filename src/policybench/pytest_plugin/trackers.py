"""`--log-to wandb|mlflow|tensorboard` (several allowed) and `--log-name`: once the run's report
is written, the controller logs its results to each tracker (policybench/trackers.py) and says
where on the terminal."""

from __future__ import annotations

from typing import Any

import pytest

from policybench.pytest_plugin.rundir import run_dir_of
from policybench.pytest_plugin.workers import is_worker
from policybench.run.layout import SUMMARY
from policybench.trackers import TRACKERS, check_trackers, log_run

LOGGED = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--log-to",
        action="append",
        default=[],
        choices=TRACKERS,
        metavar="TRACKER",
        help="log the run's results (success per Eval with intervals, the per-task table, the "
        f"verdict, the report as an artifact) to {', '.join(TRACKERS)}; repeat for several. "
        "Each is an extra: pip install 'policybench[wandb]'",
    )
    group.addoption(
        "--log-name",
        default=None,
        metavar="NAME",
        help="the run's name in the trackers (default: the run's id)",
    )


def pytest_configure(config: pytest.Config) -> None:
    try:
        check_trackers(config.getoption("log_to", []))
    except ValueError as error:
        raise pytest.UsageError(f"--log-to: {error}") from None


@pytest.hookimpl(trylast=True)  # after aggregation wrote the run's summary and report
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    trackers = config.getoption("log_to", [])
    if not trackers or is_worker(config):
        return
    run_dir = run_dir_of(config)
    if not (run_dir / SUMMARY).is_file():
        return
    try:
        said = log_run(run_dir, trackers, config.getoption("log_name"))
    except Exception as error:  # the run's results stand: a tracker that fails says so
        said = [f"could not log to {', '.join(trackers)}: {type(error).__name__}: {error}"]
    config.stash[LOGGED] = said


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in terminalreporter.config.stash.get(LOGGED, []):
        terminalreporter.write_line(f"logged to {line}")
