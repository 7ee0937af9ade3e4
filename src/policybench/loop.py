"""`policybench.wrap(env)`: records each episode of a loop policybench does not drive (one env,
or one episode per sub-env of a VectorEnv) into a run directory the report reads as any run's."""

from __future__ import annotations

import atexit
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import iterate

from policybench import keys
from policybench.gl import choose_backend
from policybench.lifetime import INTERRUPTED
from policybench.record.loop_run import LoopRun, OpenEpisode, statics_of
from policybench.run.results import new_run_dir
from policybench.world import SUCCESS_INFO_KEYS, success_of

LOOP_RESET = "the loop reset the env"
LOOP_ENDED = "the loop ended the episode"
ENV_ENDED = "env ended the episode"


def wrap(
    env: gym.Env | VectorEnv,
    eval: str,
    task: str,
    scene: Mapping[str, Any] | None = None,
    instruction: str | None = None,
    policy: Mapping[str, Any] | None = None,
    arm: str | None = None,
    blind: bool = False,
    packages: Sequence[str] = (),
    run_dir: Path | str | None = None,
    report_dir: Path | str = "reports",
    success: SuccessRule | None = None,
) -> Recorder | VectorRecorder:
    """Wraps `env` so each episode the caller's loop runs is recorded under `run_dir` (None: a
    new run directory under `report_dir`). An episode's scene is its task and the seed and
    options the loop reset it with, plus `scene`; without a seed or `scene` it is recorded as
    undeclared (None). `policy` describes the policy, `arm` names it in an A/B run (loops of
    several arms may share one `run_dir`; `blind=True`, said by every loop that shares it, letters
    the arms and seals their policies away until `policybench report unblind`), `packages` are
    distributions whose versions every record keeps (policybench's and gymnasium's always).
    `success(obs, reward, info) -> bool` says whether a step solved the task, for an env whose
    info reports no success (CartPole); its name is recorded (`success_from`). The run is closed,
    its summary and report written, by `close()`, by leaving a `with` block, or at exit."""
    named = {keys.EVAL: eval, keys.TASK: task, **({} if arm is None else {keys.ARM: arm})}
    for name, value in named.items():
        if not isinstance(value, str) or not value:
            raise TypeError(f"policybench.wrap: {name} must be a non-empty string, got {value!r}")
    if blind and arm is None:
        raise TypeError(
            "policybench.wrap: blind=True letters the arms of an A/B run, so it needs this "
            'loop\'s arm, e.g. arm="pi0"'
        )
    if policy is not None:
        policy = {
            name: _json_value(name, value, "the policy's field") for name, value in policy.items()
        }
    if success is not None and not callable(success):
        raise TypeError(
            f"policybench.wrap: success must be a function (obs, reward, info) -> bool, got "
            f"{type(success).__name__}"
        )
    chosen = choose_backend()  # the env may render later, through MuJoCo's GL backend
    if chosen is not None and not chosen.works:
        warnings.warn(f"policybench.wrap: {chosen.line}", stacklevel=2)
    statics = statics_of(eval, task, instruction, policy, arm, packages)
    if success is not None:
        statics[keys.SUCCESS_FROM] = rule_name(success)
    directory = Path(run_dir) if run_dir is not None else new_run_dir(Path(report_dir))
    directory.mkdir(parents=True, exist_ok=True)
    vector = isinstance(env, VectorEnv)
    space = env.single_action_space if vector else env.action_space
    run = LoopRun(directory, statics, space, _declared_hz(env), blind)
    declared = None if scene is None else dict(scene)
    recorder = VectorRecorder if vector else Recorder
    return recorder(env, run, declared, success)


SuccessRule = Callable[[Any, float, Mapping[str, Any]], bool]
"""wrap(success=): whether a step (its observation, reward and info) solved the task."""


