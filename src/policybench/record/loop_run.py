"""The run of a loop policybench does not drive (policybench.wrap): its episodes as they go, in
wall time (nothing is simulated), into the run directory the harness's runs write."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import secrets
import shlex
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
from gymnasium.spaces import Dict, Tuple, flatten

from policybench import keys
from policybench.policy.base import control_period_ns
from policybench.record.episode import Episode, Outcome, OutcomeKind, TraceStep
from policybench.record.protocol import Protocol
from policybench.record.rollout_trace import StateRecorder, rollout_trace, write_trace
from policybench.record.video import VideoRecorder
from policybench.run.arms import (
    ARMS,
    BLINDED,
    BLINDING,
    UNBLINDED,
    Blinding,
    Sealer,
    telling_texts,
    whole_words,
)
from policybench.run.files import open_append
from policybench.run.info import RunInfo
from policybench.run.layout import TRACES, VIDEOS, video_fields, video_name
from policybench.run.records import crashed_record, rollout_record
from policybench.run.results import RESULTS, ResultsWriter, read_results
from policybench.run.unfinished import UNFINISHED, mark
from policybench.world import as_observation, installed_version

INDEXES = ".episode-indexes.json"  # the next episode index of each Eval and arm, claimed by loops
NOT_DESCRIBED = "(not described)"  # run.json's policy when the loop did not describe it
DIED = "the loop died mid-episode (its process ended before the episode did)"
NOT_RENDERED = 'the env renders no frames (make it with render_mode="rgb_array" to film it)'
UNFILMED = "the loop died before the episode's video was written"


class OpenEpisode:
    """One episode in progress: the statics it was opened with, its steps and their wall times,
    the small state vectors of its observations and, when the env renders, its video."""

    def __init__(self, run: LoopRun, statics: Mapping[str, Any], video_fps: float | None) -> None:
        self.run, self.statics = run, dict(statics)
        self.name = video_name(self.statics[keys.NODEID])
        self.trace: list[TraceStep] = []
        self.success_step: int | None = None
        self.reported = False
        self.started_ns = time.perf_counter_ns()
        self.states = StateRecorder()
        self.video = None
        if video_fps is not None:
            self.video = VideoRecorder(run.run_dir / VIDEOS / f"{self.name}.mp4", video_fps)
        unfilmed = {keys.VIDEO_MISSING: NOT_RENDERED if self.video is None else UNFILMED}
        self.marker = mark(run.run_dir, self.name, crashed_record(self.statics, DIED, unfilmed))
        self._obs: Any = None
        self._step_ns = 0

    def observed(self, obs: Any, frame: np.ndarray | None) -> None:
        """What the env showed after a reset or a step (and its rendered frame, if any)."""
        self._obs = obs
        if self.video is not None and frame is not None:
            self.video(0, {keys.IMAGE: frame})

    def stepping(self) -> None:
        """The loop asked for a step: its wall time starts, and the observation it acts on counts
        (what a harness observer sees)."""
        self._step_ns = time.perf_counter_ns() - self.started_ns
        if self._obs is not None:
            self.states(self._step_ns, as_observation(self._obs))

    def stepped(self, action: Any, reward: float, success: bool | None) -> None:
        self.reported = self.reported or success is not None
        command = self.run.command(action)
        self.trace.append(TraceStep(self._step_ns, command, float(reward), bool(success)))
        if success and self.success_step is None:
            self.success_step = len(self.trace) - 1

    def end(self, how: str, error: str | None = None) -> None:
        """Records the episode: solved if the env said success, else unsolved (the env or the
        loop ended it: `how`), or an error when the loop broke in it (`error`)."""
        steps = len(self.trace)
        if not steps and error is None:  # reset, then left alone: no episode ran
            if self.video is not None:
                self.video.restart()
            self.marker.unlink(missing_ok=True)
            return
        if error is not None:
            outcome = Outcome(OutcomeKind.ERROR, f"{error} (after {steps} steps)")
        elif self.success_step is not None:
            outcome = Outcome(OutcomeKind.SOLVED, f"success at step {self.success_step}")
        else:
            outcome = Outcome(OutcomeKind.UNSOLVED, f"{how} after {steps} steps")
        wall_s = (time.perf_counter_ns() - self.started_ns) / 1e9
        # The trace's clock: the rate the env declared (its video's), else the loop's own pace;
        # step k starts at k periods, as a harness rollout's does.
        clock_hz = self.statics[keys.CONTROL_HZ] or (steps / wall_s if steps else None)
        period_ns = 0 if clock_hz is None else control_period_ns(clock_hz)
        episode = Episode(
            statics=self.statics,
            trace=tuple(step._replace(time_ns=k * period_ns) for k, step in enumerate(self.trace)),
            outcome=outcome,
            sim_s=0.0,
            wall_s=wall_s,
            success_step=self.success_step,
            success_reported=self.reported,
            action_bounds=self.run.action_bounds,
        )
        added: dict[str, Any] = {keys.SIM_S: None}  # the loop's time is wall time, as it went
        if self.trace:
            trace_name = f"{TRACES}/{self.name}.json"
            clocked = dataclasses.replace(
                episode, statics={**self.statics, keys.CONTROL_HZ: clock_hz}
            )
            write_trace(self.run.run_dir / trace_name, rollout_trace(clocked, self.states))
            added[keys.ROLLOUT_TRACE] = trace_name
        if self.video is not None:
            added.update(video_fields(self.video.close(), f"{VIDEOS}/{self.name}.mp4"))
        else:
            added[keys.VIDEO_MISSING] = NOT_RENDERED
        self.run.write(rollout_record({}, episode, added))
        self.marker.unlink(missing_ok=True)


class LoopRun:
    """The run directory one wrapped env records into (several may share one: a loop per arm).
    Each ended episode's record is appended and flushed at once; run.json says how it ran.
    In a blinded run (`blind`, as every loop recording into it says) the arm is its letter and
    the policy's description is sealed away, as a `--blind` pytest run's, until `report unblind`."""

    def __init__(
        self,
        run_dir: Path,
        statics: Mapping[str, Any],
        action_space: Any = None,
        control_hz: float | None = None,
        blind: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self.statics = {**statics, keys.CONTROL_HZ: control_hz}  # None: the env did not say
        # in every episode's id (runs merged never collide), and the arm's letter if blinded
        named = telling_texts(statics.get(keys.ARM), statics.get(keys.POLICY)) if blind else []
        self.run_id, arm = self._write_run_info(blind)
        if arm is not None:
            self.statics[keys.ARM] = arm
        self.sealer = Sealer(run_dir) if blind else None
        # a blinded record's reason (an exception's message) names no arm nor its policy
        self._names = whole_words(named)
        self.writer = ResultsWriter(run_dir)
        self.next_index = self._recorded()  # a loop recording into a run again goes on counting
        low, high = getattr(action_space, "low", None), getattr(action_space, "high", None)
        self.action_bounds = None if low is None or high is None else (low, high)
        self.composite = action_space if isinstance(action_space, Dict | Tuple) else None
        self.never_reported: set[str] = set()  # tasks whose env stepped and never said success

    def open(self, scene: Mapping[str, Any] | None, video_fps: float | None = None) -> OpenEpisode:
        """A new episode of `scene` (None: the loop did not say which scene)."""
        with self.locked() as claimed:  # its marker, too, while no loop closes the run
            index = self._claim_index(claimed)
            statics = {**self.statics, keys.ROLLOUT_INDEX: index, keys.SCENE: scene}
            statics[keys.NODEID] = nodeid(statics, self.run_id, index)
            if self.sealer is not None:  # its marker, record and trace keep only the letter
                statics = self.sealer.seal(statics)
            return OpenEpisode(self, statics, video_fps)

    def command(self, action: Any) -> np.ndarray:
        """An action as the trace keeps it: a Dict or Tuple space's flattened, as gymnasium
        flattens it (a Discrete part one-hot), any other as its array."""
        if self.composite is not None:
            return flatten(self.composite, action).astype(np.float32)
        return np.asarray(action)

    def write(self, record: Mapping[str, Any]) -> None:
        reason = record.get(keys.REASON)
        if self._names is not None and isinstance(reason, str):
            hidden = f"<arm {self.statics[keys.ARM]}>"
            record = {**record, keys.REASON: self._names.sub(hidden, reason)}
        self.writer.write(record)
        if record[keys.STEPS] and record[keys.SUCCESS_REPORTED] is False:
            self.never_reported.add(record[keys.TASK])

    def close(self) -> None:
        """Writes run.json's fingerprint; the report is the caller's to write, both while it
        holds `locked()`."""
        self.writer.close()
        if self.sealer is not None:
            self.sealer.close()
        with contextlib.suppress(OSError):  # no episode of any loop is open in it
            (self.run_dir / UNFINISHED).rmdir()
        for task in sorted(self.never_reported):
            print(
                f"policybench.wrap: {self.statics[keys.EVAL]} / {task}: the env never said "
                "whether the task was achieved (no success key in its step info), so its "
                "episodes count as unsolved",
                file=sys.stderr,
            )
        if (self.run_dir / RESULTS).is_file():
            run = RunInfo.load(self.run_dir)
            records = read_results(self.run_dir / RESULTS).records
            protocol = Protocol.of(records, run.settings if run else None)
            if run is not None:
                dataclasses.replace(run, fingerprint=protocol.as_json()).write(self.run_dir)

    @contextlib.contextmanager
    def locked(self) -> Iterator[IO[str]]:
        """The run directory's claimed episode indexes, held under a lock against the other loops
        recording into it (in this process or others) while they claim one, or write run.json,
        the summary or the report (not re-entrant: one holder per process at a time)."""
        with open_append(self.run_dir / INDEXES, readable=True) as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            file.seek(0)
            yield file

    def _claim_index(self, file: IO[str]) -> int:
        """The next episode index of this loop's Eval and arm in the run directory, from the
        `locked()` file: loops recording into one directory at once never share an index, so
        never an id, a trace or a video."""
        claimed = json.loads(file.read() or "{}")
        mine = json.dumps([self.statics[keys.EVAL], self.statics.get(keys.ARM)])
        index = max(claimed.get(mine, 0), self.next_index)
        claimed[mine] = self.next_index = index + 1
        file.seek(0)
        file.truncate()
        file.write(json.dumps(claimed, sort_keys=True))
        file.flush()
        return index

    def _recorded(self) -> int:
        """How many episodes of this loop's Eval and arm the run directory holds already."""
        if not self.writer.path.is_file():
            return 0
        mine = (self.statics[keys.EVAL], self.statics.get(keys.ARM))
        records = read_results(self.writer.path).records
        return sum((r[keys.EVAL], r.get(keys.ARM)) == mine for r in records)

    def _write_run_info(self, blind: bool) -> tuple[str, str | None]:
        """run.json as a pytest run writes it, with the first loop's command line (`command`)
        and every distinct command line of the loops recording into the directory (the setting
        `commands`, in the order they first recorded: how each arm was made); the arms of every
        loop recording into the directory, in the order they started (letters in their order,
        and blinding.json, when blinded). Returns the run's id (the directory's name when the
        first loop recorded into it) and the arm as the records name it."""
        with self.locked():
            run = RunInfo.load(self.run_dir)
            blinding = Blinding.load(self.run_dir)
            if run is not None:
                _refuse_other_blinding(self.run_dir, run.settings, blinding is not None, blind)
            policy = (self.statics[keys.POLICY] or {}).get(keys.POLICY_NAME, NOT_DESCRIBED)
            command = shlex.join([Path(sys.executable).name, *sys.argv])
            if run is None:
                said = BLINDED if blind else policy
                settings = {keys.POLICY: said, keys.RUN_UID: secrets.token_hex(8)}
                run = RunInfo.now(self.run_dir.name, [], Path.cwd(), settings)
                run = dataclasses.replace(run, command=BLINDED if blind else command)
            if not blind:  # a blinded run's commands would name its arms: blinding.json's
                commands = list(run.settings.get(keys.COMMANDS) or [run.command])
                commands += [] if command in commands else [command]
                run = dataclasses.replace(run, settings={**run.settings, keys.COMMANDS: commands})
            arm = self.statics.get(keys.ARM)
            arms = list(run.settings.get(ARMS) or [])
            if blind:  # the command, arm and policy as typed are kept aside in blinding.json
                blinding, arm = (blinding or Blinding(secrets.token_hex(8), {})).joined(
                    str(arm), policy
                )
                blinding.write(self.run_dir, command, joined=True)
                settings = {**run.settings, ARMS: sorted(blinding.letters)}
                run = dataclasses.replace(run, settings={**settings, BLINDING: blinding.digest})
            elif arm is not None and arm not in arms:
                settings = {**run.settings, ARMS: [*arms, arm]}
                if arms:  # an A/B run's policies, one per arm in their order, as a pytest run's
                    listed = run.settings.get(keys.POLICY)
                    listed = listed if isinstance(listed, list) else [listed]
                    settings[keys.POLICY] = [*listed, policy]
                run = dataclasses.replace(run, settings=settings)
            run.write(self.run_dir)  # whole or not at all
            return run.run_id, arm


