"""Benchmarks the policybench harness: per-step overhead vs a plain MetaWorld loop on the same envs,
pytest-xdist scaling of the MT10 suite (-n 0 vs -n 2), and collection time and simulator imports.

Run from the repository root:  python bench/harness.py  (about 2-3 minutes with the defaults).
Every number is a ratio or a best-of-repeats taken within this one run, since the machine is noisy;
the overhead ratio is taken in CPU time (time.thread_time), which other processes do not inflate.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import pstats
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import gymnasium as gym

    from policybench.spec import Rollout

REPO = Path(__file__).resolve().parents[1]
MAX_STEPS = 500
SIMULATOR_MODULES = ("mujoco", "metaworld", "gym_pusht", "pymunk")

OVERHEAD_TARGET = 0.97
SCALING_TARGET = 1.8
COLLECT_TARGET_S = 3.0


@dataclass(frozen=True)
class Row:
    measure: str
    value: str
    target: str = ""
    passed: bool | None = None  # None: informational, no target


# --- 1. harness overhead ---------------------------------------------------------------------


@dataclass
class OverheadResult:
    """Times are sums over rollouts of each rollout's best time across repeats."""

    harness_cpu_s: float
    plain_cpu_s: float
    harness_wall_s: float
    plain_wall_s: float
    steps: int
    median_cpu_ratio: float  # median over repeats of the whole-pass ratio
    mismatches: list[str]  # "task/seed=s: harness [H], plain [P]" where step counts differ
    rollouts: int

    @property
    def cpu_ratio(self) -> float:
        """Harness steps/s over plain steps/s in CPU time (same steps, so plain / harness time)."""
        return self.plain_cpu_s / self.harness_cpu_s

    @property
    def wall_ratio(self) -> float:
        return self.plain_wall_s / self.harness_wall_s


@dataclass(frozen=True)
class Timing:
    cpu_s: float  # this thread's CPU time: unaffected by other processes taking the core
    wall_s: float
    steps: int


def plain_rollout(env: gym.Env, task: str, seed: int) -> int:
    """MetaWorld's expert on `env` with no harness: the number of steps to success or 500."""
    from metaworld.policies import ENV_POLICY_MAP

    expert = ENV_POLICY_MAP[task]()
    obs, _ = env.reset(seed=seed)
    for step in range(1, MAX_STEPS + 1):
        obs, _, terminated, truncated, info = env.step(expert.get_action(obs))
        if info["success"] or terminated or truncated:
            return step
    return MAX_STEPS


def timed(run: Callable[[], int]) -> Timing:
    cpu, wall = time.thread_time(), time.perf_counter()
    steps = run()
    return Timing(time.thread_time() - cpu, time.perf_counter() - wall, steps)


def measure_overhead(seeds: int, repeats: int) -> OverheadResult:
    """Interleaves harness and plain rollouts of each (task, seed), alternating which goes first."""
    from policybench.harness import run_rollout
    from policybench.policy.chunk_player import ChunkPolicy
    from policybench.suites.metaworld import MT10_STATE
    from policybench.world import World

    world, policy = World(MT10_STATE), ChunkPolicy(MT10_STATE.scripted())
    rollouts = MT10_STATE.rollouts(seeds, 0)

    def harness_run(rollout: Rollout) -> Callable[[], int]:
        return lambda: run_rollout(rollout, world, policy).steps

    def plain_run(rollout: Rollout) -> Callable[[], int]:
        task, seed = rollout.scene.task, rollout.scene.seed
        return lambda: plain_rollout(world.env_for(task), task, seed)

    for rollout in rollouts[::seeds]:  # warm-up: build every env, run one rollout of each task
        harness_run(rollout)()
        plain_run(rollout)()

    runs: dict[str, list[list[Timing]]] = {
        "harness": [[] for _ in rollouts],
        "plain": [[] for _ in rollouts],
    }
    for repeat in range(repeats):
        for i, rollout in enumerate(rollouts):
            order = [("harness", harness_run), ("plain", plain_run)]
            for name, make in order if (repeat + i) % 2 == 0 else reversed(order):
                runs[name][i].append(timed(make(rollout)))
    return summarize(runs, [rollout.id for rollout in rollouts], repeats)


