"""Shards: `--shard K/N` runs a deterministic 1/N of the planned rollouts, whatever `-n`, and
`--shard auto` takes K and N from a SLURM job array or a Kubernetes Indexed Job."""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from policybench.pytest_plugin import gates, rundir
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.workers import is_worker
from policybench.record.protocol import Protocol
from policybench.run.results import RESULTS
from policybench.run.shard import Shard
from policybench.spec import Eval, Rollout

AUTO = "auto"
SLURM_ID, SLURM_COUNT = "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"
SLURM_MIN, SLURM_MAX = "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX"
SLURM_STEP = "SLURM_ARRAY_TASK_STEP"
K8S_INDEX = "JOB_COMPLETION_INDEX"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run shard K of N (numbered from 1) of the planned rollouts, the same whatever -n; "
        "auto: from a SLURM job array or a Kubernetes Indexed Job",
    )
    group.addoption(
        "--shard-count",
        type=int,
        default=None,
        metavar="N",
        help="with --shard auto in a Kubernetes Indexed Job: how many shards (its completions)",
    )


def shard_of(config: pytest.Config) -> Shard | None:
    """This run's shard (None: the whole plan), the same in the controller and its workers."""
    return rundir.run_context(config).shard


def shard_setting(config: pytest.Config) -> str | None:
    """What run.json records of the shard: `K/N`, and where it came from."""
    shard = shard_of(config)
    return None if shard is None else f"{shard} ({shard.source})"


def pytest_policybench_shard(config: pytest.Config) -> Shard | None:
    """The shard --shard names (None: the whole plan); a UsageError says what is wrong."""
    text, count = config.getoption("shard"), config.getoption("shard_count")
    try:
        if text is None or text.strip() != AUTO:
            if count is not None:
                raise ValueError(
                    f"--shard-count {count} only goes with --shard auto (in a Kubernetes Indexed "
                    f"Job); with --shard K/N the count is N"
                )
            return None if text is None else Shard.parse(text)
        return from_engine(os.environ, count)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def from_engine(environ: Mapping[str, str], count: int | None) -> Shard:
    """The shard a job-array task is: a SLURM array task (its id's place in the array), or a
    Kubernetes Indexed Job's pod (its completion index, of `count` completions)."""
    if SLURM_ID in environ:
        return _from_slurm(environ, count)
    if K8S_INDEX in environ:
        index = _integer(environ, K8S_INDEX)
        if count is None:
            raise ValueError(
                f"--shard auto in a Kubernetes Indexed Job needs --shard-count N, the Job's "
                f"completions ({K8S_INDEX}={environ[K8S_INDEX]} came without it)"
            )
        if not 0 <= index < count:
            raise ValueError(
                f"{K8S_INDEX}={index} lies outside 0..{count - 1} (--shard-count {count}); give "
                "--shard-count the Job's completions"
            )
        return Shard(index + 1, count, f"{K8S_INDEX}={index} of {count}")
    raise ValueError(
        f"--shard auto found no job array: expected {SLURM_ID} (a SLURM job array, e.g. sbatch "
        f"--array=0-3) or {K8S_INDEX} (a Kubernetes Indexed Job, with --shard-count N), but "
        "neither is set. Run it as an array task, or name the shard: --shard K/N"
    )


def _from_slurm(environ: Mapping[str, str], count: int | None) -> Shard:
    task = _integer(environ, SLURM_ID)
    first = _integer(environ, SLURM_MIN) if SLURM_MIN in environ else 0
    step = _integer(environ, SLURM_STEP) if SLURM_STEP in environ else 1
    last = _integer(environ, SLURM_MAX) if SLURM_MAX in environ else None
    spans = None if last is None else (last - first) // step + 1
    tasks = _integer(environ, SLURM_COUNT) if SLURM_COUNT in environ else spans
    if tasks is None:
        raise ValueError(
            f"--shard auto: {SLURM_ID}={task} is set but neither {SLURM_COUNT} nor {SLURM_MAX} "
            "is, so the array's size is unknown; run it as a task of `sbatch --array=0-N`"
        )
    if (spans is not None and spans != tasks) or (task - first) % step:
        raise ValueError(
            f"--shard auto needs a SLURM array of consecutive ids (e.g. --array=0-{tasks - 1}, a "
            f"%limit is fine); got {SLURM_ID}={task} in an array of {tasks} tasks from {first} "
            f"to {environ.get(SLURM_MAX, '?')} in steps of {step}"
        )
    index = (task - first) // step
    if not 0 <= index < tasks:
        raise ValueError(
            f"{SLURM_ID}={task} lies outside the array of {tasks} tasks starting at {first}"
        )
    if count is not None and count != tasks:
        raise ValueError(
            f"--shard-count {count} disagrees with the SLURM array's {tasks} tasks; leave "
            "--shard-count out under SLURM"
        )
    return Shard(index + 1, tasks, f"{SLURM_ID}={task} of {tasks} tasks from {first}")