def rule_name(rule: SuccessRule) -> str:
    """How a record names a success rule: its module and qualified name."""
    module = getattr(rule, "__module__", None) or "?"
    return f"{module}.{getattr(rule, '__qualname__', type(rule).__name__)}"


def _judged(
    rule: SuccessRule | None, obs: Any, reward: Any, info: Mapping[str, Any]
) -> bool | None:
    """A step's success: the rule's, where one is given; else what the env's info says."""
    return success_of(info) if rule is None else bool(rule(obs, float(reward), info))


class Closing:
    """How a wrapped run ends: `close()`, a `with` block (an exception in it is the open
    episodes' error) or the interpreter's exit (after an uncaught exception, likewise)."""

    run: LoopRun

    def _start_closing(self) -> None:
        self._finished = False
        atexit.register(self._at_exit)

    @property
    def run_dir(self) -> Path:
        """The run directory the episodes are recorded in (for `report compare` and the like)."""
        return self.run.run_dir

    def _refuse_closed(self) -> None:
        if self._finished:
            raise RuntimeError(
                f"policybench.wrap: the run in {self.run.run_dir} is closed (by close(), the end "
                "of its with block, or the exit), so this episode would not be recorded; wrap a "
                f"new env with run_dir={str(self.run.run_dir)!r} to record more episodes into it"
            )

    def _end_open(self, how: str, error: str | None) -> None:
        raise NotImplementedError

    def _finish(self, error: str | None) -> bool:
        """Records the open episodes and writes the run's summary and report; False when Ctrl-C
        interrupted that (it said so in one line: the recorded episodes are kept)."""
        if self._finished:
            return True
        self._finished = True
        atexit.unregister(self._at_exit)
        from policybench.report.cli import interrupted_line, rebuild_report  # at the end only

        try:
            try:
                self._end_open(LOOP_ENDED, error)
            finally:
                with self.run.locked():  # other loops recording into the run may be closing too
                    self.run.close()
                    if self.run.writer.path.is_file():  # summary.json and index.html
                        rebuild_report(self.run.run_dir)
        except KeyboardInterrupt:
            what = f"closing the wrapped loop's run in {self.run.run_dir} (writing its report)"
            print(interrupted_line(self.run.run_dir, what), file=sys.stderr, flush=True)
            return False
        return True

    def close(self) -> None:
        """Ends the run (see wrap); Ctrl-C while it writes the report ends the program with
        status 130 and one line saying how to write the report again."""
        finished = self._finish(None)
        self.env.close()  # type: ignore[attr-defined]
        if not finished:
            raise SystemExit(INTERRUPTED)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, _: Any) -> bool:
        finished = self._finish(None if error is None else _raised(error))
        self.env.close()  # type: ignore[attr-defined]
        if not finished:
            raise SystemExit(INTERRUPTED) from None
        return False

    def _at_exit(self) -> None:
        uncaught = getattr(sys, "last_value", None)  # set once the interpreter reported one
        if not self._finish(None if uncaught is None else _raised(uncaught)):
            # A SystemExit raised in an exit handler is reported with a traceback, and leaves
            # the exit status as it was: end here, as Ctrl-C ends a program.
            sys.stdout.flush()
            os._exit(INTERRUPTED)


def _raised(error: BaseException) -> str:
    said = str(error)
    return f"the loop raised {type(error).__name__}" + (f": {said}" if said else "")


