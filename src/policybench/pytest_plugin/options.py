"""Command-line options: each declared, and its value checked, here (before anything is
configured), and the run settings read from them once by the controller (see rundir: this run)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.options import (
    INFER_TIMEOUT,
    POLICY_API_KEY,
    POLICY_DEVICE,
    POLICY_URL,
    SEED,
    SERVER_WAIT,
    api_key,
)
from policybench.policy.chunk_player import ChunkAnchor, check_execute_steps
from policybench.policy.latency import InferenceLatency, LatencyMode
from policybench.preflight import REFUSE, WARN
from policybench.pytest_plugin.arms import (
    BALANCED,
    SWEEP_OPTION,
    Arm,
    Assignment,
    arm_settings,
    blinded,
    declared_arms,
    sweep_latencies,
)
from policybench.registry import (
    LEROBOT_PREFIX,
    OPENPI,
    SCRIPTED,
    PolicySettings,
    check_policy_name,
)
from policybench.report.published import catalog, entry_named
from policybench.run.arms import BLINDING_FILE, Blinding
from policybench.serve.client import Endpoint

DEFAULT_MAX_ENVS = 1  # a LIBERO env alone is ~1.5 GB; task-affine scheduling keeps reuse high
DEFAULT_RETRIES = 2
# What the controller hands workers besides the run's context: its shared server.
SHARED_URL, SHARED_KEY = "shared_server_url", "shared_server_api_key"
SHARED_OPTIONS = (POLICY_URL, POLICY_API_KEY, INFER_TIMEOUT, SERVER_WAIT, SEED, POLICY_DEVICE)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench", "policybench: evaluate robot policies")
    _arm_options(group)
    _timing_options(group)
    _pins_options(group)
    _selection_options(group)
    for option in SHARED_OPTIONS:  # checked with the others (see refusals)
        option.declare(group.addoption, checked=False)


def _arm_options(group: pytest.OptionGroup) -> None:
    """Which policies a run evaluates, and how its arms are dealt and shown."""
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
        "--published",
        default=None,
        metavar="NAME",
        help="show the run beside the results published for NAME (an entry's name or "
        "checkpoint: `policybench published` lists them), with an exact test; without it, a "
        "policy whose description names a published checkpoint (lerobot:PATH of a hub "
        "checkpoint, say) is compared with its own",
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


def _pins_options(group: pytest.OptionGroup) -> None:
    """Candidate pin sets as an arm (policybench.pins)."""
    group.addoption(
        "--env-pins",
        default=None,
        metavar="NAME==VERSION ...",
        help="run every scene with the envs as installed (arm `current`) and in an interpreter "
        "of these versions over the Eval's current pins (e.g. 'mujoco==3.5.0'; built on first "
        "use), as arms of one run on the same scenes with the same policy: the report says per "
        "Eval how far trajectories drift and whether success changed (paired)",
    )
    group.addoption(
        "--fail-on-drift",
        action="store_true",
        help="with --env-pins: fail the run when an Eval's success changed significantly under "
        "the candidate pins, or its env does not load under them",
    )


def _timing_options(group: pytest.OptionGroup) -> None:
    """How many rollouts a task gets, and how a model call's time is charged in simulated time."""
    group.addoption("--rollouts", type=int, default=3, help="rollouts per task (default 3)")
    group.addoption(
        "--inference-latency",
        default="none",
        help="simulated inference latency per model call: none (default), seconds (e.g. 0.1), "
        "steps:D (D control periods, the real-time chunking paper's delay), profile:FILE (drawn "
        "per call from a latency profile, seeded per rollout: the same on any host), or measured "
        "(this host's wall time: changes with its load)",
    )
    group.addoption(
        SWEEP_OPTION,
        default=None,
        metavar="L1,L2,...",
        help="run every scene under each inference latency (e.g. 0,steps:2,steps:4), as arms "
        "of one run labelled by their setting, each compared (paired) with zero latency; the "
        "report plots success against latency per Eval",
    )
    group.addoption(
        "--perturb",
        action="append",
        default=[],
        metavar="AXIS=LEVELS",
        help="run every scene as it is and perturbed along AXIS at each level (e.g. "
        "action_noise=0.05,0.1 or camera_pose=0.05; repeatable), as arms of one run labelled "
        "AXIS-LEVEL, each compared (paired by scene) with the unperturbed arm `none`; "
        "`policybench list` shows each Eval's axes and their ranges",
    )
    group.addoption(
        "--perturb-grid",
        action="store_true",
        help="with --perturb along two or more axes, also run every combination of one level "
        "of each (arms AXIS-LEVEL+AXIS-LEVEL); the report tables success over the grid",
    )
    group.addoption(
        "--chunk-anchor",
        default=ChunkAnchor.OBSERVATION.value,
        choices=[anchor.value for anchor in ChunkAnchor],
        help="where a late chunk starts: at its observation (default) or at its arrival",
    )
    group.addoption(
        "--execute-steps",
        type=int,
        default=None,
        metavar="S",
        help="the execution horizon: a new chunk is asked for S control steps after the previous "
        "call, the call's delay included (valid: max(1, D) <= S <= H - D for a delay of D steps "
        "and chunks of H); default: when the chunk is played out",
    )
    group.addoption(
        "--warm-start",
        action="store_true",
        default=False,
        help="compute each rollout's first chunk before its clock starts (not charged), as the "
        "real-time chunking paper's simulated evaluation does; default: hold until it arrives",
    )


