"""What an evaluation is: Scenes, Rollouts and Evals, and the plan builders that turn a
suite's tasks into a deterministic list of Rollouts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from policybench import keys
from policybench.policy.base import control_period_ns

if TYPE_CHECKING:
    import gymnasium as gym
    import numpy as np

    from policybench.perturbation import Axis, Grid, Perturbation
    from policybench.policy.base import Model
    from policybench.policy.codec import Codec
    from policybench.policy.contract import Contract
    from policybench.trajectory import TrajectorySpec

SceneValue = int | float | str


@dataclass(frozen=True)
class Scene:
    """What an env stages before a rollout. Recorded in full, never shown to a policy.

    `task` picks the env, `seed` seeds its reset, `fields` are further reset options
    (an init-state index, an object placement) passed to `env.reset(options=...)`.
    """

    task: str
    seed: int
    fields: Mapping[str, SceneValue] = field(default_factory=dict)

    def as_record(self) -> dict[str, SceneValue]:
        return {keys.TASK: self.task, keys.SEED: self.seed, **self.fields}


@dataclass(frozen=True)
class Rollout:
    """One planned attempt. Its `id` is the pytest item id."""

    eval: str
    index: int
    count: int
    instruction: str
    timeout_s: float
    scene: Scene
    # An axis and level the scene is perturbed along (policybench.perturbation); the scene, and
    # so the id, stays the same: a perturbed rollout pairs with its scene unperturbed.
    perturbation: Perturbation | Grid | None = None

    @property
    def id(self) -> str:
        extra = "".join(f"/{name}={value}" for name, value in self.scene.fields.items())
        return f"{self.scene.task}/seed={self.scene.seed}{extra}"


class Plan(Protocol):
    """Builds an Eval's rollouts from the run's settings."""

    def __call__(
        self, eval_name: str, rollouts_per_task: int, base_seed: int
    ) -> tuple[Rollout, ...]: ...


@dataclass(frozen=True)
class SeededPerTask:
    """`rollouts_per_task` rollouts of every task, seeded `base_seed`, `base_seed + 1`, ...

    Every task sees the same seeds, so a rollout is named by its task and seed alone and the
    same command line always plans the same rollouts.
    """

    instructions: Mapping[str, str]
    timeout_s: float
    first_seed: int = 0  # a reference loop's own first seed (Diffusion Policy's test seeds, say)

    def __call__(
        self, eval_name: str, rollouts_per_task: int, base_seed: int
    ) -> tuple[Rollout, ...]:
        planned = [
            (instruction, Scene(task=task, seed=self.first_seed + base_seed + i))
            for task, instruction in self.instructions.items()
            for i in range(rollouts_per_task)
        ]
        return numbered(eval_name, self.timeout_s, planned)


def numbered(
    eval_name: str, timeout_s: float, planned: Sequence[tuple[str, Scene]]
) -> tuple[Rollout, ...]:
    """The Rollouts of (instruction, scene) pairs in plan order, with their index and count."""
    return tuple(
        Rollout(eval_name, index, len(planned), instruction, timeout_s, scene)
        for index, (instruction, scene) in enumerate(planned)
    )


def seeded_per_task(
    instructions: Mapping[str, str], timeout_s: float, first_seed: int = 0
) -> SeededPerTask:
    """The common plan: each task (name -> instruction) run with consecutive seeds, from
    `first_seed` plus the run's base seed."""
    return SeededPerTask(dict(instructions), timeout_s, first_seed)


@dataclass(frozen=True)
class Attended:
    """A person in the loop of each rollout: stages the scene fields named in `staged` (as they
    are given in the rollout's scene) before it starts and, with `judged`, gives its verdict.

    The harness waits for an Operator (`--operator`) in simulated time: the clock stands still
    while a person stages or judges. The automatic outcome is kept; a verdict is recorded beside it.
    """

    staged: Sequence[str] = ()
    judged: bool = False

    def staging(self, scene: Scene) -> dict[str, SceneValue]:
        """What a person stages for `scene`: each staged field and its value."""
        values = scene.as_record()
        missing = [name for name in self.staged if name not in values]
        if missing:
            raise ValueError(
                f"the attended scene fields {missing} are not in the scene {values}; name fields "
                f"the plan gives: {sorted(values)}"
            )
        return {name: values[name] for name in self.staged}