class Recorder(Closing, gym.Wrapper):
    """Records every episode of one env: its actions, rewards, success signal, the loop's wall
    time per step, small state vectors and (if the env renders rgb_array) its video."""

    def __init__(
        self,
        env: gym.Env,
        run: LoopRun,
        scene: Mapping[str, Any] | None,
        success: SuccessRule | None = None,
    ) -> None:
        gym.Wrapper.__init__(self, env)
        self.run, self.scene, self.success = run, scene, success
        self.episode: OpenEpisode | None = None
        self.fps = _video_fps(env)
        self._start_closing()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self._refuse_closed()
        scene = scene_of(self.run.statics[keys.TASK], self.scene, seed, options)
        self._end_open(LOOP_RESET, None)
        self.episode = self.run.open(scene, self.fps)
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode.observed(obs, self._frame())
        return obs, info

    def step(self, action: Any) -> Any:
        episode = self.episode
        if episode is None:  # stepping on past an ended episode: not an episode of the run
            return self.env.step(action)
        episode.stepping()
        obs, reward, terminated, truncated, info = self.env.step(action)
        episode.stepped(action, reward, _judged(self.success, obs, reward, info))
        if terminated or truncated:
            self._end_open(ENV_ENDED, None)
        else:
            episode.observed(obs, self._frame())
        return obs, reward, terminated, truncated, info

    def _frame(self) -> np.ndarray | None:
        return None if self.fps is None else self.env.render()

    def _end_open(self, how: str, error: str | None) -> None:
        episode, self.episode = self.episode, None
        if episode is not None:
            episode.end(how, error)


class VectorRecorder(Closing, VectorWrapper):
    """Records one episode per sub-env of a VectorEnv, as Recorder does for one env; a sub-env
    the vector env resets on its own (autoreset) starts its next episode, of an undeclared seed."""

    def __init__(
        self,
        env: VectorEnv,
        run: LoopRun,
        scene: Mapping[str, Any] | None,
        success: SuccessRule | None = None,
    ) -> None:
        VectorWrapper.__init__(self, env)
        self.run, self.scene, self.success = run, scene, success
        self.episodes: list[OpenEpisode | None] = [None] * env.num_envs
        self.autoreset = AutoresetMode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        self.resetting = np.zeros(env.num_envs, bool)  # NEXT_STEP: the next step resets these
        self.fps = _video_fps(env)
        self._start_closing()

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> Any:
        self._refuse_closed()
        count = self.env.num_envs
        mask = (options or {}).get("reset_mask")
        which = range(count) if mask is None else np.flatnonzero(mask).tolist()
        seeds = [seed + i for i in range(count)] if isinstance(seed, int) else seed
        staged = {k: v for k, v in (options or {}).items() if k != "reset_mask"} or None
        task = self.run.statics[keys.TASK]
        scenes = {
            i: scene_of(task, self.scene, None if seeds is None else seeds[i], staged)
            for i in which
        }
        for i in which:
            self._end(i, LOOP_RESET, None)
            self._open(i, scenes[i])
        obs, info = self.env.reset(seed=seed, options=options)
        self.resetting[list(which)] = False
        frames = self._frames()
        for i in which:
            self.episodes[i].observed(_sub(obs, i), frames[i])  # type: ignore[union-attr]
        return obs, info

    def step(self, actions: Any) -> Any:
        for i in np.flatnonzero(self.resetting).tolist():
            self._open(i, self._autoreset_scene())
        for i, episode in enumerate(self.episodes):
            if episode is not None and not self.resetting[i]:
                episode.stepping()
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        frames = self._frames()
        for i, action in enumerate(iterate(self.env.action_space, actions)):
            episode = self.episodes[i]
            if episode is None:
                continue
            if self.resetting[i]:  # this step reset the sub-env: its new episode's first obs
                self.resetting[i] = False
                episode.observed(_sub(obs, i), frames[i])
                continue
            done = bool(terminated[i] or truncated[i])
            final = self.autoreset is AutoresetMode.SAME_STEP and done
            if self.success is None:
                solved = _success_at(infos, i, final)
            else:  # the rule sees the sub-env's step: its final obs and info under SAME_STEP
                seen_obs = infos["final_obs"][i] if final else _sub(obs, i)
                seen_info = _info_at(infos.get("final_info") or {} if final else infos, i)
                solved = _judged(self.success, seen_obs, rewards[i], seen_info)
            episode.stepped(action, rewards[i], solved)
            if not done:
                episode.observed(_sub(obs, i), frames[i])
                continue
            self._end(i, ENV_ENDED, None)
            if self.autoreset is AutoresetMode.NEXT_STEP:
                self.resetting[i] = True
            elif self.autoreset is AutoresetMode.SAME_STEP:  # obs is the next episode's already
                self._open(i, self._autoreset_scene()).observed(_sub(obs, i), frames[i])
        return obs, rewards, terminated, truncated, infos

    def _open(self, i: int, scene: Mapping[str, Any] | None) -> OpenEpisode:
        self.episodes[i] = self.run.open(scene, self.fps)
        return self.episodes[i]

    def _autoreset_scene(self) -> dict[str, Any] | None:
        """The scene of an episode the vector env started on its own: of no seed."""
        return scene_of(self.run.statics[keys.TASK], self.scene, None, None)

    def _end(self, i: int, how: str, error: str | None) -> None:
        episode, self.episodes[i] = self.episodes[i], None
        if episode is not None:
            episode.end(how, error)

    def _end_open(self, how: str, error: str | None) -> None:
        for i in range(len(self.episodes)):
            self._end(i, how, error)

    def _frames(self) -> Sequence[np.ndarray | None]:
        return [None] * self.env.num_envs if self.fps is None else self.env.render()


