"""`policybench probe`: an Eval's preflight as a command, to check a policy server in seconds
before a long run: the contract each way, the answered chunk and its latency, plotted and printed.

Exit status: 0 when the preflight passed, 1 when it failed (or the probe could not be set up), 2
when it was inconclusive (the server could not be asked).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from policybench import envserver, keys
from policybench.envserver import remote
from policybench.options import (
    INFER_TIMEOUT,
    POLICY_API_KEY,
    POLICY_DEVICE,
    POLICY_URL,
    SEED,
    SERVER_WAIT,
    api_key,
    declare_env_url,
)
from policybench.policy.base import Observation, Policy
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.contract import actions_only, contract_of
from policybench.preflight import (
    Preflight,
    Verdict,
    describe_space,
    describe_value,
    shown_preflight,
)
from policybench.registry import OPENPI, PolicySettings, build_policy, check_policy_name
from policybench.rendering import env_render_problem
from policybench.serve.client import DEFAULT_URL, Endpoint, RemoteModel
from policybench.serve.server import SERVED_MODEL
from policybench.spec import Eval, Rollout
from policybench.suites import eval_named
from policybench.world import World

if TYPE_CHECKING:
    import gymnasium as gym

EXIT_STATUS = {Verdict.PASSED: 0, Verdict.FAILED: 1, Verdict.INCONCLUSIVE: 2}
DEFAULT_OUT = Path("reports") / "probe"  # what a probe writes goes to <out>/<eval>/
CHUNK_PLOT = "chunk.png"
RECORD = "preflight.json"  # the preflight as a run directory records it
INSTALL_PLOTTING = "pip install 'policybench[probe]'"
MIN_IMAGE_SIDE = 8  # a 3-d array is taken for an image only when both its sides are this long


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "probe",
        help="ask a policy once about an Eval's first observation: print the contract, the "
        "chunk and its latency; plot the chunk and write the images sent",
    )
    parser.add_argument(
        "--eval",
        required=True,
        metavar="EVAL",
        help="the Eval: a registered name (see `policybench list`) or module:attribute",
    )
    parser.add_argument(
        "--policy",
        default=OPENPI,
        help="policy to probe, as pytest's --policy: openpi (default; served at --policy-url), "
        "scripted, random, lerobot:PATH, module:attr, or an installed policy name",
    )
    POLICY_URL.declare(parser.add_argument, default=None)  # None: not given (checked in run)
    POLICY_API_KEY.declare(parser.add_argument)
    INFER_TIMEOUT.declare(parser.add_argument)
    # A probe answers in seconds: it waits for a server only when asked to.
    SERVER_WAIT.declare(parser.add_argument, default=0.0)
    parser.add_argument(
        "--task",
        default=None,
        help="show the first planned scene of this task (default: the Eval's first planned scene)",
    )
    SEED.declare(parser.add_argument)
    POLICY_DEVICE.declare(parser.add_argument)
    declare_env_url(parser.add_argument)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"folder for {CHUNK_PLOT}, the images sent and {RECORD} "
        f"(default {DEFAULT_OUT}/<eval>/)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        eval = eval_named(args.eval)
        check_policy_name(args.policy, Path.cwd())
        endpoint = _endpoint(args)
    except (LookupError, ValueError) as error:
        raise SystemExit(f"policybench probe: {error}") from None
    _check_installed(eval)
    envserver.say_builds_nothing("probe", args.env_url, [eval])
    with remote.given(args.env_url, args.env_api_key):
        return _probe(args, eval, endpoint)


def _probe(args: argparse.Namespace, eval: Eval, endpoint: Endpoint | None) -> int:
    """`run`'s probe of `eval`'s first observation (of --task) with the policy at `endpoint`."""
    unrenderable = env_render_problem(eval)
    if unrenderable is not None:
        raise SystemExit(f"policybench probe: {eval.name}: {unrenderable}")
    rollout = _first_rollout(eval, args.task, args.seed)
    out = args.out or DEFAULT_OUT / re.sub(r"[^A-Za-z0-9._-]+", "_", eval.name)
    where = "" if endpoint is None else f" at {endpoint.shown}"
    shown_scene = f"{eval.name} {rollout.id} ({rollout.instruction!r})"
    print(f"probe {shown_scene} with policy {args.policy!r}{where}")
    world = World(eval)
    try:
        settings = PolicySettings(seed=args.seed, endpoint=endpoint, device=args.policy_device)
        try:
            policy = build_policy(
                args.policy,
                eval,
                settings,
                lambda: world.env_for(rollout.scene.task).action_space,
                args.eval if ":" in args.eval else None,  # where a policybench server finds it
            )
        except (LookupError, ValueError) as error:
            raise SystemExit(f"policybench probe: {error}") from None
        found, shown = shown_preflight(world, rollout, policy)
        space = world.action_space if shown else None  # None: the env could not be reset
        print(report(found, shown, policy, space, eval))
        for path in write_files(found, shown, space, eval.control_hz, out):
            print(f"wrote {path}")
    finally:
        world.close()
    print(_what_now(found))
    return EXIT_STATUS[found.verdict]


def _endpoint(args: argparse.Namespace) -> Endpoint | None:
    """Where the probed policy is served; None: it runs in this process."""
    if args.policy != OPENPI:
        if args.policy_url is not None:
            raise ValueError(
                f"--policy-url is where --policy=openpi is served, and the policy is "
                f"{args.policy!r}; to probe a server, pass --policy=openpi"
            )
        return None
    return Endpoint(
        args.policy_url or DEFAULT_URL,
        api_key(args.policy_api_key),
        args.infer_timeout,
        server_wait_s=args.server_wait,
    )


def _check_installed(eval: Eval) -> None:
    missing = [name for name in eval.requires if importlib.util.find_spec(name) is None]
    if missing:
        install = eval.install or (
            f"pip install 'policybench[{eval.extra}]'" if eval.extra else "install it"
        )
        raise SystemExit(
            f"policybench probe: {eval.name}: {', '.join(missing)} not installed; {install}"
        )


def _first_rollout(eval: Eval, task: str | None, seed: int) -> Rollout:
    """The first planned rollout (of `task`, if given)."""
    planned = eval.rollouts(1, seed)
    for rollout in planned:
        if task is None or rollout.scene.task == task:
            return rollout
    tasks = sorted({rollout.scene.task for rollout in planned})
    raise SystemExit(
        f"policybench probe: eval {eval.name!r} has no task {task!r}; its tasks: {', '.join(tasks)}"
    )


def report(
    found: Preflight,
    shown: Observation,
    policy: Policy,
    space: gym.spaces.Box | None,
    eval: Eval | None = None,
) -> str:
    """What a probe prints of its preflight: the policy, the contract each way, the latency,
    the verdict and the answered chunk."""
    lines = []
    if found.policy:
        lines.append(f"policy: {json.dumps(found.policy, default=str)}")
    metadata = _server_metadata(policy)
    if metadata:
        lines.append(f"server metadata: {json.dumps(metadata, default=str)}")
    played = isinstance(policy, ChunkPolicy)
    sent = found.sent if played else {name: describe_value(v) for name, v in shown.items()}
    rows = [("sent", name, described) for name, described in sent.items()]
    if not played:
        rows.insert(0, ("sent", "(the env's observation, as is)", ""))
    if found.received is not None and found.received != found.answered:
        rows.append(("answered", "chunk as answered", found.received))
    if found.answered is not None:
        played_as = "chunk" if found.received == found.answered else "chunk as played"
        rows.append(("answered", played_as, found.answered))
        rows.append(("answered", "horizon", str(found.horizon)))
    if space is not None:
        rows.append(("env", "action space", describe_space(space)))
    lines.append("contract:")
    lines.extend(_table(rows, indent="  "))
    lines.extend(_declared_contracts(policy, eval))
    if found.latency_ms is not None:
        lines.append(f"latency: {found.latency_ms:.1f} ms")
    verdict = found.verdict.value
    lines.append(f"preflight: {verdict}" + ("" if found.problem is None else f": {found.problem}"))
    lines.extend(f"note: {note}" for note in found.notes)
    if found.actions:
        actions = np.asarray(found.actions)
        numbers = np.array2string(
            actions, precision=4, suppress_small=True, threshold=120, max_line_width=100
        )
        lines.append(f"chunk ({' x '.join(map(str, actions.shape))}, as the env plays it):")
        lines.extend(f"  {line}" for line in numbers.splitlines())
    return "\n".join(lines)


def _declared_contracts(policy: Policy, eval: Eval | None) -> list[str]:
    """The action contracts declared on each side: the model's, and its codec's (or, for a
    model that sees the env as it is, the env's own)."""
    if not isinstance(policy, ChunkPolicy):
        return []
    codec = policy.codec
    if codec.steps or eval is None:
        other = (f"the codec {codec.name}", codec.contract)
    else:
        other = (f"{eval.name}'s env", actions_only(eval.contract))
    lines = []
    for whose, contract in ((f"the model {policy.name}", contract_of(policy.model)), other):
        if contract is None:
            lines.append(f"action contract of {whose}: none declared")
        else:
            lines.append(f"action contract of {whose}: {'; '.join(contract.lines())}")
    return lines


def _server_metadata(policy: Policy) -> dict[str, Any]:
    """What the server said of itself when connected, less the served model (in the policy's
    description already)."""
    if not (isinstance(policy, ChunkPolicy) and isinstance(policy.model, RemoteModel)):
        return {}
    metadata = policy.model.metadata or {}
    return {name: value for name, value in metadata.items() if name != SERVED_MODEL}


def _table(rows: Sequence[tuple[str, str, str]], indent: str) -> list[str]:
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(2)]
    lines, previous = [], None
    for side, name, value in rows:
        label = side if side != previous else ""
        previous = side
        lines.append(f"{indent}{label:<{widths[0]}}  {name:<{widths[1]}}  {value}".rstrip())
    return lines


