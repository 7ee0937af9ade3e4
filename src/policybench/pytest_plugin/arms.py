"""The arms of an A/B run (`--policy A --policy B`, or one policy under each setting of
`--latency-sweep`): what names each arm in item ids and reports, where it is served, which arm runs
each scene under `--assign balanced`, and the letters `--blind` shows instead of names."""

from __future__ import annotations

import random
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Any

from policybench import keys
from policybench.perturbation import NONE as NO_PERTURBATION
from policybench.perturbation import Grid, Perturbation, parse_perturb
from policybench.pins import CURRENT, PinSet
from policybench.policy.latency import NO_LATENCY, InferenceLatency
from policybench.registry import LEROBOT_PREFIX, is_import_path
from policybench.run.arms import (
    ARM_IN_ID,
    ARMS,
    ASSIGN,
    BLINDED,
    BLINDING,
    KEPT,
    Blinding,
)
from policybench.serve.client import Endpoint
from policybench.spec import Rollout

BALANCED = "balanced"  # the one way of assigning arms to scenes: balanced within each task
# One `--policy` value: [LABEL=]SPEC[@ws://HOST:PORT], or several of them joined by commas.
ARM_VALUE = re.compile(
    r"^(?:(?P<label>[A-Za-z0-9_.-]+)=)?(?P<spec>[^=@]+?)(?:@(?P<url>wss?://\S+))?$"
)
LABEL_CHARACTERS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Arm:
    """One policy of a run: its label (in item ids `task/seed=3/policy=LABEL` and reports), the
    policy as the registry names it, and where it is served (`SPEC@URL`; None: as the run
    decides, see `endpoint_of`)."""

    label: str
    policy: str
    url: str | None = None
    endpoint: Endpoint | None = None  # resolved from `url` and the run's server options
    latency: InferenceLatency | None = None  # a latency sweep's setting (None: the run's)
    perturbation: Perturbation | Grid | None = None  # a perturbation sweep's (--perturb)
    pins: PinSet | None = None  # a candidate pin set's (--env-pins): its envs run under them

    @property
    def spec(self) -> str:
        """The arm as one `--policy` value, label included: what a worker parses back."""
        return f"{self.label}={self.policy}" + (f"@{self.url}" if self.url else "")


def parse_arms(values: Iterable[str]) -> tuple[Arm, ...]:
    """The arms `--policy` values name, in order; a label not given is made from the policy
    (its name, a module's attribute, a checkpoint's directory), unique among the arms."""
    parsed = []
    for value in values:
        for text in (part.strip() for part in value.split(",")):
            found = ARM_VALUE.match(text)
            if found is None:
                raise ValueError(
                    f"--policy {text!r}: expected [LABEL=]POLICY[@ws://HOST:PORT], e.g. "
                    "--policy pi0=openpi@ws://gpu1:8000 (LABEL: letters, digits, _ . -)"
                )
            parsed.append((found["label"], found["spec"], found["url"]))
    if not parsed:
        raise ValueError("--policy needs at least one policy, e.g. --policy scripted")
    labels = _labels([policy for _, policy, _ in parsed])
    arms = tuple(
        Arm(label or made, policy, url)
        for (label, policy, url), made in zip(parsed, labels, strict=True)
    )
    seen: dict[str, str] = {}
    for arm in arms:
        if arm.label in seen:
            raise ValueError(
                f"--policy: two arms are labelled {arm.label!r} ({seen[arm.label]} and "
                f"{arm.policy}); name them apart with LABEL=POLICY, e.g. --policy "
                f"{arm.label}-2={arm.policy}"
            )
        seen[arm.label] = arm.policy
    return arms


def _labels(policies: Sequence[str]) -> list[str]:
    """Short labels for policies: as few trailing path parts of a checkpoint as tell them
    apart, then a number for what is still the same."""
    paths = [_checkpoint_parts(policy) for policy in policies]
    labels: list[str] = []
    for tail in range(1, max((len(parts) for parts in paths if parts), default=1) + 1):
        labels = [_label(p, parts, tail) for p, parts in zip(policies, paths, strict=True)]
        if len(set(labels)) == len(labels):
            return labels
    counts: dict[str, int] = {}
    numbered = []
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
        numbered.append(label if labels.count(label) == 1 else f"{label}-{counts[label]}")
    return numbered


def _checkpoint_parts(policy: str) -> tuple[str, ...] | None:
    if not policy.startswith(LEROBOT_PREFIX):
        return None
    return PurePath(policy[len(LEROBOT_PREFIX) :]).parts


def _label(policy: str, parts: tuple[str, ...] | None, tail: int) -> str:
    if parts:
        text = "-".join(part for part in parts[-tail:] if part != "/")
    elif is_import_path(policy):
        text = policy.rpartition(":")[2].rpartition(".")[2]
    else:
        text = policy
    return LABEL_CHARACTERS.sub("_", text) or "policy"


