"""A fault campaign: a small served MetaWorld run is interrupted at a random moment in six ways
(server down 2 s, server killed, controller Ctrl-C or kill -9 then --resume, worker kill -9, an
env that hangs); each trial must lose no rollout, never hang, and end with the uninterrupted
run's outcomes, and a server outage may add at most its length plus 5 s to the run.

Run from the repository root:  python bench/faults.py  (a round, the reference run and each
fault once, takes about 4 minutes on a busy 2-core machine: 20 rounds, about 75 minutes;
--trials N for fewer rounds, --kinds server-down,env-hang for a subset).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
from served_runs import (
    PolicyServer,
    child_env,
    children_of,
    end_group,
    final_records,
    processes_in_group,
    pytest_command,
    recorded_count,
    restore_ctrl_c,
    run_dir_in,
)

from policybench import keys
from policybench.suites.metaworld import MT10, SeededPlacement, mt10

BENCH = Path(__file__).resolve().parent

# MT10 less door-open-v3 (its expert writes into the observation it is given, which a served
# policy receives read-only, so every served rollout of it errors) and three more, to keep a
# trial short.
TASKS = (
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "window-open-v3",
)
HANG_TRIGGER = "FAULTS_HANG_TRIGGER"  # names the file whose appearance makes one env step hang
NEVER_S = 3600.0


def _take(path: str) -> bool:
    """Removes the file at `path`; True for the one caller that removed it."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


class Hangable(gym.Wrapper):
    """A MetaWorld task env whose next step never returns once the file named by
    $FAULTS_HANG_TRIGGER appears (one step, in one process, takes the file)."""

    def step(self, action):
        trigger = os.environ.get(HANG_TRIGGER)
        if trigger and _take(trigger):
            time.sleep(NEVER_S)
        return self.env.step(action)


FAULTY = dataclasses.replace(
    mt10(tasks={task: MT10[task] for task in TASKS}),
    name="faults-mt10",
    make_env=lambda task: Hangable(SeededPlacement(task)),
)

BENCHMARK = '''"""The fault campaign's run: MetaWorld tasks whose env can be told to hang."""

import policybench
from faults import FAULTY


@policybench.parametrize(FAULTY)
def test_faults(rollout, harness):
    harness(rollout)
'''

OUTAGE_S = 2.0
OUTAGE_SLACK_S = 5.0
MAX_DELAY_S = 0.4  # after the chosen record count, a further random wait before the fault
ORPHAN_WAIT_S = 10.0  # how long the workers of a killed controller get to notice and exit

# What the trial checks compare: per rollout, and per Eval in summary.json.
COMPARED = (keys.OUTCOME, keys.STEPS, keys.SUCCESS_STEP)
TALLIES = ("rollouts", "solved", "unsolved", "errors", "success_rate")


@dataclass(frozen=True)
class Trial:
    kind: str
    wall_s: float
    added_s: float  # wall_s minus the wall of this round's uninterrupted run, just before it
    lost: int
    hung: bool
    equal: bool
    outage_s: float | None  # server kinds: from the server's stop to its ready line again
    retried: int  # attempts run again after an infrastructure error, over the trial's records
    carried: int | None  # resume kinds: rollouts the resumed run carried over
    leftover: int | None  # controller kill: its processes still alive ORPHAN_WAIT_S later
    missed: bool  # the run ended before the fault's moment came, or despite the fault
    exit_codes: tuple[int, ...]


