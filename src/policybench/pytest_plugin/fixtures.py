"""Fixtures: the per-process Runner (Worlds and Policies reused across rollouts) and `harness`,
which runs the item's Rollout and leaves its Episode on the item for reporting. Recorders see
each observation through `add_observer` and add to the rollout's record with `add_to_record`."""

from __future__ import annotations

import resource
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from policybench import keys
from policybench.gl import no_backend_reason
from policybench.harness import Observer, Recorder, error_episode, run_rollout
from policybench.lockstep import Lockstep
from policybench.policy.base import Observation, Policy
from policybench.preflight import Preflight, Verdict, preflight
from policybench.pytest_plugin.arms import Arm
from policybench.pytest_plugin.attended import attend, is_attended
from policybench.pytest_plugin.collection import Planned, planned_of
from policybench.pytest_plugin.lockstep import group_of, slots_of
from policybench.pytest_plugin.options import RunSettings
from policybench.pytest_plugin.preflights import PreflightStore, store_of
from policybench.pytest_plugin.rundir import settings_of
from policybench.pytest_plugin.watchdog import watched
from policybench.record.episode import Episode, Outcome
from policybench.record.rollout_trace import StateRecorder
from policybench.record.video import unfilmable
from policybench.registry import PolicyUnavailable, build_policy
from policybench.rendering import NEEDS_DEVICE, env_render_problem
from policybench.spec import Rollout
from policybench.world import EnvCache, World, world_key

EPISODE = pytest.StashKey[Episode]()
# Recorder plugins add their observers to an item's list before its test runs ...
OBSERVERS = pytest.StashKey[list[Observer]]()
# ... and their fields to its record (a video's file, say) before its report is made.
RECORD_FIELDS = pytest.StashKey[dict[str, Any]]()


def add_observer(item: pytest.Item, observer: Observer) -> None:
    """Lets a recorder see every observation of the rollout `item` runs."""
    item.stash.setdefault(OBSERVERS, []).append(observer)


STATES = pytest.StashKey[StateRecorder]()


def state_recorder(item: pytest.Item) -> StateRecorder:
    """The one recorder of the small observation entries of the rollout `item` runs, made and
    added as an observer by whichever plugin asks first (its trace and its specs read it)."""
    if STATES not in item.stash:
        # A run under candidate pins compares its arms' states number for number.
        precise = any(arm.pins is not None for arm in settings_of(item.config).arms)
        item.stash[STATES] = StateRecorder(precise=precise)
        add_observer(item, item.stash[STATES])
    return item.stash[STATES]


def add_to_record(item: pytest.Item, fields: dict[str, Any]) -> None:
    """Adds JSON-safe `fields` to the record of the rollout `item` runs."""
    item.stash.setdefault(RECORD_FIELDS, {}).update(fields)


class FanOut:
    """Every recorder of an item, seen as one (a Recorder: it restarts them all)."""

    def __init__(self, observers: list[Observer]) -> None:
        self._observers = observers

    def __call__(self, time_ns: int, obs: Observation) -> None:
        for observer in self._observers:
            observer(time_ns, obs)

    def restart(self) -> None:
        for observer in self._observers:
            if isinstance(observer, Recorder):
                observer.restart()


