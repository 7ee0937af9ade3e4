"""Preflight: one observation of an Eval (from the first of its scenes a process runs) through
the policy's codec to its model before any rollout runs, and the answer checked against the env's
action space (shape, dtype, finiteness, bounds, horizon): a broken contract fails an Eval in
seconds."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np

from policybench import keys
from policybench.harness import ActionError, check_action
from policybench.policy.base import (
    CallHung,
    Chunk,
    EndEpisode,
    InfrastructureError,
    Observation,
    Policy,
    SessionContext,
    Step,
    control_period_ns,
    release,
)
from policybench.policy.chunk_player import ChunkPolicy, late_share, play_problem
from policybench.policy.contract import actions_only, contract_of, mismatches
from policybench.record.trace import is_image
from policybench.spec import Eval, Rollout
from policybench.world import World

REFUSE, WARN = "refuse", "warn"  # what a preflight does with contracts that disagree


class Verdict(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # every rollout of the Eval is an error with this preflight's problem
    INCONCLUSIVE = "inconclusive"  # the server could not be asked; the rollouts find out


@dataclass(frozen=True)
class Preflight:
    """What one call showed: what the model was sent and answered, how long it took, and what
    is wrong with it (`problem`) or worth knowing (`notes`)."""

    eval: str
    verdict: Verdict
    problem: str | None = None
    sent: dict[str, str] = field(default_factory=dict)  # key -> "shape dtype" as the model got it
    answered: str | None = None  # the chunk's "shape dtype", as the env plays it
    received: str | None = None  # the chunk's "shape dtype" as the model answered it (a Model's)
    horizon: int | None = None
    action_space: str | None = None
    latency_ms: float | None = None
    notes: tuple[str, ...] = ()
    policy: dict[str, Any] = field(default_factory=dict)  # described after the call
    actions: list[list[float]] | None = None  # the answered chunk, as the env plays it
    # Where the Eval has an expert and an image: how far the first action is from the expert's
    # with the images as rendered and turned each way (ORIENTATIONS), for a run's diagnosis.
    orientation: dict[str, float] | None = None

    @property
    def failed(self) -> bool:
        return self.verdict is Verdict.FAILED

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict.value, "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Preflight:
        return cls(**{**data, "verdict": Verdict(data["verdict"]), "notes": tuple(data["notes"])})

    def line(self, arm: str | None = None) -> str:
        """One line for a terminal; naming the `arm` whose policy it asked, in an A/B run."""
        named = self.eval if arm is None else f"{self.eval} under arm {arm}"
        if self.verdict is not Verdict.PASSED:
            return f"preflight {named}: {self.verdict.value}: {self.problem}"
        notes = "".join(f"; {note}" for note in self.notes)
        return (
            f"preflight {named}: passed: answered {self.answered} (horizon {self.horizon}) "
            f"for action space {self.action_space} in {self.latency_ms:.1f} ms{notes}"
        )


class Shown(NamedTuple):
    """A preflight and the observation its policy was shown: what a Model's codec made of the
    env's (as sent, on the wire for a served one), or the env's own for a Policy; empty when the
    env could not be reset."""

    preflight: Preflight
    observation: Observation


def preflight(
    world: World, rollout: Rollout, policy: Policy, contract_mismatch: str = REFUSE
) -> Preflight:
    """Stages `rollout`'s scene on `world` and asks `policy` once about its first observation;
    a model whose contract disagrees with its codec's fails it (`contract_mismatch` REFUSE) or
    is noted (WARN)."""
    return shown_preflight(world, rollout, policy, contract_mismatch).preflight


def shown_preflight(
    world: World, rollout: Rollout, policy: Policy, contract_mismatch: str = REFUSE
) -> Shown:
    """`preflight`, with the observation the policy was shown."""
    eval = world.eval
    try:
        obs = world.reset(rollout.scene, rollout.perturbation)
    except Exception as error:
        world.discard()
        return Shown(_failed(eval.name, f"env reset raised {type(error).__name__}: {error}"), {})
    space = world.action_space
    facing = {name: rollout.scene.fields[name] for name in eval.policy_facing}
    context = SessionContext(rollout.instruction, eval.control_hz, facing)
    asked = _Exchange(obs)
    known = _known_disagreement(policy, eval) if contract_mismatch == REFUSE else None
    if known is not None:  # a contract known already is judged before any call
        return Shown(_failed(eval.name, known, policy=policy), {})
    started = time.perf_counter()
    try:
        actions = _first_actions(policy, obs, rollout.instruction, context, space.shape, asked)
        latency_ms = (time.perf_counter() - started) * 1e3
        for action in actions:
            check_action(action, space.shape, policy.name)
        unplayable, played_notes = _played(policy, eval.control_hz, len(actions))
        described = policy.describe()
        disagree, contract_notes = _contracts(policy, eval)
    except (InfrastructureError, CallHung) as error:  # says nothing of the contract
        problem = f"{type(error).__name__}: {error}"
        return Shown(Preflight(eval.name, Verdict.INCONCLUSIVE, problem, asked.sent), asked.shown)
    except ActionError as error:
        return Shown(
            _failed(eval.name, str(error), asked.sent, policy, received=asked.received), asked.shown
        )
    except Exception as error:
        problem = f"{type(error).__name__}: {error}"
        details = traceback.format_exc()
        return Shown(
            _failed(eval.name, problem, asked.sent, policy, details, asked.received), asked.shown
        )
    refused = unplayable or (disagree if contract_mismatch == REFUSE else None)
    if refused is not None:
        return Shown(
            _failed(eval.name, refused, asked.sent, policy, received=asked.received), asked.shown
        )
    contract_notes = contract_notes if disagree is None else _caveat(disagree)
    passed = Preflight(
        eval.name,
        Verdict.PASSED,
        sent=asked.sent,
        answered=describe_value(actions),
        received=asked.received,
        horizon=len(actions),
        action_space=describe_space(space),
        latency_ms=round(latency_ms, 3),
        notes=(*_out_of_bounds(actions, space, rollout.id), *played_notes, *contract_notes),
        policy=described,
        actions=np.asarray(actions, dtype=float).tolist(),
        orientation=_orientation(policy, eval, obs, rollout.instruction, context, space.shape),
    )
    return Shown(passed, asked.shown)


@dataclass
class _Exchange:
    """What a preflight has shown the policy and heard back so far (a failure reports it)."""

    shown: Observation
    sent: dict[str, str] = field(default_factory=dict)
    received: str | None = None


def _first_actions(
    policy: Policy,
    obs: Observation,
    instruction: str,
    context: SessionContext,
    action_shape: tuple[int, ...],
    asked: _Exchange,
) -> np.ndarray:
    """The policy's first answer to `obs` as a batch of actions: a chunk's, decoded by its
    codec, or a session's first Step."""
    if isinstance(policy, ChunkPolicy):
        asked.shown = policy.codec.encode(obs, instruction)
        asked.sent = {name: describe_value(value) for name, value in asked.shown.items()}
        source = policy.model.open(context)
        try:
            chunk = source(asked.shown)
        finally:
            release(source)
        if not isinstance(chunk, Chunk):
            raise TypeError(f"a model must answer a Chunk, got {type(chunk).__name__}")
        asked.received = describe_value(chunk.actions)
        return policy.codec.actions(chunk.actions)
    session = policy.new_session(context)
    try:
        answer = session(obs, 0)
    finally:
        release(session)
    if isinstance(answer, EndEpisode) or not isinstance(answer, Step):
        raise TypeError(f"a session's first answer must be a Step, got {answer!r}")
    if answer.commands is None:
        return np.empty((0, *action_shape))
    return np.atleast_2d(answer.commands)