def scene_of(
    task: str,
    declared: Mapping[str, Any] | None,
    seed: int | None,
    options: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """An episode's scene, as a planned rollout's reads (task, seed, reset options) where the
    loop reset its env with a seed, with the fields the caller declared; None if neither."""
    staged = {} if seed is None else {keys.TASK: task, keys.SEED: seed, **(options or {})}
    if declared is None and not staged:
        return None
    return {
        name: _json_value(name, value) for name, value in {**staged, **dict(declared or {})}.items()
    }


def _json_value(name: str, value: Any, where: str = "the scene field") -> Any:
    """A value as records keep it (JSON): numpy arrays and scalars become lists and numbers (a
    reset option such as gym-pusht's `reset_to_state` array), paths their text."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(key): _json_value(f"{name}.{key}", item, where) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(name, item, where) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(
        f"policybench.wrap: {where} {name!r} is a {type(value).__name__}, {value!r}; records "
        "hold JSON values, numpy arrays and paths: give it as one of those"
    )


def _declared_hz(env: gym.Env | VectorEnv) -> float | None:
    """The rate the env says it steps at (gymnasium's `render_fps`: gym-pusht's 10, MetaWorld's
    80, their Evals' control_hz), the clock of its episodes' traces and videos; None if unsaid."""
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    return float(fps) if fps else None


def _video_fps(env: gym.Env | VectorEnv) -> float | None:
    """The frame rate a video of the env is written at; None when it does not render frames."""
    if getattr(env, "render_mode", None) != "rgb_array":
        return None
    return _declared_hz(env) or 30.0


def _sub(obs: Any, i: int) -> Any:
    """Sub-env `i`'s part of a vector env's observation."""
    if isinstance(obs, Mapping):
        return {name: _sub(value, i) for name, value in obs.items()}
    return obs[i]


def _info_at(infos: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Sub-env `i`'s part of a vector env's step info (the keys its `_key` mask sets)."""
    return {
        key: _sub(value, i)
        for key, value in infos.items()
        if not key.startswith("_") and infos.get(f"_{key}", np.ones(i + 1, bool))[i]
    }


def _success_at(infos: Mapping[str, Any], i: int, final: bool) -> bool | None:
    """What a vector env's step info says of sub-env `i`'s success (on its final step under
    SAME_STEP autoreset, the final info); None when it says nothing."""
    if final:
        infos = infos.get("final_info") or {}
    for key in SUCCESS_INFO_KEYS:
        if key in infos and infos.get(f"_{key}", np.ones(i + 1, bool))[i]:
            return bool(infos[key][i])
    return None