def item_id(rollout_id: str, arm: Arm) -> str:
    """The item id of a rollout under an arm of an A/B run: `task/seed=3/policy=LABEL`."""
    return f"{rollout_id}/{ARM_IN_ID}={arm.label}"


@dataclass(frozen=True)
class Assignment:
    """How scenes were given one arm each: `method` (balanced within each task), from `seed`."""

    method: str
    seed: int

    def as_record(self) -> dict[str, Any]:
        return {"method": self.method, keys.SEED: self.seed}


def assign_balanced(
    eval_name: str, plan: Sequence[Rollout], arms: Sequence[Arm], seed: int
) -> dict[int, Arm]:
    """One arm per planned scene (by rollout index): within each task the arms' counts differ
    by at most one, and so over the Eval; which scene gets which arm is shuffled, reproducibly
    from `seed` and the Eval's and task's names."""
    turn = random.Random(f"{seed}/{eval_name}").randrange(len(arms))
    tasks: dict[str, list[Rollout]] = {}
    for rollout in plan:
        tasks.setdefault(rollout.scene.task, []).append(rollout)
    assigned: dict[int, Arm] = {}
    for task, rollouts in tasks.items():
        dealt = [arms[(turn + i) % len(arms)] for i in range(len(rollouts))]
        turn += len(rollouts)  # the next task's odd scene goes to the next arm
        random.Random(f"{seed}/{eval_name}/{task}").shuffle(dealt)
        assigned.update({rollout.index: arm for rollout, arm in zip(rollouts, dealt, strict=True)})
    return assigned


def blinded(arms: Sequence[Arm], key: str) -> tuple[tuple[Arm, ...], Blinding]:
    """The arms lettered A, B, ... in an order shuffled by `key` (so the letters say nothing
    of the order of `--policy`), sorted by letter, and the Blinding that undoes it."""
    if len(arms) > len(string.ascii_uppercase):
        raise ValueError(f"--blind letters at most 26 arms, got {len(arms)}")
    order = list(arms)
    random.Random(f"blind/{key}").shuffle(order)
    letters = {arm.label: string.ascii_uppercase[i] for i, arm in enumerate(order)}
    lettered = tuple(
        replace(arm, label=letters[arm.label])
        for arm in sorted(arms, key=lambda arm: letters[arm.label])
    )
    real = {letters[arm.label]: {"label": arm.label, keys.POLICY: arm.policy} for arm in arms}
    # A sweep unblinds in its order of settings; other arms stay in letter order, so that each
    # comparison keeps the direction it was read in while blinded.
    order = tuple(arm.label for arm in arms) if swept(arms) else ()
    return lettered, Blinding(key, dict(sorted(real.items())), order)


def arm_settings(
    arms: Sequence[Arm], assignment: Assignment | None, blinding: Blinding | None
) -> dict[str, Any]:
    """What run.json and the protocol fingerprint say of an A/B run's arms (nothing of a
    one-policy run; under --blind, neither names nor order)."""
    if len(arms) < 2:
        return {}
    policies: Any = BLINDED if blinding else [arm.policy for arm in arms]
    settings: dict[str, Any] = {keys.POLICY: policies, ARMS: [arm.label for arm in arms]}
    if swept(arms):  # the run's latency is the sweep's settings (sorted: they name no letter)
        settings[keys.INFERENCE_LATENCY] = sorted(str(arm.latency) for arm in arms)
        profiles = sorted({arm.latency.profile_digest for arm in arms if arm.latency} - {None})
        if profiles:
            settings[keys.LATENCY_PROFILE] = profiles
    perturbed = {arm.label: arm.perturbation.as_json() for arm in arms if arm.perturbation}
    if perturbed:  # a perturbation sweep: each arm's axis and level
        settings[keys.PERTURBATION] = perturbed
    settings[ASSIGN] = None if assignment is None else assignment.as_record()
    if blinding is not None:
        settings[BLINDING] = blinding.digest
    return settings


SWEEP_OPTION = "--latency-sweep"
SWEPT = (keys.INFERENCE_LATENCY, keys.LATENCY_PROFILE)  # what a sweep's arms differ in


