"""This run: its settings, shard, the run it resumes, its directory and its command line as
recorded, resolved once by the controller (`run_context`) and handed to xdist workers whole.

The run directory is made when the run is resolved (atomically: two runs started in the same
second get two), and removed at the end if the run recorded nothing in it."""

from __future__ import annotations

import contextlib
import pickle
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from policybench.pytest_plugin import hookspecs
from policybench.pytest_plugin.options import (
    SHARED_KEY,
    SHARED_URL,
    RunSettings,
    read_settings,
    served_by_shared_server,
)
from policybench.pytest_plugin.workers import from_controller, hand_to_workers, is_worker
from policybench.run.arms import blinded_command
from policybench.run.command_line import redacted_command
from policybench.run.results import LATEST, RESULTS, new_run_dir, resolve_run

if TYPE_CHECKING:
    from policybench.run.resumed import Resumed
    from policybench.run.shard import Shard

CONTEXT = pytest.StashKey["RunContext"]()
HANDED = "run_context"  # what the controller hands workers: the RunContext, pickled


@dataclass(frozen=True)
class RunContext:
    """What every process of a run agrees on. `made`: the run made its directory (it is not
    one it resumes). `command`: the command line as files show it, secrets hidden (and the
    policies too under --blind)."""

    settings: RunSettings
    run_dir: Path
    made: bool
    command: tuple[str, ...]
    shard: Shard | None = None
    resumed: Resumed | None = None


def run_context(config: pytest.Config) -> RunContext:
    """This run's context: resolved by the controller when first asked for, the same one in
    every worker."""
    if CONTEXT not in config.stash:
        handed = from_controller(config, HANDED)
        if handed is None:
            context = resolve(config)
            hand_to_workers(config, HANDED, pickle.dumps(context))
        else:  # the same interpreter and package on both ends
            context = pickle.loads(handed)
            shared = from_controller(config, SHARED_URL)
            if shared is not None:
                key = from_controller(config, SHARED_KEY)
                settings = served_by_shared_server(config, context.settings, shared, key)
                context = replace(context, settings=settings)
        config.stash[CONTEXT] = context
    return config.stash[CONTEXT]


def settings_of(config: pytest.Config) -> RunSettings:
    return run_context(config).settings


def run_dir_of(config: pytest.Config) -> Path:
    """This run's report directory, the same in the controller and every worker."""
    return run_context(config).run_dir


def resolve(config: pytest.Config) -> RunContext:
    """The run as its options say, in this order: the run --resume continues (a blinded one
    keeps its letters), the settings, the resumed run's records (refused if its protocol
    differs), the shard, then the run directory: the resumed one, or a new one."""
    report_dir = config.rootpath / config.getoption("report_dir")
    option = config.getoption("resume", None)
    resumed_dir = None
    if option is not None:
        try:
            resumed_dir = resolve_run(option, report_dir).resolve()
        except FileNotFoundError as error:
            raise pytest.UsageError(f"--resume: {error}") from None
    settings = read_settings(config, resumed_dir)
    hook = config.hook
    resumed = None
    if resumed_dir is not None:
        resumed = hook.pytest_policybench_resumed(
            config=config, run_dir=resumed_dir, settings=settings
        )
    shard = hook.pytest_policybench_shard(config=config)
    args = redacted_command(config.invocation_params.args)
    command = tuple(blinded_command(args) if settings.blinding else args)
    if resumed_dir is not None:  # a resumed shard's directory already names the shard
        return RunContext(settings, resumed_dir, False, command, shard, resumed)
    run_dir = new_run_dir(report_dir, None if shard is None else shard.label)
    return RunContext(settings, run_dir, True, command, shard, resumed)


def discarded(context: RunContext | None) -> bool:
    """Whether the run made a directory and recorded nothing in it (so none is kept)."""
    return context is not None and context.made and not (context.run_dir / RESULTS).is_file()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):
        run_context(config)  # resolved, and handed to the workers, before they start


NOTHING_RAN = pytest.StashKey[bool]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    session.config.stash[NOTHING_RAN] = session.testscollected == 0


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Says why a run that selected nothing left no run directory (a session whose tests are
    not rollouts records nothing either, and is not told so)."""
    context = config.stash.get(CONTEXT, None)
    if discarded(context) and config.stash.get(NOTHING_RAN, False):
        reports = _shown(context.run_dir.parent, config.invocation_params.dir)
        terminalreporter.write_line(
            f"policybench: no rollout ran, so no run directory is kept ({context.run_dir.name} "
            f"removed; {reports / LATEST} is unchanged)"
        )


def _shown(path: Path, invoked_in: Path) -> Path:
    """`path` as the user can find it from where pytest was invoked: relative when under it."""
    try:
        return path.relative_to(invoked_in)
    except ValueError:
        return path


def pytest_unconfigure(config: pytest.Config) -> None:
    """A run that recorded nothing (everything deselected, -k matching nothing, stopped before
    its first rollout ended) leaves no empty run directory behind."""
    context = config.stash.get(CONTEXT, None)
    if discarded(context) and not is_worker(config):
        shutil.rmtree(context.run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):  # nor a report directory it made and left empty
            context.run_dir.parent.rmdir()


BASELINE = pytest.StashKey["Path | None"]()
BASELINE_HANDED = "baseline_run"  # --baseline's run directory, handed to the workers


def baseline_dir(config: pytest.Config) -> Path | None:
    """--baseline's run directory (None without one), resolved once by the controller before
    this run is `latest`, and handed to its workers (the gates, --decide baseline and the
    comparison at the end all read this one); a UsageError when there is no such run."""
    if BASELINE not in config.stash:
        if is_worker(config):
            handed = from_controller(config, BASELINE_HANDED)
            found = None if handed is None else Path(handed)
        else:
            found = _resolved_baseline(config)
            if found is not None:
                hand_to_workers(config, BASELINE_HANDED, str(found))
        config.stash[BASELINE] = found
    return config.stash[BASELINE]


def _resolved_baseline(config: pytest.Config) -> Path | None:
    given = config.getoption("baseline", None)
    if given is None:
        return None
    try:
        return resolve_run(given, settings_of(config).report_dir).resolve()
    except FileNotFoundError as error:
        raise pytest.UsageError(f"--baseline: {error}") from None
