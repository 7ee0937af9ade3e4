"""gymnasium-robotics through policybench against its own plain loop, in this interpreter with the
same actions: the kitchen (microwave) and each Adroit task, a seeded uniform action sequence
played for the episode's full length, through the harness (World, ChunkPlayer, trace) and
through `gym.make(id)`, `reset(seed)`, `step(a)`; and the kitchen behind an env server in
another interpreter: one rollout (one round trip a step), and K=8 rollouts side by side as
`--envs-per-worker 8` runs them (the 8 envs in one server, their steps 8 to a frame), beside a
plain loop of 8 envs stepped in turn in one process.

    python bench/robotics_speed.py [--repeats 3]

Each (task, mode) runs `repeats` rounds in one process, the env built once (as a run's worker
keeps it) and the modes taking turns a round at a time; the in-process modes are timed by this
thread's CPU time (time.thread_time), the isolated ones by the wall clock, beside the plain
loop's (its env steps in the other process). Prints a markdown table of each mode's best round
in steps/s, its ratio to the plain loop (the median of the rounds' ratios; targets: 0.95 in
process, 0.90 isolated side by side at K=8) and the command that made it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from policybench.envserver import Interpreter, Isolated
from policybench.harness import run_rollout
from policybench.lockstep import Lockstep
from policybench.policy.base import Chunk, SessionContext
from policybench.policy.chunk_player import ChunkPolicy
from policybench.suites import gymnasium_robotics as robotics
from policybench.world import World

TARGET = 0.95
TARGET_SIDE_BY_SIDE = 0.90
SIDE_BY_SIDE = 8  # the K of --envs-per-worker K
SEED = 0


@dataclasses.dataclass(frozen=True)
class Played:
    """A model that answers once with the whole action sequence (the harness plays it)."""

    actions: np.ndarray
    name: str = "played"

    def open(self, context: SessionContext) -> Any:
        return lambda obs: Chunk(self.actions, context.control_hz)

    def describe(self) -> dict[str, Any]:
        return {"policy_name": self.name}


def plain(env: gym.Env, actions: np.ndarray) -> int:
    """The reference loop on a built env: reset(seed), then every action."""
    env.reset(seed=SEED)
    for action in actions:
        env.step(action)
    return len(actions)


def plain_in_turn(envs: list[gym.Env], actions: np.ndarray) -> int:
    """The reference loop over K envs stepped in turn in one process (K scenes alive cost each
    step some cache, whoever steps them): each reset(seed), then each action to every env."""
    for number, env in enumerate(envs):
        env.reset(seed=SEED + number)
    for action in actions:
        for env in envs:
            env.step(action)
    return len(actions) * len(envs)


def plain_env(env_id: str, **kwargs: Any) -> gym.Env:
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    return gym.make(env_id, disable_env_checker=True, **kwargs)


def harnessed(world: World, task: str, actions: np.ndarray) -> int:
    """One rollout through the harness on `world` (its env built at its first reset, kept)."""
    [rollout] = [r for r in world.eval.rollouts(1, SEED) if r.scene.task == task]
    return run_rollout(rollout, world, ChunkPolicy(Played(actions))).steps


def side_by_side(lockstep: Lockstep, task: str, actions: np.ndarray) -> int:
    """K rollouts of `task` through the harness, side by side on `lockstep`'s K slots."""
    rollouts = [r for r in lockstep.eval.rollouts(lockstep.slots, SEED) if r.scene.task == task]
    episodes = lockstep.run(rollouts, ChunkPolicy(Played(actions)))
    return sum(episode.steps for episode in episodes)


def cases() -> dict[str, tuple[Any, str, str, dict[str, Any], int]]:
    kitchen = ("FrankaKitchen-v1", {"tasks_to_complete": ["microwave"]})
    found = {"kitchen microwave": (robotics.KITCHEN, "microwave", *kitchen, 280)}
    for task, env_id in robotics.ADROIT_IDS.items():
        found[f"adroit {task}"] = (robotics.adroit(task), task, env_id, {}, 200)
    return found


