"""`policybench.evaluate(model, evals=[...])`: the pytest command's evaluation from inside a
training loop, the model served from the caller's memory to a child pytest run on loopback."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.envserver import remote
from policybench.evaluate_run import (
    CALL_VARIABLE,
    EVALS_VARIABLE,
    PIPE_VARIABLE,
    RUN_FILE,
    RUNNER,
)
from policybench.options import API_KEY_VARIABLE, ENV_URL
from policybench.policy.chunk_player import ChunkPolicy
from policybench.registry import PolicySettings, as_policy
from policybench.report.summary import OVERALL, Summary
from policybench.run.arms import blinded_command
from policybench.run.command_line import redacted_command
from policybench.run.layout import SUMMARY
from policybench.serve.client import HIDDEN, without_secrets
from policybench.serve.command import action_space_of
from policybench.serve.server import PolicyServer, ServedModel, ServerConfig, ServerThread
from policybench.spec import Eval
from policybench.suites import eval_named
from policybench.trackers import check_trackers, log_run

OUTPUT = "output.txt"  # the child run's output, beside its test file
FOLDER_PREFIX = "policybench-evaluate-"  # the child run's folder, in the system's temp dir
IN_USE = "in-use.lock"  # locked (flock) in a folder while its evaluator or its run lives


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate` found: the summary the run wrote to its summary.json (success per Eval
    and task with intervals, errors; per arm in an A/B run), the run directory, and the child
    run's exit status and output."""

    summary: Summary
    run_dir: Path
    returncode: int
    output: str

    @property
    def arms(self) -> list[str]:
        """An A/B run's arms (e.g. `--latency-sweep`'s settings), in the run's order; [] in a
        run of one policy."""
        return list(dict.fromkeys(str(row.arm) for row in self.summary.arms))

    def success_rate(self, eval: str | None = None, arm: str | None = None) -> float | None:
        """Success over every rollout, or over one Eval's; in an A/B run, of one arm's (a rate
        pooled over arms mixes the policies compared, so one must be named)."""
        if self.arms and arm is None:
            raise ValueError(
                f"this run compared arms {self.arms}; a success rate pooled over them mixes "
                f"what was compared: name one, e.g. success_rate(arm={self.arms[0]!r})"
            )
        if arm is not None and arm not in self.arms:
            raise ValueError(f"this run has no arm {arm!r}; its arms are {self.arms or 'none'}")
        rows = (*self.summary.evals, self.summary.overall)
        if arm is not None:
            rows = tuple(row for row in self.summary.arms if row.arm == arm)
        wanted = OVERALL if eval is None else eval
        found = [row for row in rows if row.eval == wanted]
        if not found:
            known = sorted(row.eval for row in rows if row.eval != OVERALL)
            raise ValueError(f"this run evaluated no Eval {eval!r}; it evaluated {known}")
        return found[0].stats.tally.rate


def evaluate(
    model: Any,
    evals: str | Eval | Sequence[str | Eval] = ("pusht",),
    rollouts: int = 10,
    workers: int = 2,
    seed: int = 0,
    report_dir: str | Path | None = None,
    pytest_args: Sequence[str] = (),
    env_url: str | None = None,
    env_api_key: str | None = None,
    quiet: bool = False,
    log_to: Sequence[str] = (),
    log_name: str | None = None,
    log_step: int | None = None,
) -> Evaluation:
    """Evaluates `model` (a Model, a Policy over a Model, or a factory as `--policy module:attr`
    takes) on `evals` (names or Evals, or one) as `pytest --policy=openpi` would: a child pytest
    run with `workers`
    processes (0: one) reaches the model through policybench's batching server on loopback, in
    this process, so the model never leaves it and no checkpoint is written. `report_dir`:
    where the run is written (default reports/ here). `env_url`, `env_api_key`: pytest's --env-url
    and --env-api-key, where isolated Evals' envs are built (the key reaches the run through its
    environment alone). Blocks until the run ends, printing its progress line to stderr every
    few seconds (`quiet`: nothing); the run stops, as on Ctrl-C, when this process ends or the
    call is interrupted. `log_to` ("wandb", "mlflow", "tensorboard"): trackers the results are
    logged to from this process, into a run already open there (a training loop's) at
    `log_step`, else a new one named `log_name` (default: the run's id)."""
    named = _checked(model, evals, rollouts, workers, env_url, log_to)
    reports = Path(report_dir if report_dir is not None else "reports").resolve()
    with remote.given(env_url, env_api_key):  # this process's envs, and the run's
        served = {e.name: _served(model, e, PolicySettings(seed=seed)) for e in named}
        shown = [f"<model {_model_name(served)!r}>", f"evals={list(served)!r}"]
        shown += [f"rollouts={rollouts}", f"workers={workers}", f"seed={seed}"]
        shown += [f"report_dir={str(reports)!r}"]
        shown += [f"pytest_args={_shown_args(pytest_args)!r}"] if pytest_args else []
        shown += [f"env_url={without_secrets(env_url)!r}"] if env_url is not None else []
        shown += [f"env_api_key={HIDDEN!r}"] if env_api_key is not None else []
        call = f"policybench.evaluate({', '.join(shown)})"
        child = ["--rollouts", str(rollouts), "--seed", str(seed), "--report-dir", str(reports)]
        if not quiet and not any(str(arg).startswith("--status-every") for arg in pytest_args):
            child += ["--status-every", f"{PROGRESS_EVERY_S:g}"]
        args = [*child, "-n", str(workers), *pytest_args]
        evaluation = _evaluate(served, call, args, reports, echo=not quiet)
    _logged(evaluation, log_to, log_name, log_step, quiet)
    return evaluation


