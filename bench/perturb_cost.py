"""What a perturbation costs: MetaWorld reach-v3 with a 64x64 corner camera (rendered every
step) under a random policy, which never succeeds, so every rollout runs its 500 steps: as it
is, with noisy actions (action_noise 0.5) and with the camera moved (camera_pose 0.1).

    python bench/perturb_cost.py [--rollouts 2] [--repeats 3]

Each (rollout, mode) runs `repeats` times, the modes in turn, in one process; a rollout's best
CPU time (time.thread_time) is kept, so other processes on the machine do not inflate it. It
prints a markdown table of steps/s against the unperturbed rollouts (target: at least 0.95 of
theirs) and the command that made it.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from policybench.harness import run_rollout
from policybench.perturbation import Perturbation
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.random import RandomModel
from policybench.suites.metaworld import MT10, mt10
from policybench.world import World

TARGET = 0.95
MODES = {
    "none": None,
    "action_noise-0.5": Perturbation("action_noise", 0.5),
    "camera_pose-0.1": Perturbation("camera_pose", 0.1),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    eval = mt10(camera="corner", size=64, shadows=False, tasks={"reach-v3": MT10["reach-v3"]})
    eval = dataclasses.replace(eval, stop_on_success=False)
    world = World(eval)
    plan = eval.rollouts(args.rollouts, 0)
    world.reset(plan[0].scene)
    space = world.action_space
    policy = ChunkPolicy(RandomModel(space.low, space.high))
    run_rollout(plan[0], world, policy)  # warm-up
    best = dict.fromkeys(MODES, 0.0)
    steps = dict.fromkeys(MODES, 0)
    for rollout in plan:
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            order = list(MODES)[repeat % len(MODES) :] + list(MODES)[: repeat % len(MODES)]
            for mode in order:
                perturbed = dataclasses.replace(rollout, perturbation=MODES[mode])
                started = time.thread_time()
                made = run_rollout(perturbed, world, policy).steps
                times[mode].append(time.thread_time() - started)
                steps[mode] += made if repeat == 0 else 0
        for mode in MODES:
            best[mode] += min(times[mode])
    world.close()
    rate = {mode: steps[mode] / best[mode] for mode in MODES}
    print(f"$ python bench/perturb_cost.py --rollouts={args.rollouts} --repeats={args.repeats}")
    print()
    print("| mode | steps | best CPU s | steps/s | vs none | target | verdict |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for mode in MODES:
        ratio = rate[mode] / rate["none"]
        verdict = "-" if mode == "none" else "pass" if ratio >= TARGET else "FAIL"
        print(
            f"| {mode} | {steps[mode]} | {best[mode]:.3f} | {rate[mode]:.0f} | {ratio:.3f} "
            f"| >= {TARGET} | {verdict} |"
        )


if __name__ == "__main__":
    main()