class RolloutError(Exception):
    """A rollout ended in `error`; its message is the outcome's reason."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


class PolicyCannotRun(pytest.skip.Exception):
    """Skips a rollout whose policy cannot run on its Eval (no scripted expert, no codec)."""


class EvalCannotRender(pytest.skip.Exception):
    """Skips a rollout whose Eval needs a rendering device this machine lacks (a Vulkan device
    for SAPIEN's envs), saying what to install."""


class Runner:
    """One World per Eval and one Policy per Eval and arm in this process, built on first use;
    the Worlds and lockstep slots share one EnvCache, so the process holds at most
    max(`--max-envs-per-worker`, `--envs-per-worker`) live envs (a group's K envs are live at
    once; building the next one's closes the least recently used first)."""

    def __init__(
        self, settings: RunSettings, preflights: PreflightStore, worker: str, slots: int = 1
    ) -> None:
        self._settings = settings
        self.slots = slots  # rollouts run side by side (--envs-per-worker)
        self.worker = worker
        self._preflights = preflights
        self.envs = EnvCache(max(settings.max_envs, slots))
        self._worlds: dict[str, World] = {}
        self._policies: dict[tuple[str, str], Policy] = {}  # by (Eval, arm)
        self._locksteps: dict[str, Lockstep] = {}  # by Eval, with --envs-per-worker K > 1
        self._ahead: dict[tuple[str, str | None, str], Episode] = {}  # run side by side

    def run(
        self, planned: Planned, observer: FanOut | None = None, group: Sequence[Planned] = ()
    ) -> tuple[Episode, list[str]]:
        """The rollout's Episode, run again from its start after an infrastructure error up to
        `--retry-errors` times, and why each earlier attempt ended. A `group` of rollouts (this
        one first) runs side by side, the others' Episodes kept for their own items."""
        retried: list[str] = []
        episode = self._ahead.pop(_ahead_key(planned), None)
        if episode is None and len(group) > 1:
            self._run_side_by_side(group)
            episode = self._ahead.pop(_ahead_key(planned), None)
        while True:
            if episode is None:
                episode = self._run_once(planned, observer)
            if not episode.outcome.transient or len(retried) >= self._settings.retry_errors:
                return episode, retried
            retried.append(episode.outcome.reason)
            if observer is not None:
                observer.restart()
            episode = None

    def _run_once(self, planned: Planned, observer: Observer | None) -> Episode:
        ready = self._ready(planned)
        if isinstance(ready, Episode):
            return ready
        world, policy = ready
        return run_rollout(planned.rollout, world, policy, observer)

    def _run_side_by_side(self, group: Sequence[Planned]) -> None:
        """Runs the group's rollouts in lockstep, keeping their Episodes for their items; a
        problem that stops the group (no policy, a failed preflight) is left to each item."""
        ready = self._ready(group[0])
        if isinstance(ready, Episode):
            return
        eval = group[0].eval
        lockstep = self._locksteps.get(world_key(eval))
        if lockstep is None:
            lockstep = self._locksteps[world_key(eval)] = Lockstep(eval, self.slots, self.envs)
        episodes = lockstep.run([planned.rollout for planned in group], ready[1])
        self._ahead.update(zip(map(_ahead_key, group), episodes, strict=True))

    def _ready(self, planned: Planned) -> tuple[World, Policy] | Episode:
        """The World and Policy of the rollout once its Eval's preflight passed; else the
        rollout's error Episode."""
        eval, rollout = planned.eval, planned.rollout
        if eval.renderer in NEEDS_DEVICE:
            lacking = env_render_problem(eval)  # asked once a process (rendering caches it)
            pins = planned.arm.pins if planned.arm is not None else None
            if lacking is not None and pins is not None:  # measured as not loading, not skipped
                world = self._worlds.get(world_key(eval)) or World(eval, self.envs)
                why = f"{eval.name} does not load under {' '.join(pins.pins)}: {lacking}"
                return error_episode(rollout, world, why)
            if lacking is not None:
                raise EvalCannotRender(f"{eval.name}: {lacking}")
        world = self._worlds.get(world_key(eval))
        if world is None:
            world = self._worlds[world_key(eval)] = World(eval, self.envs)
        arm = planned.arm or self._settings.arms[0]
        try:
            policy = self._policy_for(planned, arm, world)
        except PolicyUnavailable as unavailable:
            raise PolicyCannotRun(str(unavailable)) from None
        except Exception as error:
            shown = arm.label if planned.arm else self._settings.policy
            no_gl = no_backend_reason()  # the env may have failed to render for want of one
            return error_episode(
                rollout,
                world,
                f"could not set up {eval.name!r} for policy {shown!r}: "
                f"{type(error).__name__}: {error}" + (f" ({no_gl})" if no_gl else ""),
                traceback.format_exc(),
            )
        # An A/B run checks each arm's policy against the Eval.
        under = None if planned.arm is None else arm.label
        checked = self._preflights.get(
            eval.name, under, lambda: self._preflight(rollout, world, policy)
        )
        if checked.failed:
            named = repr(eval.name) if under is None else f"{eval.name!r} under arm {under!r}"
            reason = f"preflight of {named} failed, so none of its rollouts ran: "
            return error_episode(rollout, world, reason + str(checked.problem))
        return world, policy

    def _preflight(self, rollout: Rollout, world: World, policy: Policy) -> Preflight:
        """Asks the policy about the first observation of `rollout` (the first of its Eval this
        process runs: its env is built for the rollout anyway), once the machine has shown it
        renders what the Eval's env needs."""
        eval = world.eval
        unrenderable = env_render_problem(eval)
        if unrenderable is not None:
            return Preflight(eval.name, Verdict.FAILED, unrenderable)
        found = preflight(world, rollout, policy, self._settings.contract_mismatch)
        if self._settings.record_video and found.verdict is Verdict.PASSED:
            space = world.env_for(rollout.scene.task).observation_space
            missing = unfilmable(space)
            if missing is not None:
                found = replace(found, notes=(*found.notes, f"caveat: --record-video {missing}"))
        return found

    def _policy_for(self, planned: Planned, arm: Arm, world: World) -> Policy:
        eval = planned.eval
        policy = self._policies.get((eval.name, arm.label))
        if policy is None:
            task = planned.rollout.scene.task
            policy = build_policy(
                arm.policy,
                eval,
                self._settings.policy_settings_of(arm),
                lambda: world.env_for(task).action_space,
                planned.eval_ref,
            )
            self._policies[(eval.name, arm.label)] = policy
        return policy

    def failed(self, planned: Planned, error: Exception) -> Episode:
        """The error Episode of a rollout that running raised `error` for (being handled)."""
        eval, rollout = planned.eval, planned.rollout
        reason = f"running {rollout.id!r} raised {type(error).__name__}: {error}"
        world = self._worlds.get(world_key(eval)) or World(eval, self.envs)
        return error_episode(rollout, world, reason, traceback.format_exc())

    def process_record(self) -> dict[str, Any]:
        """What a rollout's record says of the process that ran it."""
        return {
            keys.WORKER: self.worker,
            keys.PEAK_RSS_MB: round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            keys.ENVS_BUILT: self.envs.built,
        }

    def close(self) -> None:
        for lockstep in self._locksteps.values():
            lockstep.close()
        self.envs.close()


def _ahead_key(planned: Planned) -> tuple[str, str | None, str]:
    return planned.eval.name, None if planned.arm is None else planned.arm.label, planned.rollout.id


@pytest.fixture(scope="session")
def policybench_runner(pytestconfig: pytest.Config) -> Iterator[Runner]:
    worker = getattr(pytestconfig, "workerinput", {}).get("workerid", "main")
    runner = Runner(
        settings_of(pytestconfig), store_of(pytestconfig), worker, slots_of(pytestconfig)
    )
    yield runner
    runner.close()


@pytest.fixture
def harness(
    request: pytest.FixtureRequest, policybench_runner: Runner
) -> Callable[[Rollout], Episode]:
    """`harness(rollout)` runs the item's rollout and returns its Episode; an `error` raises."""
    planned = planned_of(request.node)
    runner = policybench_runner

    def run(rollout: Rollout) -> Episode:
        if planned is None or rollout != planned.rollout:
            raise pytest.UsageError(
                f"{request.node.nodeid}: harness(rollout) runs the rollout this item was planned "
                "with; pass the `rollout` argument of a test declared with "
                "@policybench.parametrize(*evals)"
            )
        observers = request.node.stash.get(OBSERVERS, [])
        # A person attends one rollout at a time: an attended Eval's rollouts run one by one.
        group = [planned] if is_attended(planned) else group_of(request.node, runner.slots)
        fanout = FanOut(observers) if observers else None
        with watched(request.config, planned.rollout, runner.worker, len(group)):
            try:
                (episode, retried), attended = attend(
                    request.config,
                    planned,
                    request.node.nodeid,
                    lambda: runner.run(planned, fanout, group),
                )
            except Exception as error:  # raised outside a rollout (a recorder restarting, say)
                episode, retried, attended = runner.failed(planned, error), [], {}
        request.node.stash[EPISODE] = episode
        add_to_record(request.node, {**runner.process_record(), **attended})
        if retried:
            add_to_record(request.node, {keys.RETRIED: retried})
        if episode.outcome.is_error:
            raise RolloutError(episode.outcome)
        return episode

    return run