class Campaign:
    """The served policy, the benchmark directory, and the reference every trial is held to."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.bench = root / "bench"
        self.bench.mkdir()
        (self.bench / "test_faults.py").write_text(BENCHMARK)
        self.env = child_env(
            PYTHONPATH=os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])
        )
        self.server = PolicyServer(
            "scripted", root / "server.log", "--eval", "faults:FAULTY", env=self.env
        )
        self.planned = {rollout.id for rollout in FAULTY.rollouts(args.rollouts, 0)}
        self.reference: dict[str, Any] | None = None
        self.reference_walls: list[float] = []
        self.references_agree = True

    def command(self, report_dir: Path, *extra: str) -> list[str]:
        """The run's pytest command; `extra` adds to it (a watchdog limit, --resume)."""
        args = self.args
        return pytest_command(
            "test_faults.py",
            "-q",
            *("-n", str(args.workers), "--rollouts", str(args.rollouts)),
            *("--policy=openpi", f"--policy-url={self.server.url}"),
            *("--server-wait", "60", "--retry-errors", "2"),
            *("--report-dir", str(report_dir), *extra),
        )

    def start(self, report_dir: Path, *extra: str) -> subprocess.Popen[bytes]:
        report_dir.mkdir(exist_ok=True)
        env = {**self.env, HANG_TRIGGER: str(report_dir / "hang")}
        with (report_dir / "pytest.log").open("ab") as log:
            return subprocess.Popen(
                self.command(report_dir, *extra),
                cwd=self.bench,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its workers can be found, and ended, as one group
            )

    def trial(self, kind: str | None, index: int, rng: random.Random) -> Trial:
        """One run with fault `kind` (None: uninterrupted) at a random moment, resumed when the
        fault ended its controller, then checked against the reference."""
        report_dir = self.root / f"{kind or 'reference'}-{index:02d}"
        after, delay = rng.randint(1, len(self.planned) - 4), rng.uniform(0, MAX_DELAY_S)
        started = time.monotonic()
        deadline = started + self.args.deadline
        # Only the hang trials shorten the watchdog: it counts a wait for the server too.
        watchdog = ("--rollout-wall-timeout", f"{self.args.hang_timeout:g}")
        watched = watchdog if kind == "env-hang" else ()
        controller = self.start(report_dir, *watched)
        outcome = Injected()
        if kind is not None:
            if wait_for_records(report_dir, after, controller, deadline):
                time.sleep(delay)
                outcome = FAULTS[kind](self, controller, rng, report_dir)
            else:
                outcome = Injected(missed=True)
        codes = [finish(controller, deadline)]
        end_group(controller.pid)  # a killed controller's workers, if any outlived it
        if kind in RESUMING and codes[0] == 0:
            outcome = dataclasses.replace(outcome, missed=True)  # it finished regardless
        if kind in RESUMING and codes[0] is not None:
            controller = self.start(report_dir, "--resume", "latest")
            codes.append(finish(controller, deadline))
        wall = time.monotonic() - started
        end_group(controller.pid)
        hung = None in codes
        records = final_records(run_dir_in(report_dir))
        finals = {
            rollout_id(nodeid): record
            for nodeid, record in records.items()
            if record[keys.OUTCOME] in ("solved", "unsolved")
        }
        observed = {
            "outcomes": {r: [finals[r].get(k) for k in COMPARED] for r in sorted(finals)},
            "tallies": tallies(run_dir_in(report_dir)),
        }
        if kind is None:
            if self.reference is None:
                self.reference = observed
            self.references_agree &= observed == self.reference and not hung
            self.reference_walls.append(wall)
        return Trial(
            kind=kind or "none",
            wall_s=wall,
            added_s=wall - self.reference_walls[-1],
            lost=len(self.planned - set(finals)),
            hung=hung,
            equal=observed == self.reference,
            outage_s=outcome.outage_s,
            retried=sum(len(r.get(keys.RETRIED, ())) for r in records.values()),
            carried=carried_over(report_dir) if kind in RESUMING else None,
            leftover=outcome.leftover,
            missed=outcome.missed,
            exit_codes=tuple(-1 if code is None else code for code in codes),
        )


def rollout_id(nodeid: str) -> str:
    return nodeid.split("[", 1)[1].removesuffix("]")


