"""What per-rollout traces cost: harness steps/s with and without writing each rollout's trace
(its state observer, building the document, writing the file), and the trace's bytes per 1,000
steps, on PushT (the heuristic expert, 96x96 images) and MetaWorld MT10 (scripted experts).

    python bench/trace_cost.py [--rollouts 6] [--repeats 3]

Each (rollout, mode) pair is run `repeats` times, alternating which mode goes first; a rollout's
best CPU time (time.thread_time) is kept, so other processes on the machine do not inflate it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from policybench.harness import run_rollout
from policybench.policy.chunk_player import ChunkPolicy
from policybench.record.rollout_trace import (
    TRACE_BUDGET_PER_1000_STEPS,
    StateRecorder,
    rollout_trace,
    write_trace,
)
from policybench.world import World


def evals() -> list:
    from policybench.suites.metaworld import MT10_STATE
    from policybench.suites.pusht import PUSHT

    return [PUSHT, MT10_STATE]


def timed(run) -> tuple[float, int, int]:
    started = time.thread_time()
    steps, size = run()
    return time.thread_time() - started, steps, size


def measure(eval, rollouts: int, repeats: int, out: Path) -> dict:
    world, policy = World(eval), ChunkPolicy(eval.scripted())
    planned = eval.rollouts(rollouts, 0)  # per task: take every task's in turn
    plan = planned[:: max(1, len(planned) // rollouts)][:rollouts]

    def bare(rollout):
        return lambda: (run_rollout(rollout, world, policy).steps, 0)

    def traced(rollout):
        def run():
            states = StateRecorder()
            episode = run_rollout(rollout, world, policy, states)
            size = write_trace(out / f"{rollout.index}.json", rollout_trace(episode, states))
            return episode.steps, size

        return run

    for rollout in plan[:1]:  # warm-up: build the env
        bare(rollout)()
    best = {"bare": [], "traced": []}
    steps_total, bytes_total = 0, 0
    for rollout in plan:
        times = {"bare": [], "traced": []}
        for repeat in range(repeats):
            order = ("bare", "traced") if repeat % 2 == 0 else ("traced", "bare")
            for mode in order:
                cpu, steps, size = timed((bare if mode == "bare" else traced)(rollout))
                times[mode].append(cpu)
                if mode == "traced" and repeat == 0:
                    steps_total, bytes_total = steps_total + steps, bytes_total + size
        for mode in best:
            best[mode].append(min(times[mode]))
    bare_s, traced_s = sum(best["bare"]), sum(best["traced"])
    return {
        "eval": eval.name,
        "rollouts": len(plan),
        "steps": steps_total,
        "bare_steps_s": steps_total / bare_s,
        "traced_steps_s": steps_total / traced_s,
        "ratio": bare_s / traced_s,
        "bytes_per_1000": 1000 * bytes_total / max(1, steps_total),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows = [measure(e, args.rollouts, args.repeats, Path(scratch)) for e in evals()]
    budget = TRACE_BUDGET_PER_1000_STEPS
    print(f"{'eval':<18}{'rollouts':>9}{'steps':>7}{'bare st/s':>11}{'traced st/s':>13}"
          f"{'ratio':>7}{'B/1000 steps':>14}{'budget':>8}")  # fmt: skip
    for r in rows:
        print(
            f"{r['eval']:<18}{r['rollouts']:>9}{r['steps']:>7}{r['bare_steps_s']:>11.0f}"
            f"{r['traced_steps_s']:>13.0f}{r['ratio']:>7.3f}{r['bytes_per_1000']:>14.0f}"
            f"{'ok' if r['bytes_per_1000'] <= budget else 'OVER':>8}"
        )
    print(f"budget: {budget} bytes per 1,000 steps; ratio: traced over bare steps/s (CPU time)")


if __name__ == "__main__":
    main()