def summarize(runs: dict[str, list[list[Timing]]], ids: list[str], repeats: int) -> OverheadResult:
    def best(name: str, clock: str) -> float:
        return sum(min(getattr(t, clock) for t in timings) for timings in runs[name])

    def pass_cpu(name: str, repeat: int) -> float:
        return sum(timings[repeat].cpu_s for timings in runs[name])

    mismatches = []
    for i, rollout_id in enumerate(ids):
        harness = sorted({t.steps for t in runs["harness"][i]})
        plain = sorted({t.steps for t in runs["plain"][i]})
        if len(harness) != 1 or harness != plain:
            mismatches.append(f"{rollout_id}: harness {harness}, plain {plain}")
    return OverheadResult(
        harness_cpu_s=best("harness", "cpu_s"),
        plain_cpu_s=best("plain", "cpu_s"),
        harness_wall_s=best("harness", "wall_s"),
        plain_wall_s=best("plain", "wall_s"),
        steps=sum(timings[0].steps for timings in runs["harness"]),
        median_cpu_ratio=statistics.median(
            pass_cpu("plain", r) / pass_cpu("harness", r) for r in range(repeats)
        ),
        mismatches=mismatches,
        rollouts=len(ids),
    )


def overhead_rows(result: OverheadResult) -> list[Row]:
    def rates(cpu_s: float, wall_s: float) -> str:
        return f"{result.steps / cpu_s:,.0f} CPU-time ({result.steps / wall_s:,.0f} wall)"

    return [
        Row("harness steps/s (MT10 expert)", rates(result.harness_cpu_s, result.harness_wall_s)),
        Row(
            "plain loop steps/s (same envs, seeds)", rates(result.plain_cpu_s, result.plain_wall_s)
        ),
        Row(
            "harness / plain steps/s (CPU time)",
            f"{result.cpu_ratio:.3f} (median of repeats {result.median_cpu_ratio:.3f}; "
            f"wall {result.wall_ratio:.3f})",
            f">= {OVERHEAD_TARGET}",
            result.cpu_ratio >= OVERHEAD_TARGET,
        ),
        Row(
            "same steps per rollout, harness vs plain",
            f"{result.rollouts - len(result.mismatches)}/{result.rollouts} rollouts, "
            f"{result.steps} steps",
            "all equal",
            not result.mismatches,
        ),
    ]


def profile_harness(seeds: int, top: int) -> None:
    """cProfile of the harness loop alone (envs prebuilt): policybench's own functions by own time.

    cProfile inflates small Python calls, so read it for ranking, the overhead ratio for size.
    """
    from policybench.harness import run_rollout
    from policybench.policy.chunk_player import ChunkPolicy
    from policybench.suites.metaworld import MT10_STATE
    from policybench.world import World

    world, policy = World(MT10_STATE), ChunkPolicy(MT10_STATE.scripted())
    rollouts = MT10_STATE.rollouts(seeds, 0)
    for rollout in rollouts[::seeds]:
        run_rollout(rollout, world, policy)
    profiler = cProfile.Profile()
    profiler.enable()
    for rollout in rollouts:
        run_rollout(rollout, world, policy)
    profiler.disable()
    print(f"\ncProfile of run_rollout, {len(rollouts)} MT10 rollouts, policybench code by tottime:")
    pstats.Stats(profiler).sort_stats("tottime").print_stats("policybench", top)


# --- 2. parallel scaling ---------------------------------------------------------------------


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *args]


def suite_command(
    rollouts: int, workers: int, extra: tuple[str, ...], report_dir: Path
) -> list[str]:
    flags = f"-p no:cacheprovider -q --rollouts {rollouts} -n {workers}".split()
    test = "benchmarks/test_metaworld.py"
    return pytest_command(test, *flags, *extra, "--report-dir", str(report_dir))


@dataclass(frozen=True)
class Variant:
    """One way of running the suite: `-n workers` plus extra pytest flags."""

    label: str
    workers: int
    extra: tuple[str, ...] = ()


def scaling_variants(workers: int, per_worker: bool) -> list[Variant]:
    """-n 0, -n W as the plugin defaults (one shared policy server), and optionally -n W with a
    copy of the policy in each worker, to tell server round trips from xdist itself."""
    variants = [Variant("-n 0", 0), Variant(f"-n {workers}", workers)]
    if per_worker:
        sharing = ("--policy-sharing", "per-worker")
        variants.append(Variant(f"-n {workers} --policy-sharing per-worker", workers, sharing))
    return variants


@dataclass(frozen=True)
class RunTime:
    wall_s: float
    cpu_s: float  # user + sys of the command and every process it waited for (xdist workers)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_timed(command: list[str]) -> tuple[RunTime, subprocess.CompletedProcess[str]]:
    cpu, wall = children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    return RunTime(time.perf_counter() - wall, children_cpu_s() - cpu), done