def timed(
    run: Callable[[], int], clock: Callable[[], float] = time.perf_counter
) -> tuple[int, float]:
    """The steps `run` took and the seconds it took by `clock`."""
    started = clock()
    steps = run()
    return steps, clock() - started


def in_rounds(
    modes: dict[str, Callable[[], tuple[int, float]]], rounds: int
) -> dict[str, list[tuple[int, float]]]:
    """Each mode's steps and seconds in each of `rounds` rounds, every mode run once first (its
    env built and warm) and the modes taking turns in each round (a machine busy for a while
    slows every mode alike)."""
    for run in modes.values():
        run()
    timed_rounds: dict[str, list[tuple[int, float]]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode, run in modes.items():
            timed_rounds[mode].append(run())
    return timed_rounds


def ratio(of: list[tuple[int, float]], to: list[tuple[int, float]]) -> float:
    """The median over rounds of one mode's steps/s over another's in the same round (a round's
    modes run back to back, so a machine slowed for a while slows both alike)."""
    return float(np.median([(a / s) / (b / t) for (a, s), (b, t) in zip(of, to, strict=True)]))


def best(each: list[tuple[int, float]]) -> tuple[int, float]:
    """The fastest round's steps and seconds."""
    return min(each, key=lambda round: round[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(f"$ python bench/robotics_speed.py --repeats={args.repeats}")
    print()
    print("| task | mode | steps | best s | steps/s | vs plain | vs plain, K envs | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, (eval, task, env_id, kwargs, steps) in cases().items():
        space = eval.make_env(task).action_space
        rng = np.random.default_rng(SEED)
        actions = rng.uniform(space.low, space.high, (steps, *space.shape)).astype(space.dtype)
        eval = dataclasses.replace(eval, stop_on_success=False)  # every step, as the plain loop
        worlds = [World(eval)]
        closing: list[Any] = []
        cpu = partial(timed, clock=time.thread_time)  # in process: this thread's CPU time
        plain_run = partial(plain, plain_env(env_id, **kwargs), actions)
        modes = {
            "plain loop": partial(cpu, plain_run),
            "policybench": partial(cpu, partial(harnessed, worlds[0], task, actions)),
        }
        if name.startswith("kitchen"):
            isolated = Isolated(
                "policybench.suites.gymnasium_robotics:make_kitchen",
                Interpreter("bench", python=sys.executable),
                renders=False,
            )
            worlds.append(World(dataclasses.replace(eval, make_env=isolated)))
            modes["plain loop, wall"] = partial(timed, plain_run)
            modes["policybench, isolated, wall"] = partial(
                timed, partial(harnessed, worlds[1], task, actions)
            )
            lockstep = Lockstep(worlds[1].eval, SIDE_BY_SIDE)
            closing.append(lockstep)
            in_turn = [plain_env(env_id, **kwargs) for _ in range(SIDE_BY_SIDE)]
            closing.extend(in_turn)
            modes[f"plain loop, K={SIDE_BY_SIDE} envs in turn, wall"] = partial(
                timed, partial(plain_in_turn, in_turn, actions)
            )
            modes[f"policybench, isolated, K={SIDE_BY_SIDE} side by side, wall"] = partial(
                timed, partial(side_by_side, lockstep, task, actions)
            )
        timed_rounds = in_rounds(modes, args.repeats)
        for mode, each in timed_rounds.items():
            done, seconds = best(each)
            plain_rounds = timed_rounds["plain loop" if "wall" not in mode else "plain loop, wall"]
            target, versus_k = {"policybench": f">= {TARGET}"}.get(mode, ""), ""
            if "side by side" in mode:
                target = f">= {TARGET_SIDE_BY_SIDE}"
                in_turn_rounds = timed_rounds[f"plain loop, K={SIDE_BY_SIDE} envs in turn, wall"]
                versus_k = f"{ratio(each, in_turn_rounds):.3f}"
            print(
                f"| {name} | {mode} | {done} | {seconds:.3f} | {done / seconds:.0f} | "
                f"{ratio(each, plain_rounds):.3f} | {versus_k} | {target} |"
            )
        for world in [*worlds, *closing]:
            world.close()


if __name__ == "__main__":
    main()