# The ways a preflight turns an Eval's images to ask the model again (a convention's usual slips).
ORIENTATION = "orientation"  # the Preflight field that keeps what they gave
ORIENTATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "as rendered": lambda image: image,
    "flipped upside down": lambda image: image[::-1],
    "rotated 180 degrees": lambda image: image[::-1, ::-1],
    "mirrored left to right": lambda image: image[:, ::-1],
}


def _orientation(
    policy: Policy,
    eval: Eval,
    obs: Observation,
    instruction: str,
    context: SessionContext,
    action_shape: tuple[int, ...],
) -> dict[str, float] | None:
    """The distance of the policy's first action from the Eval's expert's, with the first
    observation's images shown each way of ORIENTATIONS; None without an expert, an image or a
    policy other than the expert, or if asking fails (the preflight has passed: it says no more)."""
    images = [name for name, value in obs.items() if is_image(value)]
    if eval.scripted is None or not images or policy.name == "scripted":
        return None
    try:
        source = eval.scripted().open(context)
        try:
            expert = np.asarray(source(obs).actions[0], float)
        finally:
            release(source)
        found = {}
        for how, turn in ORIENTATIONS.items():
            shown = {**obs, **{name: np.ascontiguousarray(turn(obs[name])) for name in images}}
            answer = _first_actions(
                policy, shown, instruction, context, action_shape, _Exchange(shown)
            )
            found[how] = round(float(np.linalg.norm(np.asarray(answer[0], float) - expert)), 6)
        return found
    except Exception:
        return None


# How the note on a latency profile's draws past the execution horizon goes on (after a share):
# it tells a latency apart, so a blinded latency sweep's preflight files leave it out.
LATE_NOTE = "of the latency profile's draws exceed --execute-steps"


def latency_notes(notes: tuple[str, ...]) -> tuple[str, ...]:
    """The notes of a preflight that speak of its policy's latency."""
    return tuple(note for note in notes if LATE_NOTE in note)