def _integer(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except ValueError:
        raise ValueError(f"{name} should be an integer, got {environ[name]!r}") from None


def pytest_report_header(config: pytest.Config) -> str | None:
    shard = shard_of(config)
    return None if shard is None else f"policybench: shard {shard} ({shard.source})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = shard_of(config)
    if shard is None:
        return
    settings = rundir.settings_of(config)
    places: dict[str, Mapping[int, int]] = {}  # per Eval: rollout index -> its place in the deal
    keep, drop = [], []
    for item in items:
        planned = planned_of(item)
        if planned is None:  # any other test runs in one shard, by a hash of its node id
            place = zlib.crc32(item.nodeid.encode())
        else:
            name = planned.eval.name
            if name not in places:
                plan = planned.eval.rollouts(settings.rollouts, settings.policy_settings.seed)
                places[name] = dealt(planned.eval, plan)
            place = places[name][planned.rollout.index]
        (keep if shard.takes(place) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def dealt(eval: Eval, plan: Sequence[Rollout]) -> dict[int, int]:
    """Each rollout's place when an Eval's plan is dealt out to the shards like cards: task by
    task (a task's rollouts together, tasks in plan order), starting at a place fixed by the
    Eval's name, so each shard gets every task's rollouts in equal share (within one) and the
    Evals' remainders do not all fall to the first shards."""
    tasks = {task: rank for rank, task in enumerate(dict.fromkeys(r.scene.task for r in plan))}
    ordered = sorted(plan, key=lambda rollout: tasks[rollout.scene.task])
    start = zlib.crc32(eval.name.encode())
    return {rollout.index: start + place for place, rollout in enumerate(ordered)}


AGGREGATOR = "policybench-aggregator"  # the controller's plugin holding the run's run.json
EMPTY = pytest.StashKey[bool]()  # the controller kept this shard's run as having nothing to run


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A shard dealt no rollout (fewer task-cards than shards) is still a shard of the run: its
    run directory is kept with its run.json (its shard, an empty selection) and an empty
    results.jsonl, so `report merge` counts it, and it exits 0, not pytest's "no tests ran".
    Its success gates have nothing of their own to judge: they are the merged run's."""
    config = session.config
    shard = shard_of(config)
    if shard is None or is_worker(config) or session.testscollected:
        return
    if session.exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED:
        return  # stopped, or a collection error: not a shard that had nothing to run
    context = rundir.run_context(config)
    aggregator = config.pluginmanager.get_plugin(AGGREGATOR)
    if not context.made or aggregator is None:
        return
    run_info = aggregator.run_info
    fingerprint = Protocol.of([], run_info.settings).as_json()
    replace(run_info, fingerprint=fingerprint).write(context.run_dir)
    if context.settings.blinding is not None:  # merge asks every part for the run's blinding
        context.settings.blinding.write(context.run_dir, aggregator.command)
    (context.run_dir / RESULTS).touch()
    config.stash[EMPTY] = True
    config.stash[gates.BREACHED] = False
    aggregator.unreported = ()  # a gate over this shard's nothing: no FAIL line
    session.exitstatus = pytest.ExitCode.OK


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.stash.get(EMPTY, False):
        run_dir = rundir.run_dir_of(config)
        terminalreporter.write_line(
            f"policybench: shard {shard_of(config)} had nothing to run (no selected rollout "
            "was dealt to it: fewer task-cards than shards); its run directory "
            f"{run_dir} is "
            "kept so that report merge counts this shard"
        )