def _selection_options(group: pytest.OptionGroup) -> None:
    """Which Evals run, how errors are retried, what a worker keeps, where reports go."""
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
        "--contract-mismatch",
        choices=[REFUSE, WARN],
        default=REFUSE,
        help="when a model's action contract (its conventions: action space, rotation format, "
        "gripper sign, control rate, images, state) disagrees with its Eval's codec: refuse "
        "(default: the Eval's preflight fails, naming each mismatch, and none of its rollouts "
        "runs) or warn (the preflight notes them, and the rollouts run)",
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
    contract_mismatch: str = REFUSE  # what a preflight does when contracts disagree
    record_video: bool = False  # --record-video: the preflight says when there is no image

    @property
    def ab(self) -> bool:
        """Whether this run compares policies (items and records then name their arm)."""
        return len(self.arms) > 1

    def policy_settings_of(self, arm: Arm) -> PolicySettings:
        """How `arm` is played: the run's settings, served where the arm is (at the arm's
        latency in a latency sweep)."""
        latency = self.policy_settings.latency if arm.latency is None else arm.latency
        return replace(self.policy_settings, endpoint=arm.endpoint, latency=latency)

    @property
    def policy_shown(self) -> str:
        """The policy, or the arms, as the terminal and error messages name them; arms of one
        policy (a perturbation or latency sweep, candidate pins) name it too."""
        if not self.ab:
            return self.policy
        labels = ", ".join(arm.label for arm in self.arms)
        policies = {arm.policy for arm in self.arms}
        return f"{labels} (each {self.policy})" if len(policies) == 1 else labels


def protocol_settings(settings: RunSettings) -> dict[str, Any]:
    """The run settings that say which policy ran and how it was played (run.json keeps them;
    record.protocol says which of them make the protocol)."""
    policy = settings.policy_settings
    return {
        keys.POLICY: settings.policy,
        "base_seed": policy.seed,
        keys.INFERENCE_LATENCY: str(policy.latency),
        keys.CHUNK_ANCHOR: policy.anchor.value,
        keys.EXECUTE_STEPS: policy.execute_steps,
        **played_profile(policy.latency),
        **({keys.WARM_START: True} if policy.warm_start else {}),
        **arm_settings(settings.arms, settings.assignment, settings.blinding),
    }


def played_profile(latency: InferenceLatency) -> dict[str, str]:
    """The digest of the latency profile a run draws from, as its settings keep it."""
    digest = latency.profile_digest
    return {} if digest is None else {keys.LATENCY_PROFILE: digest}


