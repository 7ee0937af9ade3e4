"""The child pytest run of `policybench.evaluate` (loaded with `-p`): its one test file, and what
ties the run to the evaluating process: it stops when that process ends, and names its model."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import threading

import pytest

from policybench import keys
from policybench.pytest_plugin.workers import is_worker

EVALS_VARIABLE = "POLICYBENCH_EVALS"  # the Evals the run plays, by name, comma-separated
PIPE_VARIABLE = "POLICYBENCH_EVALUATE_PIPE"  # a pipe's read end: EOF when the evaluator ended
CALL_VARIABLE = "POLICYBENCH_EVALUATE_CALL"  # JSON: the model's name and evaluate's call
AGGREGATOR = "policybench-aggregator"  # the plugin that writes run.json
RUN_FILE = "run-dir.txt"  # where the run says its run directory, beside its test file
# How long the run waits, once its evaluator ended, for a stop already under way: a Ctrl-C at
# the terminal reaches the run as well as its evaluator.
STOP_GRACE_S = 1.0

# The run's one test: every planned rollout of the Evals named in POLICYBENCH_EVALS.
RUNNER = f"""
import os

import policybench
from policybench.suites import eval_named

EVALS = [eval_named(name) for name in os.environ["{EVALS_VARIABLE}"].split(",")]


@policybench.parametrize(*EVALS)
def test_evaluate(rollout, harness):
    harness(rollout)
"""

EVALUATOR_ENDED = pytest.StashKey[threading.Event]()
ENDING = pytest.StashKey[threading.Event]()


def pytest_configure(config: pytest.Config) -> None:
    if is_worker(config):
        return
    fd = os.environ.pop(PIPE_VARIABLE, None)
    if fd is None:
        return
    ended, ending = threading.Event(), threading.Event()
    config.stash[EVALUATOR_ENDED], config.stash[ENDING] = ended, ending
    threading.Thread(
        target=_stop_when_evaluator_ends, args=(int(fd), ended, ending), daemon=True
    ).start()


def _stop_when_evaluator_ends(fd: int, ended: threading.Event, ending: threading.Event) -> None:
    """Waits for EOF on the evaluator's pipe (nothing is written to it: it closes when the
    evaluating process ends, however it ends), then stops the run as SIGTERM does: the rollouts
    in flight end, the finished ones are kept, and the run's files say it was stopped."""
    while os.read(fd, 1):
        pass
    ended.set()
    if not ending.wait(STOP_GRACE_S):  # a second stop would cut the first one short
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    """Once the rollouts are over (run, or stopped), the run writes its files: from then on
    the watcher leaves it be, as a second stop would cut that short."""
    try:
        return (yield)
    finally:
        ending = session.config.stash.get(ENDING, None)
        if ending is not None:
            ending.set()


def pytest_sessionstart(session: pytest.Session) -> None:
    """run.json names the model evaluated as the run's policy, and evaluate's call as its
    command (the child's own command line names a temporary file and server)."""
    aggregator = session.config.pluginmanager.get_plugin(AGGREGATOR)
    told = os.environ.get(CALL_VARIABLE)
    if aggregator is None or told is None:
        return
    # Its evaluator reads its run from here, whatever other runs the report dir gains meanwhile.
    (session.config.rootpath / RUN_FILE).write_text(str(aggregator.run_dir.resolve()))
    call = json.loads(told)
    run = aggregator.run_info
    settings = {**run.settings, keys.POLICY: call[keys.POLICY]}
    aggregator.run_info = dataclasses.replace(run, command=call[keys.COMMAND], settings=settings)
    aggregator.settings = dataclasses.replace(aggregator.settings, policy=call[keys.POLICY])


def pytest_unconfigure(config: pytest.Config) -> None:
    """With its evaluator gone, nobody else removes the run's temporary folder."""
    ended = config.stash.get(EVALUATOR_ENDED, None)
    if ended is not None and ended.is_set():
        shutil.rmtree(config.rootpath, ignore_errors=True)
