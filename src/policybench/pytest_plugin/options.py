"""Command-line options, and the run settings read from them (once per process; a worker takes
the policy as the controller resolved it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.policy.chunk_player import ChunkAnchor
from policybench.policy.latency import InferenceLatency
from policybench.pytest_plugin.workers import from_controller, hand_to_workers, is_worker
from policybench.registry import LEROBOT_PREFIX, OPENPI, PolicySettings, check_policy_name
from policybench.serve.client import Endpoint

SETTINGS = pytest.StashKey["RunSettings"]()
DEFAULT_MAX_ENVS = 2
DEFAULT_RETRIES = 2
# What the controller hands workers: the policy name as it resolved it, the shared server.
POLICY, SHARED_URL, SHARED_KEY = "policy", "shared_server_url", "shared_server_api_key"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench", "policybench: evaluate robot policies")
    group.addoption(
        "--policy",
        default="scripted",
        help="policy to evaluate: scripted (default), random, openpi (served), lerobot:PATH (a "
        "LeRobot checkpoint directory), module:attr (your own Model, Policy or factory), or an "
        "installed policy name",
    )
    group.addoption(
        "--policy-device",
        default="cpu",
        help="where a local model with weights (lerobot:PATH) runs: cpu (default), cuda or mps",
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
    policy: str
    rollouts: int
    suites: tuple[str, ...]
    report_dir: Path
    policy_settings: PolicySettings
    max_envs: int = DEFAULT_MAX_ENVS
    retry_errors: int = DEFAULT_RETRIES


def protocol_settings(settings: RunSettings) -> dict[str, Any]:
    """The run settings that change what a rollout measures: two runs that differ here are not
    the same protocol (a resumed run must agree with the run it continues)."""
    policy = settings.policy_settings
    return {
        keys.POLICY: settings.policy,
        "base_seed": policy.seed,
        keys.INFERENCE_LATENCY: str(policy.latency),
        keys.CHUNK_ANCHOR: policy.anchor.value,
        "replan_every": policy.replan_every,
    }


def settings_of(config: pytest.Config) -> RunSettings:
    if SETTINGS not in config.stash:
        config.stash[SETTINGS] = read_settings(config)
    return config.stash[SETTINGS]


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):
        hand_to_workers(config, POLICY, settings_of(config).policy)


def read_settings(config: pytest.Config) -> RunSettings:
    """The run's settings; bad values are a UsageError that says what is accepted."""
    policy = from_controller(config, POLICY) or resolved_policy(config)
    try:
        check_policy_name(policy, config.invocation_params.dir)
        latency = InferenceLatency.parse(config.getoption("inference_latency"))
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
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
        policy=policy,
        rollouts=rollouts,
        suites=tuple(config.getoption("suite")),
        report_dir=config.rootpath / config.getoption("report_dir"),
        policy_settings=PolicySettings(
            seed=config.getoption("seed"),
            latency=latency,
            anchor=ChunkAnchor(config.getoption("chunk_anchor")),
            replan_every=replan_every,
            endpoint=endpoint_of(config, policy),
            device=config.getoption("policy_device"),
        ),
        max_envs=max_envs,
        retry_errors=retry_errors,
    )


def resolved_policy(config: pytest.Config) -> str:
    """The policy option with a `lerobot:PATH` made absolute from where pytest was invoked, so
    workers and a shared server started elsewhere find the checkpoint."""
    policy = config.getoption("policy")
    if not policy.startswith(LEROBOT_PREFIX):
        return policy
    path = config.invocation_params.dir / Path(policy[len(LEROBOT_PREFIX) :]).expanduser()
    return f"{LEROBOT_PREFIX}{path.resolve()}"


def endpoint_of(config: pytest.Config, policy: str) -> Endpoint | None:
    """Where this process's policy is served; None: it runs in this process."""
    timeout, wait = config.getoption("infer_timeout"), config.getoption("server_wait")
    if not timeout > 0:
        raise pytest.UsageError(f"--infer-timeout must be > 0 seconds, got {timeout}")
    if not wait >= 0:
        raise pytest.UsageError(f"--server-wait must be >= 0 seconds, got {wait}")
    try:
        if policy == OPENPI:
            url, key = config.getoption("policy_url"), config.getoption("policy_api_key")
            return Endpoint(url, key or None, timeout, server_wait_s=wait)
        shared = from_controller(config, SHARED_URL)
        if shared is not None:
            key = from_controller(config, SHARED_KEY)
            return Endpoint(shared, key, timeout, server_wait_s=wait)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    return None
