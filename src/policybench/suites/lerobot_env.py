"""LeRobot's env plugins: every installed distribution named `lerobot_env_*` (LeRobot 0.6's
third-party envs, PR 3823) is an Eval, `lerobot-env-<rest of its name>`, without a line of
policybench code, staged as lerobot-eval 0.6.1 stages a plugin env:

- the plugin is imported by its distribution's name (`register_third_party_plugins`), which
  registers its gym ids under a namespace of that name; its tasks are those ids, in the order
  they were registered (`--env.task` names one; `gym_id` is `{package_name}/{task}`);
- `gym.make(id, disable_env_checker=True)` builds a task's env, with the registered defaults
  (the keyword arguments of a plugin's EnvConfig come from LeRobot, which does not install on
  this Python: where they differ from the registration, the docs say so for the plugins we test);
- episode i of every task is reset with seed 1000 + --seed + i (lerobot-eval's start seed plus
  the episode), and the new-rollout option lerobot-eval passes; it steps until the env
  terminates or its registered TimeLimit truncates it;
- the instruction is the env's `task_description`, else its `task`, else empty, as lerobot-eval
  reads them; the control rate is the env's `render_fps` (gymnasium's metadata; LeRobot's
  EnvConfig `fps` says the same for the plugins we test).

Success: lerobot-eval 0.6.1 reads `info["is_success"]` alone; a plugin that reports success under
another key (`lerobot_env_so101` says `info["succeed"]`) scores 0 there. policybench reads
`is_success`, else `succeed`, else `success`, and records which the env gave (`success_key`).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.metadata import distributions
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.envserver import isolable
from policybench.policy.base import Observation
from policybench.policy.codec import Codec, action_dims, keep, prompt, rename
from policybench.policy.contract import Contract
from policybench.spec import Eval, Rollout, Scene, numbered

PREFIX = "lerobot_env_"  # lerobot.utils.import_utils.register_third_party_plugins
START_SEED = 1000  # lerobot-eval's default --seed
NEW_ROLLOUT_OPTION = "lerobot_new_rollout"  # lerobot.envs.utils: a reset that starts an episode
SUCCESS_KEYS = ("is_success", "succeed", "success")
SUCCESS_KEY = "success_key"  # which of SUCCESS_KEYS the env's info gave, in each step's info
# LeRobot's names for a gym env's observation entries (lerobot.envs.utils.preprocess_observation)
STATE_ENTRY, ENV_STATE_ENTRY, PIXELS_ENTRY = "agent_pos", "environment_state", "pixels"


def plugin_distributions() -> list[str]:
    """The installed distributions LeRobot 0.6 imports as env plugins, by name."""
    names = {dist.metadata.get("Name") or "" for dist in distributions()}
    return sorted(name for name in names if name.startswith(PREFIX))


@dataclass(frozen=True)
class PluginTask:
    """One registered env of a plugin, as lerobot-eval runs it."""

    name: str  # the id within the plugin's namespace: lerobot-eval's --env.task
    instruction: str
    max_steps: int
    control_hz: float
    actions: int  # the action's size
    entries: tuple[str, ...]  # its observation's entries, as policybench names them


def plugin_tasks(distribution: str, **gym_kwargs: Any) -> list[PluginTask]:
    """The envs `distribution` registers once imported, in their registration order (each one
    built once, with `gym_kwargs`, for what lerobot-eval reads of it)."""
    importlib.import_module(distribution)
    specs = [spec for spec in gym.registry.values() if spec.namespace == distribution]
    if not specs:
        raise LookupError(
            f"the LeRobot env plugin {distribution!r} registers no gym id under its own "
            f"namespace ({distribution}/...), where lerobot-eval looks for its tasks"
        )
    return [_task(spec, gym_kwargs) for spec in specs]


def _task(spec: gym.envs.registration.EnvSpec, gym_kwargs: dict[str, Any]) -> PluginTask:
    env = PluginEnv(gym.make(spec.id, disable_env_checker=True, **gym_kwargs))
    try:
        unwrapped = env.unwrapped
        instruction = getattr(unwrapped, "task_description", None) or getattr(unwrapped, "task", "")
        fps = unwrapped.metadata.get("render_fps")
        actions = int(np.prod(env.action_space.shape))
        entries = tuple(env.observation_space.spaces)
    finally:
        env.close()
    if not fps or spec.max_episode_steps is None:
        raise LookupError(
            f"{spec.id} declares no control rate (metadata['render_fps']) or no episode limit "
            "(max_episode_steps): policybench needs both to time its rollouts"
        )
    name, instruction = spec.id.partition("/")[2], str(instruction or "")
    return PluginTask(name, instruction, spec.max_episode_steps, float(fps), actions, entries)


class PluginEnv(gym.Wrapper):
    """A plugin's env as policybench sees it: its `agent_pos` as `state`, its other entries by
    their names (`pixels` as `image`, or `image.<camera>`), and `success` in each step's info
    read from the first of SUCCESS_KEYS the env gives (`success_key` names it)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Dict(_named(dict(env.observation_space.spaces)))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # lerobot-eval's vector env hands the sub-env its new-rollout option with the seed.
        obs, info = self.env.reset(seed=seed, options={NEW_ROLLOUT_OPTION: True})
        return _named(obs), info

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self.env.step(action)
        given = next((key for key in SUCCESS_KEYS if key in info), None)
        info = {**info, keys.SUCCESS: bool(info[given]) if given else False, SUCCESS_KEY: given}
        return _named(obs), reward, terminated, truncated, info