def tallies(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / "summary.json"
    if not path.is_file():
        return {}
    summary = json.loads(path.read_text())
    return {row["eval"]: {k: row.get(k) for k in TALLIES} for row in summary["evals"]}


def carried_over(report_dir: Path) -> int | None:
    """How many rollouts the resumed run said it carried over."""
    log = (report_dir / "pytest.log").read_text(errors="replace")
    found = re.findall(r"carried over from the interrupted run: (\d+) rollouts", log)
    return int(found[-1]) if found else None


def wait_for_records(
    report_dir: Path, count: int, controller: subprocess.Popen[bytes], deadline: float
) -> bool:
    """Waits until the run has recorded `count` rollouts; False if it ended (or ran out of time)
    first."""
    while time.monotonic() < deadline and controller.poll() is None:
        if recorded_count(report_dir) >= count:
            return True
        time.sleep(0.01)
    return False


def finish(controller: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The controller's exit status; None if it was still running at the deadline (a hang)."""
    try:
        return controller.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None


# --- the faults --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Injected:
    outage_s: float | None = None
    leftover: int | None = None
    missed: bool = False


Fault = Callable[[Campaign, subprocess.Popen[bytes], random.Random, Path], Injected]


def server_down(campaign: Campaign, controller, rng, report_dir) -> Injected:
    """The policy server stopped as a user stops it (Ctrl-C), started again 2 s later."""
    stopped = time.monotonic()
    campaign.server.stop(signal.SIGINT)
    time.sleep(OUTAGE_S)
    return Injected(outage_s=campaign.server.start() - stopped)


def server_killed(campaign: Campaign, controller, rng, report_dir) -> Injected:
    """The policy server killed with SIGKILL and started again at once."""
    stopped = time.monotonic()
    campaign.server.stop(signal.SIGKILL)
    return Injected(outage_s=campaign.server.start() - stopped)


def controller_sigint(campaign: Campaign, controller, rng, report_dir) -> Injected:
    """Ctrl-C to the pytest controller (the run is resumed with --resume latest)."""
    controller.send_signal(signal.SIGINT)
    return Injected()


def controller_killed(campaign: Campaign, controller, rng, report_dir) -> Injected:
    """SIGKILL to the pytest controller (then --resume latest); its workers are left to notice."""
    controller.send_signal(signal.SIGKILL)
    controller.wait()
    until = time.monotonic() + ORPHAN_WAIT_S
    while processes_in_group(controller.pid) and time.monotonic() < until:
        time.sleep(0.1)
    return Injected(leftover=len(processes_in_group(controller.pid)))


def worker_killed(campaign: Campaign, controller, rng, report_dir) -> Injected:
    """SIGKILL to one xdist worker, chosen at random, as the out-of-memory killer would."""
    workers = children_of(controller.pid)
    if not workers:
        return Injected(missed=True)
    os.kill(rng.choice(sorted(workers)), signal.SIGKILL)
    return Injected()


def env_hang(campaign: Campaign, controller, rng, report_dir) -> Injected:
    """The next env step, in whichever worker takes it, never returns."""
    (report_dir / "hang").write_text("")
    return Injected()


FAULTS: dict[str, Fault] = {
    "server-down": server_down,
    "server-killed": server_killed,
    "controller-sigint": controller_sigint,
    "controller-kill": controller_killed,
    "worker-kill": worker_killed,
    "env-hang": env_hang,
}
RESUMING = ("controller-sigint", "controller-kill")
OUTAGES = ("server-down", "server-killed")
LABELS = {
    "server-down": "server down for 2 s (Ctrl-C, restart 2 s later)",
    "server-killed": "server killed (SIGKILL) and restarted",
    "controller-sigint": "controller Ctrl-C (SIGINT), then --resume",
    "controller-kill": "controller kill -9, then --resume",
    "worker-kill": "one xdist worker kill -9",
    "env-hang": "an env step that never returns",
}


# --- report ------------------------------------------------------------------------------------


def row(kind: str, trials: list[Trial]) -> str:
    """A fault's row; the added wall of each trial is against its own round's reference run,
    which ran just before it, so that a change in the machine's load hits both alike."""
    lost = sum(t.lost for t in trials)
    hangs = sum(t.hung for t in trials)
    equal = sum(t.equal for t in trials)
    added = [t.added_s for t in trials]
    worst = max(range(len(trials)), key=lambda i: added[i])
    target = "0 lost, 0 hangs, all equal"
    passed = lost == 0 and hangs == 0 and equal == len(trials)
    if kind in OUTAGES:
        over = [added[i] - (t.outage_s or 0.0) for i, t in enumerate(trials)]
        worst = max(range(len(trials)), key=lambda i: over[i])
        target += f"; added <= outage + {OUTAGE_SLACK_S:g} s"
        passed &= max(over) <= OUTAGE_SLACK_S
        overhead = (
            f"{added[worst]:+.1f} s (outage {trials[worst].outage_s:.1f} s; "
            f"excess {over[worst]:+.1f} s; median excess {statistics.median(over):+.1f} s)"
        )
    else:
        overhead = f"{added[worst]:+.1f} s (median {statistics.median(added):+.1f} s)"
    return (
        f"| {LABELS[kind]} | {len(trials)} | {lost} | {hangs} | {equal}/{len(trials)} "
        f"| {overhead} | {evidence(kind, trials)} | {target} | {'pass' if passed else 'FAIL'} |"
    )


def evidence(kind: str, trials: list[Trial]) -> str:
    """What shows the fault happened: attempts run again, rollouts carried over by a resume."""
    parts = [f"{sum(t.retried for t in trials)} attempts rerun"]
    if kind in OUTAGES:
        outages = [t.outage_s for t in trials if t.outage_s is not None]
        parts.append(f"outage {min(outages):.1f}-{max(outages):.1f} s")
    if kind in RESUMING:
        carried = [t.carried for t in trials if t.carried is not None]
        if carried:
            parts.append(f"{min(carried)}-{max(carried)} carried over")
    if kind == "controller-kill":
        parts.append(f"processes left after the kill: {max(t.leftover or 0 for t in trials)}")
    missed = sum(t.missed for t in trials)
    if missed:
        parts.append(f"{missed} not interrupted (ended first, or despite the fault)")
    failed = sum(t.exit_codes[-1] != 0 for t in trials)
    if failed:
        parts.append(f"{failed} exited non-zero")
    return "; ".join(parts)


def report(campaign: Campaign, results: dict[str, list[Trial]], reference: list[Trial]) -> str:
    reference_s = statistics.median(campaign.reference_walls)
    lines = [
        f"$ {resolved_command(campaign.args)}",
        f"base run: {len(campaign.planned)} rollouts ({len(TASKS)} MetaWorld MT10 tasks x "
        f"{campaign.args.rollouts} seeds), -n {campaign.args.workers}, policy served by "
        "`policybench serve --policy=scripted`; the uninterrupted run took "
        f"{reference_s:.1f} s (median of {len(reference)} runs, one per round, "
        f"{min(campaign.reference_walls):.1f}-{max(campaign.reference_walls):.1f} s); "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
        "",
        "| fault | trials | rollouts lost | hangs | summary = uninterrupted "
        "| worst added wall (vs its round's reference) "
        "| evidence | target | result |",
        "|---|---:|---:|---:|---:|---|---|---|---|",
    ]
    lines += [row(kind, trials) for kind, trials in results.items()]
    agree = campaign.references_agree
    lines.append(
        f"| none (reference) | {len(reference)} | {sum(t.lost for t in reference)} "
        f"| {sum(t.hung for t in reference)} | {'all agree' if agree else 'DISAGREE'} | - "
        f"| {sum(t.retried for t in reference)} attempts rerun | same outcomes every run "
        f"| {'pass' if agree else 'FAIL'} |"
    )
    return "\n".join(lines)


def resolved_command(args: argparse.Namespace) -> str:
    flags = [
        f"--trials={args.trials}",
        f"--kinds={','.join(args.kinds)}",
        f"--rollouts={args.rollouts}",
        f"--workers={args.workers}",
        f"--hang-timeout={args.hang_timeout:g}",
        f"--deadline={args.deadline:g}",
        f"--seed={args.seed}",
    ]
    return " ".join(["python", "bench/faults.py", *flags])


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="trials of each fault (default 20)")
    parser.add_argument(
        "--kinds",
        type=lambda text: text.split(","),
        default=list(FAULTS),
        help=f"faults to inject, comma-separated (default all: {','.join(FAULTS)})",
    )
    parser.add_argument("--rollouts", type=int, default=2, help="seeds per task (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="-n of each run (default 2)")
    parser.add_argument(
        "--hang-timeout",
        type=float,
        default=10.0,
        help="--rollout-wall-timeout of the env-hang runs, seconds (default 10; the others run "
        "with the default limit)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=120.0,
        help="a trial still running after this many seconds is a hang (default 120)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault moments")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the runs (reports, pytest and server logs) under DIR and keep them",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.kinds) - set(FAULTS))
    if unknown:
        parser.error(f"unknown --kinds {unknown}; known: {', '.join(FAULTS)}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    restore_ctrl_c()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="policybench-faults-") as temporary:
        root = Path(args.keep or temporary)
        root.mkdir(parents=True, exist_ok=True)
        campaign = Campaign(args, root)
        campaign.server.start()
        results: dict[str, list[Trial]] = {kind: [] for kind in args.kinds}
        reference: list[Trial] = []
        try:
            for index in range(args.trials):  # a round: the reference, then each fault once
                reference.append(campaign.trial(None, index, rng))
                for kind in args.kinds:
                    trial = campaign.trial(kind, index, rng)
                    results[kind].append(trial)
                    print(progress(trial, index, campaign), file=sys.stderr, flush=True)
        finally:
            campaign.server.stop()
        print(report(campaign, results, reference))
    return 0


def progress(trial: Trial, index: int, campaign: Campaign) -> str:
    return (
        f"[{index + 1}/{campaign.args.trials}] {trial.kind}: {trial.wall_s:.1f} s "
        f"({trial.added_s:+.1f} s), lost "
        f"{trial.lost}, {'HUNG, ' if trial.hung else ''}equal {trial.equal}, rerun "
        f"{trial.retried}, exit {trial.exit_codes}"
        + (f", outage {trial.outage_s:.1f} s" if trial.outage_s is not None else "")
        + (f", carried {trial.carried}" if trial.carried is not None else "")
        + (f", left after kill {trial.leftover}" if trial.leftover is not None else "")
        + (", MISSED" if trial.missed else "")
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
