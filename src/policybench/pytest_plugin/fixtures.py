"""Fixtures: the per-process Runner (Worlds and Policies reused across rollouts) and `harness`,
which runs one Rollout and leaves its Episode on the test item for reporting."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator

import pytest

from policybench.harness import Observer, error_episode, run_rollout
from policybench.policy.base import Policy
from policybench.policy.registry import PolicyUnavailable, build_policy
from policybench.pytest_plugin.collection import evals_of
from policybench.pytest_plugin.options import RunSettings, read_settings
from policybench.record.episode import Episode, Outcome, OutcomeKind
from policybench.spec import Eval, Rollout
from policybench.world import World

SETTINGS = pytest.StashKey[RunSettings]()
EPISODE = pytest.StashKey[Episode]()
# Recorder plugins add their observers to an item's list before its test runs.
OBSERVERS = pytest.StashKey[list[Observer]]()


def add_observer(item: pytest.Item, observer: Observer) -> None:
    """Lets a recorder see every observation of the rollout `item` runs."""
    item.stash.setdefault(OBSERVERS, []).append(observer)


def _fan_out(observers: list[Observer]) -> Observer | None:
    if not observers:
        return None
    if len(observers) == 1:
        return observers[0]

    def observe(time_ns: int, obs) -> None:
        for observer in observers:
            observer(time_ns, obs)

    return observe


def settings_of(config: pytest.Config) -> RunSettings:
    if SETTINGS not in config.stash:
        config.stash[SETTINGS] = read_settings(config)
    return config.stash[SETTINGS]


class RolloutError(Exception):
    """A rollout ended in `error`; its message is the outcome's reason."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


class Runner:
    """One World and one Policy per Eval in this process, built on first use."""

    def __init__(self, settings: RunSettings) -> None:
        self._settings = settings
        self._worlds: dict[str, World] = {}
        self._policies: dict[str, Policy] = {}

    def run(self, rollout: Rollout, eval: Eval, observer: Observer | None = None) -> Episode:
        world = self._worlds.get(eval.name)
        if world is None:
            world = self._worlds[eval.name] = World(eval)
        try:
            policy = self._policy_for(eval, world, rollout.scene.task)
        except PolicyUnavailable as unavailable:
            pytest.skip(str(unavailable))
        except Exception as error:
            return error_episode(
                rollout,
                eval,
                world,
                f"could not set up {eval.name!r} for policy {self._settings.policy!r}: "
                f"{type(error).__name__}: {error}",
                traceback.format_exc(),
            )
        return run_rollout(rollout, eval, world, policy, observer)

    def _policy_for(self, eval: Eval, world: World, task: str) -> Policy:
        policy = self._policies.get(eval.name)
        if policy is None:
            space = world.env_for(task).action_space
            policy = build_policy(
                self._settings.policy, eval, space, self._settings.policy_settings
            )
            self._policies[eval.name] = policy
        return policy

    def close(self) -> None:
        for world in self._worlds.values():
            world.close()


@pytest.fixture(scope="session")
def policybench_runner(pytestconfig: pytest.Config) -> Iterator[Runner]:
    runner = Runner(settings_of(pytestconfig))
    yield runner
    runner.close()


@pytest.fixture
def harness(
    request: pytest.FixtureRequest, policybench_runner: Runner
) -> Callable[[Rollout], Episode]:
    """`harness(rollout)` runs the rollout and returns its Episode; an `error` outcome raises."""
    evals = evals_of(request.node)

    def run(rollout: Rollout | Eval) -> Episode:
        if isinstance(rollout, Eval):
            reason = (
                f"eval {rollout.name!r} planned no rollouts (--rollouts="
                f"{settings_of(request.config).rollouts}); ask for at least one per task"
            )
            raise RolloutError(Outcome(OutcomeKind.ERROR, reason))
        eval = evals.get(rollout.eval)
        if eval is None:
            raise LookupError(
                f"rollout {rollout.id!r} belongs to eval {rollout.eval!r}, which this test does "
                f"not declare; declared: {sorted(evals)}"
            )
        observer = _fan_out(request.node.stash.get(OBSERVERS, []))
        episode = policybench_runner.run(rollout, eval, observer)
        request.node.stash[EPISODE] = episode
        if episode.outcome.kind is OutcomeKind.ERROR:
            raise RolloutError(episode.outcome)
        return episode

    return run