def _what_now(found: Preflight) -> str:
    if found.verdict is Verdict.PASSED:
        return f"passed: the policy answers {found.eval}'s contract; its rollouts can run"
    if found.verdict is Verdict.FAILED:
        return (
            f"failed: every rollout of {found.eval} would be an error with this problem; fix the "
            "model's answer (or the codec it is played through) and probe again"
        )
    return (
        "inconclusive: the policy server could not be asked, so nothing is known of the contract "
        "yet; start it or point --policy-url at it and probe again (--server-wait S waits for a "
        "server that is still starting)"
    )


def write_files(
    found: Preflight, shown: Observation, space: gym.spaces.Box, control_hz: float, out: Path
) -> list[Path]:
    """Writes under `out` the chunk's plot (when there is a chunk), the images sent and the
    preflight's record; returns their paths."""
    written = []
    if found.actions:  # a Policy's first Step may command nothing
        title = f"{found.eval}: {found.policy.get(keys.POLICY_NAME, 'the policy')} answered"
        plot_chunk(np.asarray(found.actions), space, control_hz, title, out / CHUNK_PLOT)
        written.append(out / CHUNK_PLOT)
    written += write_images(shown, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / RECORD).write_text(json.dumps(found.as_json(), indent=1, sort_keys=True))
    return [*written, out / RECORD]


