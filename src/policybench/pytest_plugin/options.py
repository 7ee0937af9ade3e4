"""Command-line options, and the run settings read from them (once per process; a worker takes
the policies, an A/B run's arms, as the controller resolved them)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.policy.chunk_player import ChunkAnchor
from policybench.policy.latency import InferenceLatency
from policybench.pytest_plugin.arms import (
    BALANCED,
    Arm,
    Assignment,
    arm_settings,
    blinded,
    parse_arms,
)
from policybench.pytest_plugin.workers import from_controller, hand_to_workers, is_worker
from policybench.registry import (
    LEROBOT_PREFIX,
    OPENPI,
    SCRIPTED,
    PolicySettings,
    check_policy_name,
)
from policybench.report.arms import BLINDING_FILE, Blinding
from policybench.report.results import resolve_run
from policybench.serve.client import Endpoint

SETTINGS = pytest.StashKey["RunSettings"]()
DEFAULT_MAX_ENVS = 1  # a LIBERO env alone is ~1.5 GB; task-affine scheduling keeps reuse high
DEFAULT_RETRIES = 2
# What the controller hands workers: the arms as it resolved them (lettered under --blind),
# the shared server.
ARMS, SHARED_URL, SHARED_KEY = "arms", "shared_server_url", "shared_server_api_key"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench", "policybench: evaluate robot policies")
    group.addoption(
        "--policy",
        action="append",
        default=[],
        metavar="[LABEL=]POLICY[@URL]",
        help="policy to evaluate: scripted (default), random, openpi (served), lerobot:PATH (a "
        "LeRobot checkpoint directory), module:attr (your own Model, Policy or factory), or an "
        "installed policy name. Repeat it (or give a comma list) for an A/B run: every scene "
        "runs under each policy, as items `task/seed=3/policy=LABEL` side by side. LABEL names "
        "an arm (default: the policy's name, or a checkpoint's directory); @ws://HOST:PORT is "
        "where that arm is served (openpi, or `policybench serve`)",
    )
    group.addoption(
        "--assign",
        choices=[BALANCED],
        default=None,
        help="with two or more policies: run each planned scene under one of them, balanced "
        "within each task and drawn from --assign-seed (for scenes that cost too much to run "
        "twice); the comparison is then unpaired",
    )
    group.addoption(
        "--assign-seed",
        type=int,
        default=0,
        metavar="S",
        help="with --assign: the seed of the draw (default 0); the same seed, the same arms",
    )
    group.addoption(
        "--blind",
        nargs="?",
        const="",
        default=None,
        metavar="KEY",
        help="with two or more policies: show them as A, B, ... in item ids, results and "
        "reports (lettered in an order shuffled by KEY, default a random one) until "
        "`policybench report unblind RUN`; give every shard of one run the same KEY",
    )
    group.addoption(
        "--policy-device",
        default="cpu",
        help="where a local model with weights (lerobot:PATH) runs: cpu (default), cpu-onednn "
        "(lerobot-eval's CPU kernels), cuda or mps",
    )
    group.addoption("--rollouts", type=int, default=3, help="rollouts per task (default 3)")
    group.addoption("--seed", type=int, default=0, help="base seed of the rollout plan (default 0)")
    group.addoption(
        "--inference-latency",
        default="none",
        help="simulated inference latency: none (default), seconds (e.g. 0.1), or measured",
    )
    group.addoption(
        "--chunk-anchor",
        default=ChunkAnchor.OBSERVATION.value,
        choices=[anchor.value for anchor in ChunkAnchor],
        help="where a late chunk starts: at its observation (default) or at its arrival",
    )
    group.addoption(
        "--replan-every",
        type=int,
        default=None,
        help="ask for a new chunk after this many played waypoints (default: when drained)",
    )
    group.addoption(
        "--suite",
        action="append",
        default=[],
        help="only run Evals whose name contains this text (repeatable)",
    )
    group.addoption(
        "--retry-errors",
        type=int,
        default=DEFAULT_RETRIES,
        metavar="N",
        help="run a rollout again from its start, up to N times, when it ends in an "
        "infrastructure error: a policy server gone or too slow, a worker that crashed "
        f"(default {DEFAULT_RETRIES})",
    )
    group.addoption(
        "--max-envs-per-worker",
        type=int,
        default=DEFAULT_MAX_ENVS,
        metavar="N",
        help="live envs a process keeps at most; the least recently used is closed "
        f"(default {DEFAULT_MAX_ENVS})",
    )
    group.addoption(
        "--report-dir",
        default="reports",
        help="where run reports are written, relative to the rootdir (default reports/)",
    )


@dataclass(frozen=True)
class RunSettings:
    """`policy` is the first arm's policy: the run's one policy, unless it is an A/B run."""

    policy: str
    rollouts: int
    suites: tuple[str, ...]
    report_dir: Path
    policy_settings: PolicySettings
    max_envs: int = DEFAULT_MAX_ENVS
    retry_errors: int = DEFAULT_RETRIES
    arms: tuple[Arm, ...] = ()  # two or more in an A/B run
    assignment: Assignment | None = None  # scenes given one arm each (--assign)
    blinding: Blinding | None = None  # what the letters of a --blind run stand for

    @property
    def ab(self) -> bool:
        """Whether this run compares policies (items and records then name their arm)."""
        return len(self.arms) > 1

    def policy_settings_of(self, arm: Arm) -> PolicySettings:
        """How `arm` is played: the run's settings, served where the arm is."""
        return replace(self.policy_settings, endpoint=arm.endpoint)

    @property
    def policy_shown(self) -> str:
        """The policy, or the arms, as the terminal and error messages name them."""
        return ", ".join(arm.label for arm in self.arms) if self.ab else self.policy


