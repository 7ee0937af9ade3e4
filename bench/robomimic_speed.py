"""robomimic through policybench against its own plain loop in its interpreter, with the same
actions: for each Eval given, a seeded uniform action sequence played from the runner's first
test episode, through the harness (World behind the env server, ChunkPlayer, trace) and through
a plain loop in robomimic's interpreter (the env made, `reset(seed)`, `step(a)` in a loop: no
server, no harness).

    python bench/robomimic_speed.py [--rounds 3] [--steps 40] [--evals robomimic-lift,...]

Each round runs both, the plain loop first, each with its env already built (the time counted is
an episode's reset and steps, wall clock: the env steps in another process). The best round of
each is kept; prints a markdown table of steps/s, the ratio to the plain loop (target 0.95) and
the command that made it. Needs `policybench env install robomimic`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import time
from pathlib import Path

import numpy as np
from robotics_speed import Played  # bench/'s own: a fixed action sequence as one chunk

from policybench.envserver.interpreters import python_of
from policybench.harness import run_rollout
from policybench.policy.chunk_player import ChunkPolicy
from policybench.spec import Eval
from policybench.suites import robomimic
from policybench.world import World

TARGET = 0.95
HERE = Path(robomimic.__file__).parent
PLAIN = """
import json, sys, time
import numpy as np
sys.path.insert(0, {folder!r})
import robomimic_env
env = robomimic_env.make({task!r})
actions = np.load({actions!r})
env.reset(seed={seed})
started = time.perf_counter()
env.reset(seed={seed})
for action in actions:
    env.step(action)
print(json.dumps(time.perf_counter() - started))
"""


def plain(eval: Eval, actions_file: Path, seed: int) -> float:
    """Seconds the plain loop took to reset and play the actions, in robomimic's interpreter."""
    task = eval.rollouts(1, 0)[0].scene.task
    script = PLAIN.format(folder=str(HERE), task=task, actions=str(actions_file), seed=seed)
    python = python_of(robomimic.INTERPRETER)
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def harnessed(world: World, eval: Eval, actions: np.ndarray) -> float:
    """Seconds the harness took for one rollout playing the actions (its env built and its
    scene staged once before, as a worker keeps them; the rollout's own reset is counted)."""
    [rollout] = eval.rollouts(1, 0)
    rollout = dataclasses.replace(rollout, timeout_s=len(actions) / eval.control_hz)
    started = time.perf_counter()
    episode = run_rollout(rollout, world, ChunkPolicy(Played(actions)))
    assert episode.steps == len(actions), episode.outcome
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--evals", default="robomimic-lift,robomimic-transport")
    args = parser.parse_args()
    print(
        f"$ python bench/robomimic_speed.py --rounds={args.rounds} --steps={args.steps} "
        f"--evals={args.evals}"
    )
    print()
    print("| Eval | steps | plain loop steps/s | policybench steps/s | ratio | target |")
    print("|---|---:|---:|---:|---:|---:|")
    evals = {
        e.name: e
        for e in (
            robomimic.LIFT,
            robomimic.CAN,
            robomimic.SQUARE,
            robomimic.TRANSPORT,
            robomimic.TOOL_HANG,
        )
    }
    for name in args.evals.split(","):
        eval = dataclasses.replace(evals[name], stop_on_success=False)
        world = World(eval)
        try:
            [rollout] = eval.rollouts(1, 0)
            world.reset(rollout.scene)  # the env built
            space = world.action_space
            rng = np.random.default_rng(0)
            actions = rng.uniform(space.low, space.high, (args.steps, *space.shape))
            actions_file = Path(f"/tmp/robomimic-speed-{name}.npy")
            np.save(actions_file, actions)
            plains, ours = [], []
            for _ in range(args.rounds):
                plains.append(plain(eval, actions_file, rollout.scene.seed))
                ours.append(harnessed(world, eval, actions))
        finally:
            world.close()
        rate_plain, rate_ours = args.steps / min(plains), args.steps / min(ours)
        print(
            f"| {name} | {args.steps} | {rate_plain:.2f} | {rate_ours:.2f} | "
            f"{rate_ours / rate_plain:.3f} | >= {TARGET} |"
        )


if __name__ == "__main__":
    main()