def plot_chunk(
    actions: np.ndarray, space: gym.spaces.Box, control_hz: float, title: str, path: Path
) -> None:
    """One subplot per action dimension over the horizon, the action space's bounds drawn and
    the space between them shaded, waypoints outside them in red."""
    figure_class = _matplotlib_figure()
    actions = actions.reshape(len(actions), -1)  # one dimension per subplot, whatever the shape
    horizon, dims = actions.shape
    figure = figure_class(figsize=(8, 1.2 + 1.4 * dims), layout="constrained")
    axes = figure.subplots(dims, 1, sharex=True, squeeze=False)[:, 0]
    low = np.broadcast_to(space.low, space.shape).ravel()
    high = np.broadcast_to(space.high, space.shape).ravel()
    steps = np.arange(horizon)
    for dim, ax in enumerate(axes):
        if np.isfinite(low[dim]) and np.isfinite(high[dim]):
            ax.axhspan(low[dim], high[dim], color="tab:green", alpha=0.12, lw=0)
        for bound in (low[dim], high[dim]):
            if np.isfinite(bound):
                ax.axhline(bound, color="tab:green", lw=0.8, ls="--")
        ax.plot(steps, actions[:, dim], marker="o", ms=3, color="tab:blue")
        outside = (actions[:, dim] < low[dim]) | (actions[:, dim] > high[dim])
        ax.plot(steps[outside], actions[outside, dim], "o", ms=4, color="tab:red")
        ax.set_ylabel(f"dim {dim}")
    axes[-1].set_xlim(-0.5, horizon - 0.5)
    axes[-1].xaxis.get_major_locator().set_params(integer=True)
    axes[-1].set_xlabel(f"waypoint (1/{control_hz:g} s apart)")
    figure.suptitle(f"{title} {horizon} x {dims} (bounds shaded)")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def write_images(observation: Observation, out: Path) -> list[Path]:
    """Each image in `observation` (HxWxC or CxHxW, C of 1, 3 or 4) as a PNG named for its key."""
    images = {name: image_of(value) for name, value in observation.items()}
    images = {name: image for name, image in images.items() if image is not None}
    if not images:
        return []
    _matplotlib_figure()  # Pillow comes with matplotlib
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, image in images.items():
        path = out / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)}.png"
        Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(path)
        written.append(path)
    return written


def image_of(value: Any) -> np.ndarray | None:
    """`value` as an HxWxC uint8 picture when it is an image, else None. Floats up to 1 are
    taken as [0, 1], others as [0, 255]."""
    if not isinstance(value, np.ndarray) or value.ndim != 3 or value.dtype.kind not in "uif":
        return None
    if value.shape[-1] in (1, 3, 4) and min(value.shape[:2]) >= MIN_IMAGE_SIDE:
        image = value
    elif value.shape[0] in (1, 3, 4) and min(value.shape[1:]) >= MIN_IMAGE_SIDE:
        image = value.transpose(1, 2, 0)
    else:
        return None
    if image.dtype.kind == "f" and np.nanmax(image) <= 1.0:
        image = image * 255.0
    return np.clip(np.nan_to_num(image), 0, 255).astype(np.uint8)


def _matplotlib_figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ModuleNotFoundError:
        raise SystemExit(
            f"policybench probe plots with matplotlib, which is not installed: {INSTALL_PLOTTING}"
        ) from None
    return Figure
