"""A LIBERO worker's memory: one process runs K rollouts of each of several tasks, one live env at a
time (`--max-envs-per-worker 1`, the default), a few steps each, and prints its RSS and peak RSS
after each rollout. Rollout 0 of a task builds its env; later ones replay resets and reset for
real, as a worker that meets a task's rollouts in turn does.

Run from the repository root with LIBERO installed (`tox -e test` builds such an env):

    MUJOCO_GL=egl python bench/libero_memory.py [--eval libero_90] [--tasks 10,11,12]
                                                [--rollouts 3] [--steps 10]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time


def rss_mb() -> int:
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024


def peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", default="libero_90")
    parser.add_argument("--tasks", default="10,11,12", help="task indices, comma-separated")
    parser.add_argument("--rollouts", type=int, default=3, help="rollouts per task")
    parser.add_argument("--steps", type=int, default=10, help="zero actions per rollout")
    args = parser.parse_args()

    from policybench.suites import eval_named
    from policybench.world import EnvCache, World

    eval = eval_named(args.eval)
    world = World(eval, EnvCache(1))
    planned = eval.rollouts(args.rollouts, 0)
    started = time.perf_counter()
    print("| task | rollout | RSS MB | peak RSS MB | envs built |")
    print("|---|---:|---:|---:|---:|")
    for task in (f"task{index}" for index in args.tasks.split(",")):
        for number, rollout in enumerate(r for r in planned if r.scene.task == task):
            world.reset(rollout.scene)
            for _ in range(args.steps):
                world.step(world.action_space.sample() * 0)
            print(f"| {task} | {number} | {rss_mb()} | {peak_mb()} | {world.envs.built} |")
    print(f"\npeak {peak_mb()} MB, {time.perf_counter() - started:.0f} s")
    print(f"$ python bench/libero_memory.py {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