def _named(obs: Mapping[str, Any]) -> dict[str, Any]:
    named: dict[str, Any] = {}
    for entry, value in obs.items():
        if entry == STATE_ENTRY:
            named[keys.STATE] = value
        elif entry == PIXELS_ENTRY and isinstance(value, Mapping | gym.spaces.Dict):
            named.update({f"{keys.IMAGE}.{camera}": image for camera, image in value.items()})
        else:
            named[keys.IMAGE if entry == PIXELS_ENTRY else entry] = value
    return named


def make_plugin_env(task: str, distribution: str, **gym_kwargs: Any) -> gym.Env:
    """Task `task` of plugin `distribution`, built as lerobot-eval builds it (`gym_kwargs`: an
    EnvConfig's `gym_kwargs`, as `--env.<field>` would set them)."""
    importlib.import_module(distribution)
    if f"{distribution}/{task}" not in gym.registry:
        known = [
            s.id.partition("/")[2] for s in gym.registry.values() if s.namespace == distribution
        ]
        raise ValueError(f"{distribution} has no task {task!r}; known: {', '.join(known)}")
    made = gym.make(f"{distribution}/{task}", disable_env_checker=True, **gym_kwargs)
    return PluginEnv(made)


@dataclass(frozen=True)
class PluginPlan:
    """lerobot-eval's episodes: rollout i of every task seeded START_SEED + --seed + i, each
    task timed by its own episode limit."""

    tasks: tuple[PluginTask, ...]

    def __call__(
        self, eval_name: str, rollouts_per_task: int, base_seed: int
    ) -> tuple[Rollout, ...]:
        planned = [
            (task.instruction, Scene(task.name, START_SEED + base_seed + i))
            for task in self.tasks
            for i in range(rollouts_per_task)
        ]
        limits = {task.name: task.max_steps / task.control_hz for task in self.tasks}
        return tuple(
            replace(rollout, timeout_s=limits[rollout.scene.task])
            for rollout in numbered(eval_name, 0.0, planned)
        )


