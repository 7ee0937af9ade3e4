"""What trajectory specs cost: a 1,000-step MetaWorld rollout (reach-v3 under a random policy,
which never succeeds, so every rollout runs its 12.5 s) with and without judging specs: the state
recorder the specs read, the signals built from the trace, and the margins of a workspace
bound, an action-rate limit, a gripper held shut too long and a no-progress spec.

    python bench/specs_cost.py [--rollouts 4] [--repeats 3]

Each (rollout, mode) pair runs `repeats` times, alternating which mode goes first; a rollout's
best CPU time (time.thread_time) is kept, so other processes on the machine do not inflate it.
It prints a markdown table (target: specs add at most 5%) and the command that made it.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from policybench.harness import run_rollout
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.random import RandomModel
from policybench.record.rollout_trace import StateRecorder
from policybench.spec import seeded_per_task
from policybench.suites.metaworld import MT10, SIGNALS, mt10
from policybench.trajectory import (
    action_rate_limit,
    gripper_closed_on_nothing,
    no_progress,
    workspace,
)
from policybench.trajectory.signals import signals_of
from policybench.world import World

STEPS = 1000
TARGET = 1.05
SPECS = (
    workspace("hand", [-0.5, 0.3, 0.0], [0.5, 1.0, 0.5]),
    action_rate_limit(160.0),
    gripper_closed_on_nothing("gripper_opening", 0.05),
    no_progress("reward", 2.0, 0.01),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tasks = {"reach-v3": MT10["reach-v3"]}
    base = mt10(tasks=tasks)

    def longer(task: str):  # MetaWorld ends an episode at 500 steps
        env = base.make_env(task)
        env.unwrapped.max_path_length = STEPS
        return env

    eval = dataclasses.replace(
        base,
        make_env=longer,
        plan=seeded_per_task(tasks, timeout_s=STEPS / 80),
        stop_on_success=False,
    )
    world = World(eval)
    plan = eval.rollouts(args.rollouts, 0)
    world.reset(plan[0].scene)
    space = world.action_space
    policy = ChunkPolicy(RandomModel(space.low, space.high))

    def bare(rollout):
        return run_rollout(rollout, world, policy).steps

    def judged(rollout):
        states = StateRecorder()
        episode = run_rollout(rollout, world, policy, states)
        signals = signals_of(episode.trace, states.states, eval.control_hz, SIGNALS)
        for spec in SPECS:
            spec.margin(signals)
        return episode.steps

    bare(plan[0])  # warm-up
    best: dict[str, float] = {"bare": 0.0, "specs": 0.0}
    steps = 0
    for rollout in plan:
        times: dict[str, list[float]] = {"bare": [], "specs": []}
        for repeat in range(args.repeats):
            order = ("bare", "specs") if repeat % 2 == 0 else ("specs", "bare")
            for mode in order:
                started = time.thread_time()
                made = (bare if mode == "bare" else judged)(rollout)
                times[mode].append(time.thread_time() - started)
            steps += made if repeat == 0 else 0
        for mode in best:
            best[mode] += min(times[mode])
    ratio = best["specs"] / best["bare"]
    print(f"$ python bench/specs_cost.py --rollouts={args.rollouts} --repeats={args.repeats}")
    print()
    print("| rollouts | steps | bare CPU s | with specs CPU s | ratio | target | verdict |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    verdict = "pass" if ratio <= TARGET else "FAIL"
    print(
        f"| {len(plan)} | {steps} | {best['bare']:.3f} | {best['specs']:.3f} | {ratio:.3f} "
        f"| <= {TARGET} | {verdict} |"
    )
    print(f"specs: {'; '.join(spec.name for spec in SPECS)}")


if __name__ == "__main__":
    main()
