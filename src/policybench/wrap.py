"""`policybench.wrap(env)`: records each episode of a loop policybench does not drive into a run
directory, as results.jsonl records built by the one record builder (single env; first cut)."""

from __future__ import annotations

import atexit
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.pytest_plugin.outcomes import rollout_record
from policybench.record.episode import Episode, Outcome, OutcomeKind, TraceStep
from policybench.report.cli import rebuild_report
from policybench.report.results import ResultsWriter, new_run_dir
from policybench.world import success_of

UNDECLARED = {"undeclared": True}  # the scene of a rollout whose scene the user did not declare
OPEN = ".episode-in-progress"  # marker of an episode that has not ended (a loop may die in it)


class Recorder(gym.Wrapper):
    """Records every episode the user's loop runs: its actions, rewards, success signal and the
    loop's own wall time; each ended episode is appended and flushed as it ends."""

    def __init__(self, env: gym.Env, statics: Mapping[str, Any], run_dir: Path) -> None:
        super().__init__(env)
        self.statics, self.run_dir = dict(statics), run_dir
        self.writer = ResultsWriter(run_dir)
        self.index, self.trace, self.success_step = 0, [], None
        self.reported, self.started = False, None
        atexit.register(self.close)

    def reset(self, **kwargs: Any) -> Any:
        self._end("the loop reset mid-episode")
        self.trace, self.success_step, self.reported = [], None, False
        self.started = time.perf_counter()
        (self.run_dir / OPEN).write_text(str(self.index))
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        success = success_of(info)
        self.reported = self.reported or success is not None
        self.trace.append(TraceStep(0, np.asarray(action), float(reward), bool(success)))
        if success and self.success_step is None:
            self.success_step = len(self.trace)
        if terminated or truncated:
            self._end(None)
        return obs, reward, terminated, truncated, info

    def _end(self, cut: str | None) -> None:
        if self.started is None:
            return
        steps = len(self.trace)
        if self.success_step is not None:
            outcome = Outcome(OutcomeKind.SOLVED, f"success at step {self.success_step}")
        elif cut is not None:
            outcome = Outcome(OutcomeKind.ERROR, f"{cut} (after {steps} steps)")
        else:
            outcome = Outcome(OutcomeKind.UNSOLVED, f"env ended the episode after {steps} steps")
        episode = Episode(
            statics={**self.statics, keys.ROLLOUT_INDEX: self.index},
            trace=tuple(self.trace),
            outcome=outcome,
            sim_s=0.0,
            wall_s=time.perf_counter() - self.started,
            success_step=self.success_step,
            success_reported=self.reported,
        )
        self.writer.write(rollout_record({}, episode, {}))
        (self.run_dir / OPEN).unlink(missing_ok=True)
        self.index, self.started = self.index + 1, None

    def close(self) -> None:
        self._end("the loop ended mid-episode")
        self.writer.close()
        atexit.unregister(self.close)
        super().close()
        if self.writer.path.is_file():  # summary.json and index.html, as `report html` writes
            rebuild_report(self.run_dir)


def wrap(
    env: gym.Env,
    eval: str,
    task: str,
    scene: Mapping[str, Any] | None = None,
    instruction: str | None = None,
    policy: Mapping[str, Any] | None = None,
    arm: str | None = None,
    run_dir: Path | None = None,
) -> Recorder:
    """Wraps `env` so each episode the caller runs is recorded under `run_dir` (a new run
    directory under reports/ when None); the scene is recorded as undeclared when not given."""
    statics = {
        keys.EVAL: eval,
        keys.TASK: task,
        keys.SCENE: dict(scene) if scene is not None else dict(UNDECLARED),
        keys.INSTRUCTION: instruction,
        keys.POLICY: dict(policy) if policy is not None else None,
        keys.ARM: arm,
    }
    directory = Path(run_dir) if run_dir is not None else new_run_dir(Path("reports"))
    directory.mkdir(parents=True, exist_ok=True)
    return Recorder(env, statics, directory)
