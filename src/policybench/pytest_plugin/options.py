"""Command-line options, and the run settings read from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from policybench.policy.chunk_player import ChunkAnchor
from policybench.policy.latency import InferenceLatency
from policybench.policy.registry import PolicySettings, check_policy_name
from policybench.pytest_plugin.remote import endpoint_of


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench", "policybench: evaluate robot policies")
    group.addoption(
        "--policy",
        default="scripted",
        help="policy to evaluate: scripted (default), random, lerobot:PATH (a LeRobot checkpoint "
        "directory), or an installed policy name",
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


def read_settings(config: pytest.Config) -> RunSettings:
    """The run's settings; bad values are a UsageError that says what is accepted."""
    policy = config.getoption("policy")
    try:
        check_policy_name(policy)
        latency = InferenceLatency.parse(config.getoption("inference_latency"))
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    rollouts = config.getoption("rollouts")
    if rollouts < 0:
        raise pytest.UsageError(f"--rollouts must be >= 0, got {rollouts}")
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
            endpoint=endpoint_of(config),
            device=config.getoption("policy_device"),
        ),
    )