def protocol_settings(settings: RunSettings) -> dict[str, Any]:
    """The run settings that say which policy ran and how it was played (run.json keeps them;
    record.protocol says which of them make the protocol)."""
    policy = settings.policy_settings
    return {
        keys.POLICY: settings.policy,
        "base_seed": policy.seed,
        keys.INFERENCE_LATENCY: str(policy.latency),
        keys.CHUNK_ANCHOR: policy.anchor.value,
        "replan_every": policy.replan_every,
        **arm_settings(settings.arms, settings.assignment, settings.blinding),
    }


def settings_of(config: pytest.Config) -> RunSettings:
    if SETTINGS not in config.stash:
        config.stash[SETTINGS] = read_settings(config)
    return config.stash[SETTINGS]


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):
        hand_to_workers(config, ARMS, [arm.spec for arm in settings_of(config).arms])


def read_settings(config: pytest.Config) -> RunSettings:
    """The run's settings; bad values are a UsageError that says what is accepted."""
    handed = from_controller(config, ARMS)
    try:
        if handed is not None:  # a worker: the arms as the controller resolved and lettered them
            arms, blinding = parse_arms(handed), None
        else:
            arms, blinding = _controller_arms(config)
        for arm in arms:
            check_policy_name(arm.policy, config.invocation_params.dir)
        latency = InferenceLatency.parse(config.getoption("inference_latency"))
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    assignment = None
    if config.getoption("assign") is not None:
        assignment = Assignment(config.getoption("assign"), config.getoption("assign_seed"))
    if len(arms) < 2 and (assignment is not None or config.getoption("blind") is not None):
        raise pytest.UsageError(
            "--assign and --blind compare policies: give two or more, e.g. "
            "--policy scripted --policy random"
        )
    arms = tuple(replace(arm, endpoint=endpoint_of(config, arm, arms[0])) for arm in arms)
    rollouts = config.getoption("rollouts")
    if rollouts < 0:
        raise pytest.UsageError(f"--rollouts must be >= 0, got {rollouts}")
    retry_errors = config.getoption("retry_errors")
    if retry_errors < 0:
        raise pytest.UsageError(f"--retry-errors must be >= 0, got {retry_errors}")
    max_envs = config.getoption("max_envs_per_worker")
    if max_envs < 1:
        raise pytest.UsageError(f"--max-envs-per-worker must be >= 1, got {max_envs}")
    replan_every = config.getoption("replan_every")
    if replan_every is not None and replan_every < 1:
        raise pytest.UsageError(f"--replan-every must be >= 1, got {replan_every}")
    return RunSettings(
        policy=arms[0].policy,
        rollouts=rollouts,
        suites=tuple(config.getoption("suite")),
        report_dir=config.rootpath / config.getoption("report_dir"),
        policy_settings=PolicySettings(
            seed=config.getoption("seed"),
            latency=latency,
            anchor=ChunkAnchor(config.getoption("chunk_anchor")),
            replan_every=replan_every,
            endpoint=arms[0].endpoint,
            device=config.getoption("policy_device"),
        ),
        max_envs=max_envs,
        retry_errors=retry_errors,
        arms=arms,
        assignment=assignment,
        blinding=blinding,
    )


