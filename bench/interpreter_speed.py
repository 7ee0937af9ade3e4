"""Suites in interpreters of their own (ManiSkill3, Kinetix) through policybench against their own
plain loop in that interpreter, with the same actions: a seeded uniform action sequence from each
Eval's first scene, played through the harness (World behind the env server, ChunkPlayer, trace),
and, for the state-only ManiSkill Evals, K rollouts side by side as `--envs-per-worker K` runs
them (the K envs in one server, their steps K to a frame); and through a plain loop in the suite's
interpreter (the env made, `reset(seed)`, `step(a)` until the actions run out or the episode
ends: no server, no harness), of one env and, beside the side-by-side mode, of K envs stepped in
turn in one process (K scenes alive cost each step some cache whoever steps them).

    python bench/interpreter_speed.py [--rounds 5] [--evals maniskill-pick-cube,kinetix]

Every mode runs its env built and warm (Kinetix compiles its step on the first call); the modes
take turns, a round each, `rounds` times (this machine's speed drifts), timed by the wall clock
(the env steps in another process). Prints a markdown table of each mode's best round in steps/s,
its ratio to the one-env plain loop (the median of the rounds' ratios; targets: 0.95 for one env,
0.90 at K = 8 side by side) and, for K side by side, to the plain loop of K envs, and the
command that made it. Needs `policybench env install maniskill` and `... kinetix`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
from functools import partial
from pathlib import Path

import numpy as np

# bench/'s own: a fixed action sequence as one chunk, and modes timed in rounds taken in turn
from robotics_speed import Played, best, in_rounds, ratio, timed

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
# The plain loop, in the suite's interpreter: `envs` envs made and warm, then a round (each env
# reset with its seed, the actions stepped in turn until they run out or its episode ends) for
# each line read, answered with the round's steps and seconds.
PLAIN = """
import json, sys, time
import numpy as np
sys.path.insert(0, {folder!r})
from {module} import make
envs = [make({task!r}, **{kwargs!r}) for _ in range({envs})]
actions = np.load({actions!r})
for env in envs:
    env.reset(seed={seed})
    env.step(actions[0])  # warm: Kinetix compiles its step here
print("ready", flush=True)
for _ in sys.stdin:
    started, steps = time.perf_counter(), 0
    for number, env in enumerate(envs):
        env.reset(seed={seed} + number)
    live = list(envs)
    for action in actions:
        for env in list(live):
            steps += 1
            if env.step(action)[2]:
                live.remove(env)
        if not live:
            break
    print(json.dumps([steps, time.perf_counter() - started]), flush=True)
"""


class Plain:
    """The plain loop of `envs` envs of the Eval's task, in the Eval's interpreter."""

    def __init__(self, eval: Eval, task: str, actions_file: Path, seed: int, envs: int) -> None:
        isolated = eval.make_env
        module_path = isolated.modules[0]
        package = __import__(module_path.rpartition(".")[0], fromlist=["_"])
        script = PLAIN.format(
            folder=str(Path(package.__file__).parent),
            module=module_path.rpartition(".")[2],
            task=task,
            kwargs=dict(isolated.kwargs),
            envs=envs,
            actions=str(actions_file),
            seed=seed,
        )
        python = python_of(isolated.interpreter)
        self.process = subprocess.Popen(
            [str(python), "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        while self.process.stdout.readline().strip() != "ready":
            if self.process.poll() is not None:
                raise RuntimeError(f"the plain loop of {eval.name} ended before it was ready")

    def round(self) -> tuple[int, float]:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        steps, seconds = json.loads(self.process.stdout.readline())
        return steps, seconds

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def one_rollout(rollout: Rollout, world: World, play: ChunkPolicy) -> int:
    return run_rollout(rollout, world, play).steps


def side_by_side(lockstep: Lockstep, group: list[Rollout], play: ChunkPolicy) -> int:
    return sum(episode.steps for episode in lockstep.run(group, play))


def modes_of(name: str, actions_file: Path) -> tuple[dict, list]:
    """The Eval's modes, each a callable running one round, and what to close after."""
    eval, task, length, measured_side_by_side = CASES[name]
    eval = dataclasses.replace(eval, stop_on_success=False)  # every step, as the plain loop
    [rollout] = [r for r in eval.rollouts(1, 0) if r.scene.task == task]
    rollout = dataclasses.replace(rollout, timeout_s=length / eval.control_hz)
    world = World(eval)
    world.reset(rollout.scene)
    space = world.action_space
    actions = np.random.default_rng(0).uniform(space.low, space.high, (length, *space.shape))
    np.save(actions_file, actions.astype(np.float32))
    play = ChunkPolicy(Played(actions))
    plain = Plain(eval, task, actions_file, rollout.scene.seed, 1)
    modes = {
        "plain loop": plain.round,
        "policybench, isolated": partial(timed, partial(one_rollout, rollout, world, play)),
    }
    closing = [plain, world]
    if measured_side_by_side:
        plain_k = Plain(eval, task, actions_file, rollout.scene.seed, SIDE_BY_SIDE)
        lockstep = Lockstep(eval, SIDE_BY_SIDE)
        group = [
            dataclasses.replace(r, timeout_s=rollout.timeout_s)
            for r in eval.rollouts(SIDE_BY_SIDE, 0)
            if r.scene.task == task
        ]
        modes[f"plain loop, K={SIDE_BY_SIDE} envs in turn"] = plain_k.round
        modes[f"policybench, isolated, K={SIDE_BY_SIDE} side by side"] = partial(
            timed, partial(side_by_side, lockstep, group, play)
        )
        closing += [plain_k, lockstep]
    return modes, closing


def measure(name: str, rounds: int) -> dict[str, list[tuple[int, float]]]:
    """Each mode's steps and seconds in each round on the Eval `name`, the modes taking turns."""
    modes, closing = modes_of(name, Path(f"/tmp/interpreter-speed-{name}.npy"))
    timed_rounds = in_rounds(modes, rounds)
    for thing in closing:
        thing.close()
    return timed_rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--evals", default=",".join(CASES))
    args = parser.parse_args()
    print(f"$ python bench/interpreter_speed.py --rounds={args.rounds} --evals={args.evals}")
    print()
    print("| Eval | mode | steps | best s | steps/s | vs plain | vs plain, K envs | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in args.evals.split(","):
        timed_rounds = measure(name, args.rounds)
        plain_k = timed_rounds.get(f"plain loop, K={SIDE_BY_SIDE} envs in turn")
        for mode, each in timed_rounds.items():
            steps, seconds = best(each)
            target, versus_k = "", ""
            if mode.startswith("policybench"):
                target = f">= {TARGET}"
            if "side by side" in mode:
                target, versus_k = f">= {TARGET_SIDE_BY_SIDE}", f"{ratio(each, plain_k):.3f}"
            print(
                f"| {name} | {mode} | {steps} | {seconds:.3f} | {steps / seconds:.1f} | "
                f"{ratio(each, timed_rounds['plain loop']):.3f} | {versus_k} | {target} |"
            )


if __name__ == "__main__":
    main()