class CommandFailed(RuntimeError):
    """A benchmarked pytest run exited non-zero; its section reports FAIL and the run goes on."""


def require_ok(done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        print(f"command failed ({done.returncode}): {shlex.join(done.args)}", file=sys.stderr)
        print(output[-3000:], file=sys.stderr)
        last = output.splitlines()[-1] if output else ""
        raise CommandFailed(f"exit {done.returncode}: {last[:120]} (output on stderr)")


def _burn(iterations: int = 5_000_000) -> None:
    total = 0
    for i in range(iterations):
        total += i


def burn_wall_s(processes: int) -> float:
    """Wall time for `processes` processes to each do the same pure-Python work at once."""
    started = time.perf_counter()
    workers = [multiprocessing.get_context("fork").Process(target=_burn) for _ in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started


def cpu_capacity() -> float:
    """How many cores' worth of work 2 processes get right now (2.0 on an idle 2-core box)."""
    alone = min(burn_wall_s(1) for _ in range(2))
    return 2 * alone / burn_wall_s(2)


def measure_scaling(
    rollouts: int, variants: list[Variant], repeats: int
) -> tuple[list[Row], list[str]]:
    """Runs the variants in turn, `repeats` times; the best wall time of each against -n 0."""
    runs: dict[Variant, list[RunTime]] = {variant: [] for variant in variants}
    failed: dict[Variant, str] = {}
    capacity = []
    with tempfile.TemporaryDirectory(prefix="policybench-bench-") as report_dir:
        commands = {v: suite_command(rollouts, v.workers, v.extra, Path(report_dir)) for v in runs}
        for _ in range(repeats):
            capacity.append(cpu_capacity())
            for variant in [v for v in runs if v not in failed]:
                run_time, done = run_timed(commands[variant])
                try:
                    require_ok(done)
                except CommandFailed as failure:
                    failed[variant] = str(failure)
                runs[variant].append(run_time)
        shown = [shlex.join(commands[v]).replace(report_dir, "$TMP") for v in runs]
    serial, *parallel = variants
    if serial in failed:
        raise CommandFailed(failed[serial])
    items = rollouts * 10
    rows = [
        Row(f"pytest {v.label}: rollouts/s ({items} rollouts)", rate(items, best(runs[v])))
        for v in variants
        if v not in failed
    ]
    rows += [speedup_row(runs[serial], runs[v], v, failed.get(v)) for v in parallel]
    rows.append(
        Row(
            "machine: 2-process CPU capacity (pure Python)",
            f"{statistics.median(capacity):.2f} cores (min {min(capacity):.2f})",
        )
    )
    return rows, shown


def best(runs: list[RunTime]) -> RunTime:
    return min(runs, key=lambda run: run.wall_s)


def speedup_row(
    serial: list[RunTime], parallel: list[RunTime], variant: Variant, failure: str | None
) -> Row:
    label, target = f"speedup {variant.label} over -n 0", f">= {SCALING_TARGET}x"
    if failure is not None:
        return Row(label, f"run failed: {failure}".replace("|", "/"), target, False)
    speedup = best(serial).wall_s / best(parallel).wall_s
    # On an idle machine -n W at best spreads its total CPU time evenly over W cores.
    bound = variant.workers * min(r.cpu_s for r in serial) / min(r.cpu_s for r in parallel)
    value = f"{speedup:.2f}x (idle-machine bound from CPU-s: {bound:.2f}x)"
    return Row(label, value, target, speedup >= SCALING_TARGET)


def rate(items: int, run_time: RunTime) -> str:
    return (
        f"{items / run_time.wall_s:.2f} ({run_time.wall_s:.1f} s wall, {run_time.cpu_s:.1f} CPU-s)"
    )


# --- 3. collection ---------------------------------------------------------------------------


COLLECT_ARGS = ("--collect-only", "-q", "benchmarks/", "-p", "no:cacheprovider")


def imported_simulators(importtime_log: str) -> list[str]:
    """The simulator modules named in a `python -X importtime` log."""
    found = set()
    for line in importtime_log.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", line)
        if match and match.group(1).split(".")[0] in SIMULATOR_MODULES:
            found.add(match.group(1).split(".")[0])
    return sorted(found)


def measure_collection(repeats: int) -> tuple[list[Row], list[str]]:
    timing = pytest_command(*COLLECT_ARGS)
    importtime = [sys.executable, "-X", "importtime", "-m", "pytest", *COLLECT_ARGS]
    runs = []
    for _ in range(repeats):
        run_time, done = run_timed(timing)
        require_ok(done)
        runs.append(run_time)
    _, logged = run_timed(importtime)
    require_ok(logged)
    collected = re.search(r"(\d+) tests? collected", logged.stdout)
    simulators = imported_simulators(logged.stderr)
    best = min(r.wall_s for r in runs)
    rows = [
        Row(
            f"collection wall time ({collected.group(1) if collected else '?'} items)",
            f"{best:.2f} s (median {statistics.median(r.wall_s for r in runs):.2f} s; "
            f"best CPU {min(r.cpu_s for r in runs):.2f} s)",
            f"<= {COLLECT_TARGET_S:g} s",
            best <= COLLECT_TARGET_S,
        ),
        Row(
            "simulator modules imported at collection",
            ", ".join(simulators) or "none",
            "none of " + "/".join(SIMULATOR_MODULES),
            not simulators,
        ),
    ]
    return rows, [shlex.join(timing), shlex.join(importtime)]


# --- report ----------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    lines = ["| measure | value | target | result |", "|---|---|---|---|"]
    for row in rows:
        verdict = "" if row.passed is None else ("pass" if row.passed else "FAIL")
        lines.append(f"| {row.measure} | {row.value} | {row.target} | {verdict} |")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", type=int, default=3, help="seeds per MT10 task for the overhead loop"
    )
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the overhead loop")
    parser.add_argument(
        "--rollouts", type=int, default=15, help="--rollouts per task for the pytest runs"
    )
    parser.add_argument("--workers", type=int, default=2, help="xdist workers compared with -n 0")
    parser.add_argument(
        "--per-worker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time -n W with --policy-sharing per-worker (default: yes)",
    )
    parser.add_argument("--scaling-repeats", type=int, default=2, help="repeats of each pytest run")
    parser.add_argument("--collect-repeats", type=int, default=3, help="repeats of --collect-only")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="TOP",
        help="also cProfile the harness loop, print TOP rows",
    )
    parser.add_argument(
        "--skip", action="append", default=[], choices=["overhead", "scaling", "collection"]
    )
    return parser.parse_args(argv)