def _checked(
    model: Any,
    evals: str | Eval | Sequence[str | Eval],
    rollouts: int,
    workers: int,
    env_url: str | None,
    log_to: Sequence[str],
) -> list[Eval]:
    """`evaluate`'s Evals, once its arguments are seen to be sound (else what is wrong)."""
    if isinstance(model, Eval):
        raise TypeError(
            "evaluate(model, evals=...) evaluates a model; to run a test once per planned "
            "rollout of Evals, decorate it with @policybench.parametrize(*evals)"
        )
    if isinstance(evals, (str, Eval)):
        evals = [evals]
    named = [eval_named(e) if isinstance(e, str) else e for e in evals]
    if not named or rollouts < 1 or workers < 0:
        raise ValueError(
            "evaluate needs one Eval or more, rollouts >= 1 and workers >= 0; got "
            f"evals={evals!r}, rollouts={rollouts}, workers={workers}"
        )
    unnamed = [e.name for e in named if _registered(e.name) is not e]
    if unnamed:
        raise ValueError(
            f"evaluate runs registered Evals (policybench list), by name or object; {unnamed} "
            "are not registered: register their module under the policybench.suites entry point"
        )
    why = ENV_URL.refusal(env_url)
    if why is not None:
        raise ValueError(why)
    check_trackers(list(log_to))
    return named


def _logged(
    evaluation: Evaluation,
    log_to: Sequence[str],
    name: str | None,
    step: int | None,
    quiet: bool,
) -> None:
    """Logs an evaluation's results to the trackers of `log_to` (trackers.py), saying where."""
    if not log_to:
        return
    for line in log_run(evaluation.run_dir, list(log_to), name, step):
        if not quiet:
            print(f"policybench: logged to {line}", file=sys.stderr)


def _evaluate(
    served: dict[str, ServedModel], call: str, args: list[str], reports: Path, echo: bool = False
) -> Evaluation:
    """Runs the child pytest run with `args` against a server of `served`, in this process;
    run.json names the model and `call`."""
    key = secrets.token_urlsafe(16)
    server = PolicyServer(lambda name, ref: _pick(served, name), ServerConfig(port=0, api_key=key))
    told = json.dumps({keys.POLICY: _model_name(served), keys.COMMAND: call})
    with (
        tempfile.TemporaryDirectory(prefix=FOLDER_PREFIX) as folder,
        _in_use(Path(folder)) as lock,
        ServerThread(server) as thread,
    ):
        (Path(folder) / "test_evaluate.py").write_text(RUNNER)
        command = [sys.executable, "-m", "pytest", "test_evaluate.py", "-p", "no:cacheprovider"]
        command += ["-p", "policybench.evaluate_run", "--rootdir", folder]
        command += ["--policy=openpi", "--policy-url", thread.url, *args]
        env = {**os.environ, API_KEY_VARIABLE: key, EVALS_VARIABLE: ",".join(served)}
        returncode = _run_child(command, Path(folder), {**env, CALL_VARIABLE: told}, lock, echo)
        output = (Path(folder) / OUTPUT).read_text(errors="replace")
        said = Path(folder) / RUN_FILE
        run = Path(said.read_text()) if said.is_file() else None
    if run is None or not (run / SUMMARY).is_file():
        raise RuntimeError(
            f"the evaluation run (exit status {returncode}) wrote no run with a {SUMMARY} "
            f"under {reports}; its output ends:\n{output[-3000:]}"
        )
    return Evaluation(Summary.of_run(run), run, returncode, output)