def _refuse_other_blinding(
    run_dir: Path, settings: Mapping[str, Any], blinded: bool, blind: bool
) -> None:
    """Every loop recording into one run directory blinds it as its first loop did."""
    if settings.get(UNBLINDED) and blind:
        raise ValueError(
            f"policybench.wrap: the run in {run_dir} is unblinded already (report unblind), so "
            "blind=True would hide nothing; record the blinded arms into a new run_dir"
        )
    if blinded != blind and not settings.get(UNBLINDED):
        was = "blinded (blind=True)" if blinded else "not blinded"
        raise ValueError(
            f"policybench.wrap: the run in {run_dir} was started {was} by its first loop, and "
            f"this loop asks blind={blind}; every loop recording into one run directory blinds "
            f"it alike: wrap with blind={blinded}, or record into another run_dir"
        )


def statics_of(
    eval: str,
    task: str,
    instruction: str | None,
    policy: Mapping[str, Any] | None,
    arm: str | None,
    packages: Sequence[str],
) -> dict[str, Any]:
    """What every episode of a wrapped loop records of itself before it runs."""
    distributions = ["policybench", "gymnasium", *packages]
    statics = {
        keys.EVAL: eval,
        keys.TASK: task,
        keys.INSTRUCTION: instruction,
        keys.POLICY: None if policy is None else dict(policy),
        keys.PACKAGES: {name: installed_version(name) for name in distributions},
    }
    return statics if arm is None else {**statics, keys.ARM: arm}


def nodeid(statics: Mapping[str, Any], run_id: str, index: int) -> str:
    """A wrapped episode's id: its scene's fields as a planned rollout's id shows them, then the
    run it is of and its index there (`episode=<run id>:<index>`). Unique in its run (a loop may
    run a scene twice) and across runs: a loop plans no rollouts, so an episode of another run
    is another sample, never a rerun of this one, and `report merge` keeps both."""
    scene = {k: v for k, v in (statics[keys.SCENE] or {}).items() if k != keys.TASK}
    fields = "".join(f"/{name}={value}" for name, value in scene.items())
    arm = statics.get(keys.ARM)
    policy = "" if arm is None else f"/policy={arm}"
    return f"{statics[keys.EVAL]}::{statics[keys.TASK]}{fields}/episode={run_id}:{index}{policy}"
