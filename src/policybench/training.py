"""`policybench.evaluate(model, evals=[...])`: the pytest command's evaluation from inside a
training loop, the model served from the caller's memory to a child pytest run on loopback."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policybench.envserver import remote
from policybench.options import API_KEY_VARIABLE, ENV_URL
from policybench.policy.chunk_player import ChunkPolicy
from policybench.registry import PolicySettings, PolicyUnavailable, as_policy
from policybench.report.summary import SUMMARY, Summary
from policybench.serve.command import action_space_of
from policybench.serve.server import PolicyServer, ServedModel, ServerConfig, ServerThread
from policybench.spec import Eval
from policybench.suites import eval_named

# The child run's one test: every planned rollout of the Evals named in POLICYBENCH_EVALS.
RUNNER = """
import os

import policybench
from policybench.suites import eval_named

EVALS = [eval_named(name) for name in os.environ["POLICYBENCH_EVALS"].split(",")]


@policybench.parametrize(*EVALS)
def test_evaluate(rollout, harness):
    harness(rollout)
"""


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate` found: the summary the run wrote to its summary.json (success per Eval
    and task with intervals, errors), the run directory, and the child run's exit status and
    output."""

    summary: Summary
    run_dir: Path
    returncode: int
    output: str

    def success_rate(self, eval: str | None = None) -> float | None:
        """Success over every rollout, or over one Eval's."""
        if eval is None:
            return self.summary.overall.stats.tally.rate
        (row,) = [row for row in self.summary.evals if row.eval == eval]
        return row.stats.tally.rate


def evaluate(
    model: Any,
    evals: Sequence[str | Eval] = ("pusht",),
    rollouts: int = 10,
    workers: int = 2,
    seed: int = 0,
    report_dir: str | Path | None = None,
    pytest_args: Sequence[str] = (),
    env_url: str | None = None,
    env_api_key: str | None = None,
) -> Evaluation:
    """Evaluates `model` (a Model, a Policy over a Model, or a factory as `--policy module:attr`
    takes) on `evals` as `pytest --policy=openpi` would: a child pytest run with `workers`
    processes (0: one) reaches the model through policybench's batching server on loopback, in
    this process, so the model never leaves it and no checkpoint is written. `report_dir`:
    where the run is written (default reports/ here). `env_url`, `env_api_key`: pytest's --env-url
    and --env-api-key, where isolated Evals' envs are built (the key reaches the run through its
    environment alone). Blocks until the run ends."""
    if isinstance(model, Eval):
        raise TypeError(
            "evaluate(model, evals=...) evaluates a model; to run a test once per planned "
            "rollout of Evals, decorate it with @policybench.parametrize(*evals)"
        )
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
    with remote.given(env_url, env_api_key):  # this process's envs, and the run's
        return _evaluate(model, named, rollouts, workers, seed, report_dir, pytest_args)


def _evaluate(
    model: Any,
    named: list[Eval],
    rollouts: int,
    workers: int,
    seed: int,
    report_dir: str | Path | None,
    pytest_args: Sequence[str],
) -> Evaluation:
    settings = PolicySettings(seed=seed)
    served = {e.name: _served(model, e, settings) for e in named}
    key = secrets.token_urlsafe(16)
    server = PolicyServer(lambda name, ref: _pick(served, name), ServerConfig(port=0, api_key=key))
    reports = Path(report_dir if report_dir is not None else "reports").resolve()
    with (
        tempfile.TemporaryDirectory(prefix="policybench-evaluate-") as folder,
        ServerThread(server) as thread,
    ):
        (Path(folder) / "test_evaluate.py").write_text(RUNNER)
        command = [sys.executable, "-m", "pytest", "test_evaluate.py", "-p", "no:cacheprovider"]
        command += ["--rootdir", folder, "--policy=openpi", "--policy-url", thread.url]
        command += ["--rollouts", str(rollouts), "--seed", str(seed)]
        command += ["--report-dir", str(reports), "-n", str(workers), *pytest_args]
        before = _runs(reports)
        env = {**os.environ, API_KEY_VARIABLE: key, "POLICYBENCH_EVALS": ",".join(served)}
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    made = sorted(_runs(reports) - before)
    if len(made) != 1 or not (made[0] / SUMMARY).is_file():
        raise RuntimeError(
            f"the evaluation run (exit status {done.returncode}) wrote no run with a {SUMMARY} "
            f"under {reports}; its output ends:\n{output[-3000:]}"
        )
    return Evaluation(Summary.of_run(made[0]), made[0], done.returncode, output)


def _registered(name: str) -> Eval | None:
    from policybench.suites import registered_evals

    return registered_evals().get(name)


def _served(model: Any, eval: Eval, settings: PolicySettings) -> ServedModel:
    """The model as the server answers `eval`'s rollouts with it."""
    name = getattr(model, "name", type(model).__name__)
    policy = as_policy(name, model, eval, settings, lambda: action_space_of(eval))
    if not isinstance(policy, ChunkPolicy):
        raise PolicyUnavailable(
            f"{type(model).__name__} is a {type(policy).__name__}, not a Model: evaluate serves "
            "a Model (open, describe, name) or a Policy made of one"
        )
    return ServedModel(policy.model, eval.control_hz, eval.codecs, policy.codec)


def _pick(served: dict[str, ServedModel], name: str | None) -> ServedModel:
    if name not in served:
        raise LookupError(f"this evaluation serves {sorted(served)}, not {name!r}")
    return served[name]


def _runs(reports: Path) -> set[Path]:
    if not reports.is_dir():
        return set()
    return {path for path in reports.iterdir() if path.is_dir() and not path.is_symlink()}
