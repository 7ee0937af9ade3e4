"""Suites in interpreters of their own (ManiSkill3, Kinetix) through policybench against their own
plain loop in that interpreter, with the same actions: a seeded uniform action sequence from each
Eval's first scene, played through the harness (World behind the env server, ChunkPlayer, trace),
and, for the state-only ManiSkill Evals, K rollouts side by side as `--envs-per-worker K` runs
them (the K envs in one server, their steps K to a frame); and through a plain loop in the suite's
interpreter (the env made, `reset(seed)`, `step(a)` until the actions run out or the episode
ends: no server, no harness).

    python bench/interpreter_speed.py [--rounds 3] [--evals maniskill-pick-cube,kinetix]

Every mode runs its env built and warm (Kinetix compiles its step on the first call); the best
of `rounds` wall times is kept (the env steps in another process). Prints a markdown table of
steps/s, the ratio to the plain loop (targets: 0.95 for one env, 0.90 at K = 8 side by side) and
the command that made it. Needs `policybench env install maniskill` and `... kinetix`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import time
from functools import partial
from pathlib import Path

import numpy as np
from robotics_speed import Played  # bench/'s own: a fixed action sequence as one chunk

from policybench.envserver.interpreters import python_of
from policybench.harness import run_rollout
from policybench.lockstep import Lockstep
from policybench.policy.chunk_player import ChunkPolicy
from policybench.spec import Eval, Rollout
from policybench.suites import kinetix, maniskill
from policybench.world import World

TARGET, TARGET_SIDE_BY_SIDE, SIDE_BY_SIDE = 0.95, 0.90, 8
# Eval -> (its task here, steps played, whether K side by side is measured)
CASES = {
    "maniskill-pick-cube": (maniskill.PICK_CUBE, "pick_cube", 100, True),
    "maniskill-stack-cube": (maniskill.STACK_CUBE, "stack_cube", 200, True),
    "kinetix": (kinetix.KINETIX, "grasp_easy", 256, False),
}
PLAIN = """
import json, sys, time
import numpy as np
sys.path.insert(0, {folder!r})
from {module} import make
env = make({task!r}, **{kwargs!r})
actions = np.load({actions!r})
env.reset(seed={seed})
env.step(actions[0])  # warm: Kinetix compiles its step here
best, steps = float("inf"), 0
for _ in range({rounds}):
    started = time.perf_counter()
    env.reset(seed={seed})
    for steps, action in enumerate(actions, 1):
        if env.step(action)[2]:
            break
    best = min(best, time.perf_counter() - started)
print(json.dumps([steps, best]))
"""


def plain(eval: Eval, task: str, actions_file: Path, seed: int, rounds: int) -> tuple[int, float]:
    """Steps and best seconds of the plain loop in the Eval's interpreter."""
    isolated = eval.make_env
    module_path = isolated.modules[0]
    module = module_path.rpartition(".")[2]
    package = __import__(module_path.rpartition(".")[0], fromlist=["_"])
    script = PLAIN.format(
        folder=str(Path(package.__file__).parent),
        module=module,
        task=task,
        kwargs=dict(isolated.kwargs),
        actions=str(actions_file),
        seed=seed,
        rounds=rounds,
    )
    python = python_of(isolated.interpreter)
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True)
    steps, seconds = json.loads(done.stdout.strip().splitlines()[-1])
    return steps, seconds


def best_of(rounds: int, run) -> tuple[int, float]:
    run()  # warm
    times, steps = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        steps = run()
        times.append(time.perf_counter() - started)
    return steps, min(times)


def one_rollout(rollout: Rollout, world: World, play: ChunkPolicy) -> int:
    return run_rollout(rollout, world, play).steps


def side_by_side(lockstep: Lockstep, group: list[Rollout], play: ChunkPolicy) -> int:
    return sum(episode.steps for episode in lockstep.run(group, play))


def measure(name: str, rounds: int) -> dict[str, tuple[int, float]]:
    """Each mode's steps and best seconds on the Eval `name`."""
    eval, task, length, measured_side_by_side = CASES[name]
    eval = dataclasses.replace(eval, stop_on_success=False)  # every step, as the plain loop
    [rollout] = [r for r in eval.rollouts(1, 0) if r.scene.task == task]
    rollout = dataclasses.replace(rollout, timeout_s=length / eval.control_hz)
    world = World(eval)
    world.reset(rollout.scene)
    space = world.action_space
    actions = np.random.default_rng(0).uniform(space.low, space.high, (length, *space.shape))
    actions_file = Path(f"/tmp/interpreter-speed-{name}.npy")
    np.save(actions_file, actions.astype(np.float32))
    modes = {"plain loop": plain(eval, task, actions_file, rollout.scene.seed, rounds)}
    play = ChunkPolicy(Played(actions))
    modes["policybench, isolated"] = best_of(rounds, partial(one_rollout, rollout, world, play))
    world.close()
    if measured_side_by_side:
        lockstep = Lockstep(eval, SIDE_BY_SIDE)
        group = [
            dataclasses.replace(r, timeout_s=rollout.timeout_s)
            for r in eval.rollouts(SIDE_BY_SIDE, 0)
            if r.scene.task == task
        ]
        modes[f"policybench, isolated, K={SIDE_BY_SIDE} side by side"] = best_of(
            rounds, partial(side_by_side, lockstep, group, play)
        )
        lockstep.close()
    return modes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--evals", default=",".join(CASES))
    args = parser.parse_args()
    print(f"$ python bench/interpreter_speed.py --rounds={args.rounds} --evals={args.evals}")
    print()
    print("| Eval | mode | steps | best s | steps/s | vs plain | target |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in args.evals.split(","):
        modes = measure(name, args.rounds)
        plain_rate = modes["plain loop"][0] / modes["plain loop"][1]
        for mode, (steps, seconds) in modes.items():
            rate = steps / seconds
            target = "" if mode == "plain loop" else f">= {TARGET}"
            target = f">= {TARGET_SIDE_BY_SIDE}" if "side by side" in mode else target
            print(
                f"| {name} | {mode} | {steps} | {seconds:.3f} | {rate:.1f} | "
                f"{rate / plain_rate:.3f} | {target} |"
            )


if __name__ == "__main__":
    main()