def _run_child(
    command: list[str], folder: Path, env: dict[str, str], lock: int, echo: bool = False
) -> int:
    """Runs the child run to its end, its output into `folder` (its progress lines echoed to
    stderr as they come, with `echo`). It holds the read end of a pipe that only this process
    writes to: when this process ends, however it ends, or this call is interrupted, the pipe
    closes and the run stops as on Ctrl-C, writing what it has."""
    read, write = os.pipe()
    with os.fdopen(write, "wb") as evaluator, (folder / OUTPUT).open("wb") as output:
        try:
            child = subprocess.Popen(
                command,
                cwd=folder,
                env={**env, PIPE_VARIABLE: str(read)},
                stdout=output,
                stderr=subprocess.STDOUT,
                pass_fds=(read, lock),  # the run holds the folder's lock while it lives
            )
        finally:
            os.close(read)
        said = 0  # how far into the output its progress lines were echoed
        try:
            while True:
                try:
                    code = child.wait(timeout=PROGRESS_EVERY_S / 5)
                except subprocess.TimeoutExpired:
                    said = _echoed(folder / OUTPUT, said) if echo else said
                    continue
                if echo:
                    _echoed(folder / OUTPUT, said)
                return code
        except BaseException:
            evaluator.close()
            child.wait()
            raise


PROGRESS_EVERY_S = 5.0  # how often evaluate() tells how its run goes
PROGRESS = "policybench: "  # the run's progress lines start so


def _echoed(output: Path, start: int) -> int:
    """Prints the run's progress lines written to `output` from byte `start` on (whole lines
    only) to stderr; returns where it stopped."""
    with output.open("rb") as file:
        file.seek(start)
        written = file.read()
    whole = written[: written.rfind(b"\n") + 1]
    for line in whole.decode(errors="replace").splitlines():
        line = line.strip().rsplit("\r", 1)[-1]
        if line.startswith(PROGRESS) and " done " in line:
            print(line, file=sys.stderr, flush=True)
    return start + len(whole)


@contextlib.contextmanager
def _in_use(folder: Path) -> Iterator[int]:
    """Locks `folder` (a descriptor of its lock, for the run to hold too) for as long as this
    evaluation or its run lives, first removing the folders of earlier evaluations that nobody
    holds: the run removes its folder when its evaluator ended first, but not when both were
    killed at once."""
    for stale in folder.parent.glob(f"{FOLDER_PREFIX}*"):
        try:
            with (stale / IN_USE).open("rb") as held:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held, someone else's, or not an evaluation's folder yet
            continue
        shutil.rmtree(stale, ignore_errors=True)
    with (folder / f".{IN_USE}").open("wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (folder / f".{IN_USE}").rename(folder / IN_USE)  # locked before any sweep can open it
        yield lock.fileno()


def _shown_args(args: Sequence[str]) -> list[str]:
    """pytest arguments as the run's files show a command line: secrets hidden, and the
    policies too under --blind."""
    shown = redacted_command(args)
    blind = any(arg.partition("=")[0] == "--blind" for arg in args)
    return blinded_command(shown) if blind else shown


def _model_name(served: dict[str, ServedModel]) -> str:
    return ", ".join(sorted({str(s.model.name) for s in served.values()}))


def _registered(name: str) -> Eval | None:
    from policybench.suites import registered_evals

    return registered_evals().get(name)


def _served(model: Any, eval: Eval, settings: PolicySettings) -> ServedModel:
    """The model as the server answers `eval`'s rollouts with it."""
    name = getattr(model, "name", type(model).__name__)
    policy = as_policy(name, model, eval, settings, lambda: action_space_of(eval))
    if not isinstance(policy, ChunkPolicy):
        raise TypeError(
            f"evaluate serves a Model (name, open, describe), a factory that returns one, or a "
            f"Policy policybench plays a Model with; {name!r} is a {type(policy).__name__} with "
            "sessions of its own, which cannot be served: run it with pytest --policy module:attr"
        )
    return ServedModel(policy.model, eval.control_hz, eval.codecs, policy.codec)


def _pick(served: dict[str, ServedModel], name: str | None) -> ServedModel:
    if name not in served:
        raise LookupError(f"this evaluation serves {sorted(served)}, not {name!r}")
    return served[name]
