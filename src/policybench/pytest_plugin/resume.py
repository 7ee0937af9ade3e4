"""`--resume RUN`: finishes an interrupted run in its own run directory. Rollouts with a final
outcome (solved or unsolved) are carried over and not run again; errors and missing rollouts run.
A run whose protocol differs (settings, or what an Eval records about itself) is refused."""

from __future__ import annotations

import json
import shlex
from argparse import SUPPRESS
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.harness import planned_statics
from policybench.pytest_plugin import rundir
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.options import RunSettings, protocol_settings
from policybench.record.episode import OutcomeKind
from policybench.record.protocol import FORMER_OVERRIDE, OVERRIDE, Difference, Protocol
from policybench.run.command_line import BLIND, redacted_command
from policybench.run.files import write_file
from policybench.run.info import RunInfo
from policybench.run.records import latest_by_rollout
from policybench.run.results import RESULTS, read_results
from policybench.run.resumed import Resumed
from policybench.serve.client import HIDDEN

FINAL = (OutcomeKind.SOLVED, OutcomeKind.UNSOLVED)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--resume",
        default=None,
        metavar="RUN",
        help="continue an interrupted run (a run directory, a run id under the report dir, or "
        "latest): its solved and unsolved rollouts are kept, the rest run, in the same run dir",
    )
    group.addoption(
        OVERRIDE,
        action="store_true",
        help="with --resume: continue a run whose protocol or policy differs; with --baseline: "
        "judge regressions against a baseline whose protocol differs (the report lists how)",
    )
    group.addoption(
        FORMER_OVERRIDE, dest="allow_protocol_change", action="store_true", help=SUPPRESS
    )


def pytest_policybench_resumed(
    config: pytest.Config, run_dir: Path, settings: RunSettings
) -> Resumed:
    """The run --resume continues, in `run_dir` (see rundir, which resolves it)."""
    results = read_results(run_dir / RESULTS)
    info = RunInfo.load(run_dir)
    if info is not None and not config.getoption("allow_protocol_change"):
        before, now = Protocol.of((), info.settings), Protocol.of((), protocol_settings(settings))
        _refuse(before.differences(now), run_dir)
    carried = final_records(results.records)
    return Resumed(run_dir, carried, results.records, results.problems)


def resumed_of(config: pytest.Config) -> Resumed | None:
    return rundir.run_context(config).resumed


def final_records(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a resumed run carries: the latest record of each rollout among those with a final
    outcome (one that ended in error is run again)."""
    finals = (r for r in records if OutcomeKind(r[keys.OUTCOME]) in FINAL and keys.NODEID in r)
    return latest_by_rollout(finals)


@pytest.hookimpl(trylast=True)  # after -k, --suite and shards have selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    resumed = resumed_of(config)
    if resumed is None:
        return
    carried = set(resumed.carried)
    if not config.getoption("allow_protocol_change"):
        _check_evals(config, items, resumed)
    done = [item for item in items if item.nodeid in carried]
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = [item for item in items if item.nodeid not in carried]


def _check_evals(config: pytest.Config, items: list[pytest.Item], resumed: Resumed) -> None:
    """Refuses when what the Evals record of themselves before a rollout runs (see
    record.protocol) differs from what the run being continued recorded."""
    run_dir, before = resumed.run_dir, resumed.all_records
    planned = [planned_of(item) for item in items]
    now = [planned_statics(p.rollout, p.eval) for p in planned if p is not None]
    _refuse(Protocol.of(before).differences(Protocol.of(now)), run_dir)


def _refuse(differences: Iterable[Difference], run_dir: Path) -> None:
    lines = [d.line("the run being resumed", "this run") for d in differences]
    if lines:
        raise pytest.UsageError(
            f"--resume {run_dir}: the protocol differs, so its rollouts cannot be carried over:"
            + "".join(f"\n  {line}" for line in lines)
            + f"\nrun with the settings it was started with, start a new run, or pass {OVERRIDE}"
        )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A resumed run with nothing left to run (every rollout carried over) is finished, not a
    run that collected nothing."""
    resumed = resumed_of(session.config)
    if resumed is not None and resumed.carried and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


def pytest_report_header(config: pytest.Config) -> str | None:
    resumed = resumed_of(config)
    if resumed is None:
        return None
    return (
        f"policybench: resuming {resumed.run_dir}: {len(resumed.carried)} rollouts carried over "
        "(solved or unsolved), the rest run"
    )


def compact(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Rewrites results.jsonl with one record per rollout (what a resumed run superseded goes),
    atomically: a crash meanwhile leaves the old file."""
    write_file(path, "".join(json.dumps(record, sort_keys=True) + "\n" for record in records))


def resume_command(config: pytest.Config) -> str:
    """The command that continues this run: its own, with `--resume` naming its run directory
    (an API key shows as ***: the user gives it again; a --blind KEY is left out, as the
    resumed run's own key is taken)."""
    args = redacted_command(config.invocation_params.args)
    kept = [arg for i, arg in enumerate(args) if not _is_resume(args, i)]
    blind = [BLIND] if any(_is_blind(kept, i) for i in range(len(kept))) else []
    kept = [arg for i, arg in enumerate(kept) if not _is_blind(kept, i)]
    return shlex.join(["pytest", *kept, *blind, "--resume", str(rundir.run_dir_of(config))])


def _is_blind(args: list[str], i: int) -> bool:
    """Whether args[i] is `--blind`, its hidden KEY, or `--blind=KEY`."""
    arg = args[i]
    return (
        arg == BLIND
        or arg.startswith(f"{BLIND}=")
        or (i > 0 and args[i - 1] == BLIND and arg == HIDDEN)
    )


def _is_resume(args: list[str], i: int) -> bool:
    """Whether args[i] is `--resume`, its value, or `--resume=RUN`."""
    arg = args[i]
    return arg == "--resume" or arg.startswith("--resume=") or (i > 0 and args[i - 1] == "--resume")