Hold = Callable[["np.ndarray | None", Mapping[str, "np.ndarray"]], "np.ndarray"]
"""What the robot is commanded when the policy has nothing new: (last command, obs) -> action."""


@dataclass(frozen=True)
class Eval:
    """One suite on one embodiment: how to build its env, which rollouts to run, at what rate.

    `make_env(task)` builds a gymnasium env for a task; it is only called when a rollout runs,
    so declaring an Eval imports no simulator. `requires` names the modules the env needs and
    `extra` the install extra that provides them; `packages` are the distributions whose
    versions every Episode records. `codecs` holds how the Eval looks to a model by convention
    name (e.g. `openpi`: the keys, images, state and action slice an openpi server expects).
    """

    name: str
    make_env: Callable[[str], gym.Env]
    plan: Plan
    control_hz: float
    hold: Hold
    hold_name: str
    success_floor: float | None = None
    stop_on_success: bool = True
    requires: Sequence[str] = ()
    extra: str | None = None
    packages: Sequence[str] = ()
    scripted: Callable[[], Model] | None = None
    # The observation entries its expert reads (empty: all): what a run keeps of the rollouts
    # the expert is to be replayed on for a diagnosis (record/shadow.py), and no more.
    expert_reads: Sequence[str] = ()
    policy_facing: Sequence[str] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    codecs: Mapping[str, Codec] = field(default_factory=dict)
    install: str | None = None  # when `pip install 'policybench[extra]'` is not enough
    # The OpenGL library its env renders with ("mujoco": under MUJOCO_GL), checked before its
    # first rollout so that a backend which cannot render fails the Eval at once, not by hanging.
    renderer: str | None = None
    # A person stages its scenes and, optionally, judges its rollouts (None: self-driven).
    attended: Attended | None = None
    # Named quantities of its rollouts for trajectory specs (policybench.trajectory.signals): a
    # name to a function of the rollout's signals, one value or vector a step.
    signals: Mapping[str, Callable[[Mapping[str, np.ndarray]], np.ndarray]] = field(
        default_factory=dict
    )
    specs: Sequence[TrajectorySpec] = ()  # what every rollout is held to, beside its outcome
    # The env's own conventions (its actions' meaning, rotation, gripper, rate): what a model that
    # sees the env as it is (no codec) must follow; a codec declares its own.
    contract: Contract | None = None
    # The perturbation axes its env stages itself when a reset's options ask (`perturbation`;
    # policybench.perturbation), beside the noise axes every Eval has.
    perturbations: Mapping[str, Axis] = field(default_factory=dict)
    # Paraphrases of each task's instruction (task -> texts), shipped with its suite: the
    # `instruction` perturbation axis (level k plays the k-th).
    paraphrases: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.control_hz > 0:
            raise ValueError(f"Eval {self.name!r}: control_hz must be > 0, got {self.control_hz!r}")
        if self.success_floor is not None and not 0.0 <= self.success_floor <= 1.0:
            raise ValueError(
                f"Eval {self.name!r}: success_floor must lie in [0, 1], got {self.success_floor!r}"
            )

    @property
    def control_period_ns(self) -> int:
        return control_period_ns(self.control_hz)

    def rollouts(self, rollouts_per_task: int, base_seed: int) -> tuple[Rollout, ...]:
        return self.plan(self.name, rollouts_per_task, base_seed)

    @property
    def tasks(self) -> dict[str, str]:
        """Its tasks in plan order, each with its instruction."""
        return {r.scene.task: r.instruction for r in self.rollouts(1, 0)}