def _controller_arms(config: pytest.Config) -> tuple[tuple[Arm, ...], Blinding | None]:
    """The arms `--policy` names, checkpoints made absolute; lettered under --blind."""
    arms = parse_arms(config.getoption("policy") or [SCRIPTED])
    arms = tuple(replace(arm, policy=resolved_policy(config, arm.policy)) for arm in arms)
    key = config.getoption("blind")
    if key is None or len(arms) < 2:
        return arms, None
    return blinded(arms, key or _blinding_key(config))


def _blinding_key(config: pytest.Config) -> str:
    """A fresh key, or the key of the blinded run being resumed (so its letters stay)."""
    resume = config.getoption("resume", None)
    if resume is None:
        return secrets.token_hex(8)
    report_dir = config.rootpath / config.getoption("report_dir")
    try:
        run_dir = resolve_run(resume, report_dir)
    except FileNotFoundError as error:
        raise pytest.UsageError(f"--resume: {error}") from None
    found = Blinding.load(run_dir)
    if found is None:
        raise pytest.UsageError(
            f"--blind --resume {resume}: {run_dir} was not a blinded run (it holds no "
            f"{BLINDING_FILE}); resume it without --blind"
        )
    return found.key


def resolved_policy(config: pytest.Config, policy: str) -> str:
    """A `lerobot:PATH` made absolute from where pytest was invoked, so workers and a shared
    server started elsewhere find the checkpoint."""
    if not policy.startswith(LEROBOT_PREFIX):
        return policy
    path = config.invocation_params.dir / Path(policy[len(LEROBOT_PREFIX) :]).expanduser()
    return f"{LEROBOT_PREFIX}{path.resolve()}"


def endpoint_of(config: pytest.Config, arm: Arm, first: Arm) -> Endpoint | None:
    """Where an arm is served: at its own URL (`POLICY@URL`), at --policy-url (openpi), or by
    the run's shared server (which serves the first arm's policy); None: in this process."""
    timeout, wait = config.getoption("infer_timeout"), config.getoption("server_wait")
    if not timeout > 0:
        raise pytest.UsageError(f"--infer-timeout must be > 0 seconds, got {timeout}")
    if not wait >= 0:
        raise pytest.UsageError(f"--server-wait must be >= 0 seconds, got {wait}")
    key = config.getoption("policy_api_key") or None
    try:
        if arm.url is not None:
            return Endpoint(arm.url, key, timeout, server_wait_s=wait)
        if arm.policy == OPENPI:
            return Endpoint(config.getoption("policy_url"), key, timeout, server_wait_s=wait)
        shared = from_controller(config, SHARED_URL)
        if shared is not None and arm.policy == first.policy and first.url is None:
            key = from_controller(config, SHARED_KEY)
            return Endpoint(shared, key, timeout, server_wait_s=wait)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    return None