def hold_still(size: int, last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Until a plugin env's first action arrives, zeros (`size` of them); then its last action
    again (LeRobot's plugin envs take deltas or targets: a plugin whose zero is a pose, or whose
    last delta keeps moving it, says so in its docs)."""
    return np.zeros(size, np.float32) if last is None else last


def lerobot_codec(entries: tuple[str, ...], actions: int, contract: Contract) -> Codec:
    """LeRobot's names for a gym env's observation `entries` (`preprocess_observation`):
    `agent_pos` as `observation.state`, `environment_state` as `observation.environment_state`,
    one image as `observation.image`, each camera's as `observation.images.<camera>`; the
    instruction as `task`."""
    names = {keys.STATE: "observation.state", ENV_STATE_ENTRY: "observation.environment_state"}
    names[keys.IMAGE] = "observation.image"
    for entry in entries:
        if entry.startswith(f"{keys.IMAGE}."):
            names[entry] = "observation.images." + entry.removeprefix(f"{keys.IMAGE}.")
    renamed = {entry: names[entry] for entry in entries if entry in names}
    return Codec(
        "lerobot",
        (rename(renamed), keep(*renamed.values()), prompt("task"), action_dims(actions)),
        contract,
    )


def openpi_codec(entries: tuple[str, ...], actions: int, contract: Contract) -> Codec:
    """openpi's keys in the style of its examples: `state` as `observation/state`, the env's
    other entries as `observation/<entry>`, one image as `observation/image`, each camera's as
    `observation/<camera>_image`; the instruction as the prompt; the first `actions` dimensions
    of each answered action are played."""
    names = {}
    for entry in entries:
        if entry.startswith(f"{keys.IMAGE}."):
            names[entry] = "observation/" + entry.removeprefix(f"{keys.IMAGE}.") + "_image"
        else:
            names[entry] = f"observation/{entry}"
    return Codec(
        "openpi",
        (rename(names), keep(*names.values()), prompt(), action_dims(actions)),
        contract,
    )


def plugin_eval(distribution: str, name: str | None = None, **gym_kwargs: Any) -> Eval:
    """The Eval of one installed plugin: all its tasks, which must share a control rate, an
    action size and observation entries. `gym_kwargs` go to every `gym.make` (what a plugin's
    EnvConfig passes: `random_block_position=True`, say), recorded; `name` then names the Eval
    (default: `lerobot-env-<rest of the distribution's name>`)."""
    tasks = tuple(plugin_tasks(distribution, **gym_kwargs))
    shared = {(task.control_hz, task.actions, task.entries) for task in tasks}
    if len(shared) != 1:
        raise LookupError(
            f"{distribution}'s envs differ in control rate, action size or observation entries "
            f"({sorted(shared)}): one Eval needs them alike"
        )
    ((control_hz, actions, entries),) = shared
    # What a plugin says of its actions' meaning is in its docs, not its code: the rate alone.
    contract = Contract(control_hz=control_hz)
    return Eval(
        name=name or "lerobot-env-" + distribution.removeprefix(PREFIX),
        make_env=isolable(make_plugin_env, distribution=distribution, **gym_kwargs),
        plan=PluginPlan(tasks),
        control_hz=control_hz,
        hold=functools.partial(hold_still, actions),
        hold_name="zeros, then the last action again",
        requires=(distribution,),
        install=f"pip install {distribution}",
        packages=(distribution, "gymnasium", "mujoco"),
        metadata={
            "protocol": "lerobot",
            "lerobot_version": "0.6.1",
            "plugin": distribution,
            "gym_kwargs": gym_kwargs,
            "observation": ", ".join(entries),
            "max_steps": {task.name: task.max_steps for task in tasks},
            "staging": f"gym.make('{distribution}/<task>', disable_env_checker=True, "
            f"**gym_kwargs), reset(seed={START_SEED} + --seed + i) (lerobot-eval's episode i)",
            "success_check": f"the first of info{list(SUCCESS_KEYS)} the env gives "
            "(lerobot-eval reads is_success alone)",
        },
        contract=contract,
        codecs={
            "lerobot": lerobot_codec(entries, actions, contract),
            "openpi": openpi_codec(entries, actions, contract),
        },
    )


@functools.cache
def plugin_evals() -> dict[str, Eval]:
    """Every installed plugin's Eval, by name; a plugin that cannot be read is left out with
    one line on stderr saying why."""
    found = {}
    for distribution in plugin_distributions():
        try:
            eval = plugin_eval(distribution)
        except Exception as error:  # a broken plugin must not break the others
            print(
                f"policybench: LeRobot env plugin {distribution} left out: {error}", file=sys.stderr
            )
            continue
        found[eval.name] = eval
    return found


def _declare() -> None:
    """Each installed plugin's Eval as an attribute of this module (its name in capitals),
    where the suite registry and env servers find Evals."""
    for name, eval in plugin_evals().items():
        globals()[name.removeprefix("lerobot-env-").replace("-", "_").upper()] = eval


_declare()