def declared_arms(
    policies: Sequence[str],
    sweep: str | None,
    latency: str | None,
    perturb: Sequence[str] = (),
    grid: bool = False,
    env_pins: str | None = None,
) -> tuple[Arm, ...]:
    """The run's arms: the policies `--policy` names, or one policy under each setting of
    `--latency-sweep`, which neither a second policy nor `--inference-latency` (its given
    value, None when not given) may join, or under each perturbation `--perturb` names (and
    `grid`: each combination of their levels), or with the envs as installed and under the
    candidate pins of `env_pins`."""
    arms = parse_arms(policies)
    if env_pins is not None:
        if len(arms) > 1 or sweep is not None or perturb or grid:
            raise ValueError(
                "--env-pins runs one policy with the envs as installed and under the candidate "
                "pins; give it without a second --policy, --latency-sweep or --perturb"
            )
        pins = PinSet.parse(env_pins)
        return (replace(arms[0], label=CURRENT), replace(arms[0], label=pins.label, pins=pins))
    if perturb or grid:
        return perturbed_arms(arms, sweep, parse_perturb(perturb, grid))
    if sweep is None:
        return arms
    if len(arms) > 1:
        raise ValueError(
            f"{SWEEP_OPTION} runs one policy under each latency, but --policy named "
            f"{len(arms)} ({', '.join(arm.label for arm in arms)}); sweep one policy per run"
        )
    if latency is not None:
        raise ValueError(
            f"{SWEEP_OPTION} {sweep} sets the latency of each arm, so --inference-latency "
            f"{latency} has nothing to set; give one of them (a setting of its own belongs in "
            "the sweep)"
        )
    return sweep_arms(arms[0], sweep)


def perturbed_arms(
    arms: Sequence[Arm], sweep: str | None, perturbations: Sequence[Perturbation | Grid]
) -> tuple[Arm, ...]:
    """One policy on its scenes as they are (the arm `none`, first: every level is compared with
    it), then under each perturbation, labelled by it (`action_noise-0.1`)."""
    if len(arms) > 1 or sweep is not None:
        other = f"--policy named {len(arms)}" if len(arms) > 1 else f"{SWEEP_OPTION} {sweep}"
        raise ValueError(
            f"--perturb runs one policy under each perturbation, but {other}; perturb one "
            "policy per run, without a latency sweep"
        )
    return (
        replace(arms[0], label=NO_PERTURBATION),
        *(replace(arms[0], label=p.label, perturbation=p) for p in perturbations),
    )


def swept(arms: Sequence[Arm]) -> bool:
    """Whether the arms are one policy under the settings of a latency sweep."""
    return any(arm.latency is not None for arm in arms)


def sealed_fields(arms: Sequence[Arm]) -> tuple[str, ...]:
    """What a blinded record keeps of its policy's description: the run-wide settings, which
    in a latency sweep leave out the latency (it tells the arms apart)."""
    if not swept(arms):
        return KEPT
    return tuple(name for name in KEPT if name not in SWEPT)


def sweep_arms(policy: Arm, sweep: str) -> tuple[Arm, ...]:
    """`policy` once under each latency setting of `--latency-sweep` (e.g. `0,steps:2,steps:4`),
    each arm labelled by its setting; the zero-latency arm, which every other is compared
    against, first."""
    arms = [
        replace(policy, label=latency_label(latency), latency=latency)
        for latency in sweep_latencies(sweep)
    ]
    return (
        *(arm for arm in arms if arm.latency == NO_LATENCY),
        *(arm for arm in arms if arm.latency != NO_LATENCY),
    )


def sweep_latencies(sweep: str | None) -> tuple[InferenceLatency, ...]:
    """The settings of `--latency-sweep` (none when not given). A setting that does not parse,
    a repeated one, a sweep of fewer than two or without zero latency is refused, naming what
    came and what is expected."""
    if sweep is None:
        return ()
    texts = [text.strip() for text in sweep.split(",")]
    if any(not text for text in texts):
        raise ValueError(
            f"{SWEEP_OPTION} {sweep!r}: an empty setting; give latency settings joined by "
            "commas, e.g. 0,steps:2,steps:4"
        )
    settings: dict[str, InferenceLatency] = {}
    for text in texts:
        try:
            latency = InferenceLatency.parse(text)
        except ValueError as error:
            raise ValueError(f"{SWEEP_OPTION} setting {text!r}: {error}") from None
        label = latency_label(latency)
        if label in settings:
            raise ValueError(
                f"{SWEEP_OPTION} {sweep!r}: {text!r} is the setting {label!r} again; give each "
                "latency once"
            )
        settings[label] = latency
    if len(settings) < 2:
        raise ValueError(
            f"{SWEEP_OPTION} {sweep!r}: a sweep compares two or more latency settings, e.g. "
            f"{SWEEP_OPTION} 0,steps:2,steps:4 (one setting is --inference-latency {sweep})"
        )
    if NO_LATENCY not in settings.values():
        raise ValueError(
            f"{SWEEP_OPTION} {sweep!r}: each setting is compared against zero latency, which "
            f"the sweep lacks; add 0, e.g. {SWEEP_OPTION} 0,{sweep}"
        )
    return tuple(settings.values())


def latency_label(latency: InferenceLatency) -> str:
    """An arm's label for a latency setting: the setting as written (`none`, `0.1`, `steps:2`),
    a profile named by its file's name, and only the characters item ids take."""
    kind, colon, rest = str(latency).partition(":")
    text = f"{kind}{colon}{PurePath(rest).name}" if colon else kind
    return re.sub(r"[^A-Za-z0-9_.:-]+", "_", text)