def _played(policy: Policy, control_hz: float, horizon: int) -> tuple[str | None, tuple[str, ...]]:
    """Why a ChunkPolicy's execution horizon does not fit chunks of `horizon` actions under its
    latency (each rollout would fail at its first chunk), or None; and a note when a latency
    profile's draws may exceed the horizon (those calls are waited for)."""
    if not isinstance(policy, ChunkPolicy):
        return None, ()
    period_ns = control_period_ns(control_hz)
    problem = play_problem(policy.execute_steps, policy.latency, period_ns, horizon)
    share = late_share(policy.execute_steps, policy.latency, period_ns)
    if problem is not None or not share:
        return problem, ()
    return None, (
        f"{share:.1%} {LATE_NOTE} {policy.execute_steps} "
        f"({policy.execute_steps * period_ns / 1e6:g} ms): the next call "
        f"waits for such a call, so that cycle's horizon is its delay "
        f"({keys.CALLS_PAST_HORIZON} in each record)",
    )


def _known_disagreement(policy: Policy, eval: Eval) -> str | None:
    """How a model's contract, known before any call, disagrees with its Eval's; None when it
    agrees or is not known yet (a served model's comes with its first answer)."""
    try:
        return _contracts(policy, eval)[0]
    except Exception:  # a contract that cannot be read is told after the call
        return None


def _failed(
    eval: str,
    problem: str,
    sent: dict[str, str] | None = None,
    policy: Policy | None = None,
    details: str = "",
    received: str | None = None,
) -> Preflight:
    described = {} if policy is None else _safe_describe(policy)
    notes = (details.strip().splitlines()[-1],) if details else ()
    return Preflight(
        eval,
        Verdict.FAILED,
        problem,
        sent or {},
        received=received,
        notes=notes,
        policy=described,
    )


def _safe_describe(policy: Policy) -> dict[str, Any]:
    try:
        return policy.describe()
    except Exception as error:
        return {"describe raised": f"{type(error).__name__}: {error}"}


def describe_space(space: Any) -> str:
    """A Box action space's shape and bounds, as a preflight records them."""
    return f"{space.shape} in [{_bound(space.low)}, {_bound(space.high)}]"


def describe_value(value: Any) -> str:
    """A value's "shape dtype" (a str's "str"; a dict's, entry by entry)."""
    if isinstance(value, str):
        return "str"
    if isinstance(value, dict):
        inner = ", ".join(f"{name}: {describe_value(v)}" for name, v in value.items())
        return "{" + inner + "}"
    array = np.asarray(value)
    return f"{list(array.shape)} {array.dtype}"


def _bound(values: np.ndarray) -> str:
    flat = np.unique(np.asarray(values, dtype=float))
    return f"{flat[0]:g}" if len(flat) == 1 else f"{flat.min():g}..{flat.max():g}"


def _out_of_bounds(actions: np.ndarray, space: Any, asked_at: str) -> tuple[str, ...]:
    """A caveat when the actions answered to the first observation of `asked_at` (the rollout
    whose scene the preflight staged) leave the action `space` (many envs clip; some do not)."""
    outside = (actions < space.low) | (actions > space.high)
    if not outside.any():
        return ()
    dims = sorted({int(d) for d in np.nonzero(outside)[1]})
    named = f"dim {dims[0]}" if len(dims) == 1 else f"dims {', '.join(map(str, dims))}"
    return (
        f"caveat: this policy's actions can leave the action space ({named}, at the first "
        f"observation of {asked_at}, the scene this preflight staged; by how much depends on "
        "the scene); an env that clips to its bounds plays them clipped, one that does not as "
        "given",
    )


def _caveat(disagree: str) -> tuple[str]:
    """A disagreement, under WARN, as the caveat of a preflight that passed (without the advice
    to pass the flag that was passed)."""
    return (f"caveat: {disagree.removesuffix(WARN_ADVICE)}",)


WARN_ADVICE = " (--contract-mismatch warn runs the rollouts anyway)"


def _contracts(policy: Policy, eval: Eval) -> tuple[str | None, tuple[str, ...]]:
    """Whether a model's contract (policy.contract) and its codec's agree: the mismatches in one
    line (None when they agree), and the notes a passed preflight adds."""
    if not isinstance(policy, ChunkPolicy):
        return None, ()
    codec = policy.codec
    # A model that sees the env as it is (a codec without steps) follows the env's own contract.
    expected = codec.contract if codec.contract or codec.steps else actions_only(eval.contract)
    model = contract_of(policy.model)
    if model is None or expected is None:
        return None, ()
    whose = f"codec {codec.name}" if codec.steps else f"{eval.name}'s env"
    found = mismatches(model, expected)
    if not found:
        return None, (f"action contract: agrees with {whose}",)
    return (
        f"action contract: {policy.name} and {whose} disagree on "
        f"{len(found)} point{'s' * (len(found) > 1)}: {'; '.join(found)}{WARN_ADVICE}"
    ), ()
