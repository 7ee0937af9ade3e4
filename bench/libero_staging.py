"""What exact openpi staging costs per LIBERO rollout: rollout i replays the random draws of i
resets before one real reset, instead of running i + 1 resets as openpi's example does.

Run from the repository root:  python bench/libero_staging.py  (about a minute per task;
--tasks libero_spatial:0,libero_10:8 --camera 128 --verify 5 --rollouts 0,9,49).
Per task it times the env build, the one-off compile of the fresh model replays need, a real
(hard) reset, a replayed reset, the 10 settle steps, and staging rollouts 0, 9 and 49 through the
env's own reset (wall and CPU time); it checks that numpy's RNG after k replayed resets equals
its state after k real ones, and estimates what i + 1 real resets would cost instead.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

from policybench.suites.libero.env import LiberoEnv
from policybench.suites.libero.replay import fresh_poses, replay_resets
from policybench.suites.libero.staging import OPENPI_STAGING
from policybench.suites.libero.tasks import TASKS


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of `work()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def rng_state() -> tuple:
    kind, key, position, gauss, cached = np.random.get_state()
    return kind, key.tobytes(), position, gauss, cached


def measure(suite: str, index: int, camera: int, verify: int, rollouts: list[int]) -> dict:
    row: dict[str, object] = {"task": f"{suite} task{index}"}
    made: list[LiberoEnv] = []
    row["build"] = timed(lambda: made.append(LiberoEnv(suite, TASKS[suite][index], camera)))
    env = made[0]
    libero, robosuite_env = env.libero, env.libero.env
    row["compile"] = timed(lambda: fresh_poses(robosuite_env, str(env.bddl_file)))
    poses = fresh_poses(robosuite_env, str(env.bddl_file))

    # numpy's RNG after k real resets of a freshly seeded env, then after k replayed ones.
    samplers = list(robosuite_env.object_property_initializers)
    np.random.seed(OPENPI_STAGING.seed)
    real_states, real_times = [rng_state()], []
    for _ in range(verify):
        real_times.append(timed(libero.reset))
        real_states.append(rng_state())
    robosuite_env.object_property_initializers = list(samplers)
    np.random.seed(OPENPI_STAGING.seed)
    replayed_states, replay_times = [rng_state()], []
    for _ in range(verify):
        replay_times.append(timed(lambda: replay_resets(robosuite_env, 1, poses)))
        replayed_states.append(rng_state())
    row["identical"] = real_states == replayed_states
    row["reset"] = tuple(np.mean(real_times, axis=0))
    row["replay"] = tuple(np.mean(replay_times, axis=0))

    settle = np.array([0.0] * 6 + [-1.0])
    row["settle"] = timed(lambda: [libero.step(settle) for _ in range(10)])
    for rollout in rollouts:
        options = {"init_state": rollout}
        row[f"rollout {rollout}"] = timed(lambda o=options: env.reset(seed=7, options=o))
    env.close()
    return row


def seconds(pair: tuple[float, float], scale: float = 1.0, digits: int = 2) -> str:
    return f"{pair[0] * scale:.{digits}f} ({pair[1] * scale:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="libero_spatial:0,libero_spatial:4,libero_10:8")
    parser.add_argument("--camera", type=int, default=128, help="render size (default 128)")
    parser.add_argument("--verify", type=int, default=5, help="resets compared (default 5)")
    parser.add_argument("--rollouts", default="0,9,49", help="rollouts staged (default 0,9,49)")
    args = parser.parse_args()
    rollouts = [int(r) for r in args.rollouts.split(",")]
    rows = []
    for spec in args.tasks.split(","):
        suite, _, index = spec.partition(":")
        rows.append(measure(suite, int(index), args.camera, args.verify, rollouts))

    print(f"\nLIBERO staging, {args.camera}x{args.camera} cameras; seconds wall (CPU)\n")
    staged = [f"rollout {r}" for r in rollouts]
    header = ["task", "build", "fresh-model compile (once)", "real reset", "replayed reset (ms)"]
    header += ["10 settle steps", *[f"stage {name}" for name in staged]]
    header += [f"{rollouts[-1] + 1} real resets (est.)", f"replay = real ({args.verify})"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        naive = tuple(value * (rollouts[-1] + 1) for value in row["reset"])
        cells = [row["task"], seconds(row["build"]), seconds(row["compile"])]
        cells += [seconds(row["reset"]), seconds(row["replay"], 1000, 0), seconds(row["settle"])]
        cells += [seconds(row[name]) for name in staged]
        cells += [seconds(naive, digits=0), "yes" if row["identical"] else "NO"]
        print("| " + " | ".join(cells) + " |")
    print(f"\ncommand: {shlex.join([sys.executable, *sys.argv])}; load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
