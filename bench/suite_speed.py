"""Measures the ALOHA and LIBERO suites' envs here: build and reset time, and control steps per
second with the rendering each Eval declares (and cheaper variants), in wall and CPU time.

Run from the repository root:  python bench/suite_speed.py  (about 2 minutes; --steps N).
Software rendering dominates a step; CPU time is given too, since other processes inflate wall
time on a shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

from policybench.spec import Eval, Scene


def measure(eval: Eval, scene: Scene, steps: int) -> dict[str, float]:
    clocks = (time.perf_counter, time.process_time)
    started = [clock() for clock in clocks]
    env = eval.make_env(scene.task)
    built = [clock() for clock in clocks]
    env.reset(seed=scene.seed, options=dict(scene.fields) or None)
    reset = [clock() for clock in clocks]
    action = np.zeros(env.action_space.shape, env.action_space.dtype)
    for _ in range(steps):
        env.step(action)
    done = [clock() for clock in clocks]
    env.close()
    return {
        "build_s": built[0] - started[0],
        "reset_s": reset[0] - built[0],
        "steps_per_s": steps / (done[0] - reset[0]),
        "cpu_steps_per_s": steps / (done[1] - reset[1]),
    }


def cases() -> dict[str, Callable[[], tuple[Eval, Scene]]]:
    def aloha(**rendering):
        from policybench.suites.aloha import Rendering, aloha

        eval = aloha(Rendering(**rendering))
        return eval, Scene("transfer_cube", 0)

    def libero(**changes):
        from policybench.suites.libero import OPENPI, libero

        eval = libero("libero_spatial", dataclasses.replace(OPENPI, **changes))
        return eval, Scene("task0", 0, {"init_state": 0})

    return {
        "aloha (top 480x640, shadows)": lambda: aloha(),
        "aloha (top 480x640, no shadows)": lambda: aloha(shadows=False),
        "libero_spatial (2 cameras 256x256, openpi)": lambda: libero(),
        "libero_spatial (2 cameras 128x128)": lambda: libero(camera_size=128),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="control steps per case")
    args = parser.parse_args()
    header = "| env | build s | reset s | steps/s (wall) | steps/s (CPU) |"
    print(header)
    print("|---|---:|---:|---:|---:|")
    for name, case in cases().items():
        eval, scene = case()
        row = measure(eval, scene, args.steps)
        print(
            f"| {name} | {row['build_s']:.1f} | {row['reset_s']:.1f} | "
            f"{row['steps_per_s']:.1f} | {row['cpu_steps_per_s']:.1f} |",
            flush=True,
        )
    print(f"\ncommand: {shlex.join([sys.executable, *sys.argv])}; load: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