@pytest.hookimpl
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Every option is checked before the run is configured: a bad value is one usage line
    (exit 4), and nothing is started or run."""
    why = next(refusals(config), None)
    if why is not None:
        raise pytest.UsageError(why)


# Counts and their least accepted value: option destination -> (least, what it counts).
AT_LEAST = {
    "rollouts": (1, "rollouts per task"),
    "retry_errors": (0, "reruns of a rollout that hit an infrastructure error"),
    "max_envs_per_worker": (1, "live envs per process"),
    keys.EXECUTE_STEPS: (1, "control steps from one model call to the next"),
    "envs_per_worker": (1, "rollouts stepped side by side"),
    "shard_count": (1, "shards"),
}


def refusals(config: pytest.Config) -> Iterator[str]:
    """Why each refused policybench option value is refused, naming the option, what it takes
    and what came. (What needs the run itself, such as the policy names, --shard, --resume or
    --record-dataset's directory, is checked as the run is configured.)"""
    option = config.getoption
    for name, (least, counted) in AT_LEAST.items():
        value = option(name, None)
        if value is not None and value < least:
            yield f"--{name.replace('_', '-')} takes {counted}, at least {least}; got {value}"
    for shared in SHARED_OPTIONS:
        why = shared.refusal(option(shared.dest))
        if why is not None:
            yield why
    wall = option("rollout_wall_timeout", None)
    if wall is not None and wall < 0:
        yield f"--rollout-wall-timeout must be >= 0 seconds (0: never), got {wall:g}"
    floor = option("success_fail_under", None)
    if floor is not None and not 0.0 <= floor <= 1.0:
        yield f"--success-fail-under takes a success rate in [0, 1] (e.g. 0.8), got {floor:g}"
    margin = option("regression_margin", None)
    if margin is not None and not 0.0 < margin < 1.0:
        yield f"--regression-margin takes a drop of success in (0, 1), e.g. 0.2, got {margin:g}"
    alpha = option("regression_alpha", None)
    if alpha is not None and not 0.0 < alpha < 1.0:
        yield f"--regression-alpha must lie in (0, 1), e.g. 0.05, got {alpha:g}"
    try:
        latency = InferenceLatency.parse(option("inference_latency"))
        for played in (latency, *sweep_latencies(option("latency_sweep", None))):
            if played.mode is LatencyMode.STEPS:
                check_execute_steps(option("execute_steps", None), played.steps)
    except ValueError as error:
        yield str(error)
    try:  # the published results are read once, before any rollout, so a broken file is said
        known = catalog()
        published = option("published", None)
        if published is not None:
            entry_named(published, known)
    except ValueError as error:
        yield f"--published: {error}"
    report_dir = config.rootpath / option("report_dir")
    if report_dir.exists() and not report_dir.is_dir():
        yield f"--report-dir {option('report_dir')}: {report_dir} is a file; give a directory"


def read_settings(config: pytest.Config, resumed: Path | None = None) -> RunSettings:
    """The run's settings, read by the controller once (see rundir); `resumed` is the run
    directory --resume continues. A bad value is a UsageError that says what is accepted."""
    try:
        arms, blinding = _arms(config, resumed)
        for arm in arms:
            check_policy_name(arm.policy, config.invocation_params.dir)
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
    arms = with_endpoints(config, arms)
    return RunSettings(
        policy=arms[0].policy,
        rollouts=config.getoption("rollouts"),
        suites=tuple(config.getoption("suite")),
        report_dir=config.rootpath / config.getoption("report_dir"),
        policy_settings=PolicySettings(
            seed=config.getoption("seed"),
            latency=InferenceLatency.parse(config.getoption("inference_latency")),
            anchor=ChunkAnchor(config.getoption("chunk_anchor")),
            execute_steps=config.getoption("execute_steps"),
            warm_start=config.getoption("warm_start"),
            endpoint=arms[0].endpoint,
            device=config.getoption("policy_device"),
        ),
        max_envs=config.getoption("max_envs_per_worker"),
        retry_errors=config.getoption("retry_errors"),
        arms=arms,
        assignment=assignment,
        blinding=blinding,
        contract_mismatch=config.getoption("contract_mismatch"),
        record_video=bool(config.getoption("record_video", False)),
    )


def served_by_shared_server(
    config: pytest.Config, settings: RunSettings, urls: Mapping[str, str], keys: Mapping[str, str]
) -> RunSettings:
    """A worker's settings once it knows the shared servers the controller started (each
    policy's URL and key): the arms they serve are played through them."""
    shared = {policy: (url, keys[policy]) for policy, url in urls.items()}
    arms = with_endpoints(config, settings.arms, shared=shared)
    endpoint = arms[0].endpoint
    return replace(
        settings, arms=arms, policy_settings=replace(settings.policy_settings, endpoint=endpoint)
    )


def _arms(config: pytest.Config, resumed: Path | None) -> tuple[tuple[Arm, ...], Blinding | None]:
    """The arms `--policy` (or `--latency-sweep`) names, checkpoints made absolute; lettered
    under --blind."""
    arms = declared_arms(
        config.getoption("policy") or [SCRIPTED],
        config.getoption("latency_sweep"),
        _given(config, "--inference-latency", "none"),
        config.getoption("perturb") or (),
        config.getoption("perturb_grid"),
        config.getoption("env_pins"),
    )
    arms = tuple(replace(arm, policy=resolved_policy(config, arm.policy)) for arm in arms)
    key = config.getoption("blind")
    if key is None or len(arms) < 2:
        return arms, None
    return blinded(arms, key or _blinding_key(resumed))


def _given(config: pytest.Config, flag: str, default: str) -> str | None:
    """The value of `flag` when it was given (on the command line, or other than its
    `default` through addopts); None when not."""
    args = [str(arg) for arg in config.invocation_params.args]
    value = config.getoption(flag.removeprefix("--").replace("-", "_"))
    typed = any(arg == flag or arg.startswith(f"{flag}=") for arg in args)
    return value if typed or value != default else None


def _blinding_key(resumed: Path | None) -> str:
    """A fresh key, or the key of the blinded run being resumed (so its letters stay)."""
    if resumed is None:
        return secrets.token_hex(8)
    found = Blinding.load(resumed)
    if found is None:
        raise pytest.UsageError(
            f"--blind --resume {resumed}: it was not a blinded run (it holds no "
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


def with_endpoints(
    config: pytest.Config,
    arms: Sequence[Arm],
    shared: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[Arm, ...]:
    """The arms with where each is served: at its own URL (`POLICY@URL`), at --policy-url
    (openpi), or by the run's `shared` server of its policy (policy -> URL and key); None: in
    this process."""
    timeout, wait = config.getoption("infer_timeout"), config.getoption("server_wait")
    key = api_key(config.getoption("policy_api_key"))

    def endpoint(arm: Arm) -> Endpoint | None:
        if arm.url is not None:
            return Endpoint(arm.url, key, timeout, server_wait_s=wait)
        if arm.policy == OPENPI:
            return Endpoint(config.getoption("policy_url"), key, timeout, server_wait_s=wait)
        if shared is not None and arm.policy in shared:
            url, shared_key = shared[arm.policy]
            return Endpoint(url, shared_key, timeout, server_wait_s=wait)
        return None

    return tuple(replace(arm, endpoint=endpoint(arm)) for arm in arms)
