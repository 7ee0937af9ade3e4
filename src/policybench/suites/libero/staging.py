"""How a LIBERO rollout's scene is staged as openpi's example or lerobot-eval stages its episode:
the seed and init state a rollout gets, and the reset history its env must reproduce."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from policybench.spec import Scene
from policybench.suites.libero.sim_env import INIT_STATE, ResetPlan


class Staging(Protocol):
    """A staging rule: the scene of rollout `index` of a task, how the env stages a scene, and
    the rule as `eval_settings` record it."""

    def scene(self, task: str, index: int, base_seed: int) -> Scene: ...

    def plan(self, scene_seed: int, init_state: int) -> ResetPlan: ...

    def settings(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class OpenpiStaging:
    """openpi's examples/libero/main.py: one env per task, seeded once (`seed`, 7) right after it
    is built, then episode i is that env's reset number i + 1 followed by init state i.

    Rollout i replays the draws of the first i resets, then resets for real: the env shows what
    openpi's episode i shows whatever ran before it in the process. `--seed` is added to openpi's
    seed, so the default `--seed 0` stages the scenes of openpi's published runs.
    """

    seed: int = 7

    def scene(self, task: str, index: int, base_seed: int) -> Scene:
        return Scene(task, self.seed + base_seed, {INIT_STATE: index})

    def plan(self, scene_seed: int, init_state: int) -> ResetPlan:
        return ResetPlan(scene_seed, init_state, replayed=init_state, builds=1)

    def settings(self) -> dict[str, Any]:
        return {
            "staging": "openpi",
            "staging_seed": self.seed,
            "staging_rule": (
                "rollout i of a task is openpi's episode i: the task's env is built, numpy's "
                f"global RNG seeded once with the scene's seed ({self.seed} + --seed), the env "
                "reset i + 1 times (the first i replayed, not run), set to init state i, settled"
            ),
        }


@dataclass(frozen=True)
class LeRobotStaging:
    """lerobot-eval 0.6.1 with LeRobot's LiberoEnv: episode e of a task runs in sub-env
    e % `batch_size` of a vector env, in batch e // `batch_size`; the sub-env was built and reset
    once unseeded, then each batch seeds it (start seed + e) just before its reset, and it takes
    init states e, e + batch_size, ... in turn. `--seed` is added to lerobot-eval's default
    start seed, 1000.

    LeRobot 0.6.1's env no longer resets itself at a success (PR 4273) and lerobot-eval freezes
    a finished sub-env (PR 4247), so episode e is init state e in every run. LeRobot 0.4.4 staged
    the same episode only where no earlier episode of its sub-env succeeded (its env then reset
    once more, moving that sub-env to a later init state): always with a batch of 50 and at most
    50 episodes. lerobot-eval 0.6.1's default batch size is floor(0.7 x the host's cores), at
    most the episodes and 64, so for a task whose reset draws joint samplers (the number of
    earlier batches matters) its scenes depend on the host unless `--eval.batch_size` is given:
    this staging is `--eval.batch_size 50`'s.
    """

    seed: int = 1000
    batch_size: int = 50  # lerobot-eval's --eval.batch_size

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"lerobot-eval's batch size must be >= 1, got {self.batch_size}")

    def scene(self, task: str, index: int, base_seed: int) -> Scene:
        return Scene(task, self.seed + base_seed + index, {INIT_STATE: index})

    def plan(self, scene_seed: int, init_state: int) -> ResetPlan:
        # Built at construction, reset once unseeded, then once per earlier batch.
        return ResetPlan(scene_seed, init_state, builds=2 + init_state // self.batch_size)

    def settings(self) -> dict[str, Any]:
        return {
            "staging": "lerobot",
            "lerobot_version": "0.6.1",
            "staging_seed": self.seed,
            "lerobot_batch_size": self.batch_size,
            "staging_rule": (
                "rollout i of a task is lerobot-eval's episode i: sub-env i % batch size, "
                "built and reset once unseeded, reset once more per earlier batch; numpy's "
                f"global RNG seeded with the scene's seed ({self.seed} + --seed + i) right before "
                "its reset, init state i, settled"
            ),
        }


OPENPI_STAGING = OpenpiStaging()
LEROBOT_STAGING = LeRobotStaging()