def resolved_command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run, every size spelled out."""
    flags = [
        f"--seeds={args.seeds}",
        f"--repeats={args.repeats}",
        f"--rollouts={args.rollouts}",
        f"--workers={args.workers}",
        "--per-worker" if args.per_worker else "--no-per-worker",
        f"--scaling-repeats={args.scaling_repeats}",
        f"--collect-repeats={args.collect_repeats}",
        *([f"--profile={args.profile}"] if args.profile else []),
        *(f"--skip={name}" for name in args.skip),
    ]
    return shlex.join(["python", "bench/harness.py", *flags])


Section = Callable[[], tuple[list[Row], list[str]]]  # () -> (rows, command lines it ran)


def run_section(name: str, measure: Section) -> tuple[list[Row], list[str]]:
    """The section's rows and commands, or one FAIL row if one of its pytest runs failed."""
    try:
        return measure()
    except CommandFailed as failure:
        message = str(failure).replace("|", "/")
        return [Row(f"{name}: a pytest run failed", message, "exit 0", False)], []


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="Constant\\(s\\) may be too high")
    started = time.perf_counter()
    rows: list[Row] = []
    commands: list[str] = []
    if "overhead" not in args.skip:
        rows += overhead_rows(result := measure_overhead(args.seeds, args.repeats))
        for mismatch in result.mismatches:
            print(f"step count mismatch: {mismatch}")
    sections: dict[str, Section] = {
        "scaling": lambda: measure_scaling(
            args.rollouts, scaling_variants(args.workers, args.per_worker), args.scaling_repeats
        ),
        "collection": lambda: measure_collection(args.collect_repeats),
    }
    for name, measure in sections.items():
        if name not in args.skip:
            section_rows, section_commands = run_section(name, measure)
            rows, commands = rows + section_rows, commands + section_commands
    if args.profile:
        profile_harness(args.seeds, args.profile)
    print(table(rows))
    elapsed = time.perf_counter() - started
    print(f"\n{len(rows)} rows in {elapsed:.0f} s; subprocess commands (cwd {REPO}):")
    for command in commands:
        print(f"  {command}")
    print(f"\ncommand: {resolved_command(args)}")


if __name__ == "__main__":
    main(sys.argv[1:])
