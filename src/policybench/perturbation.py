"""Perturbation axes: seeded transformations of a scene, each with a level (0: the scene as it
is), that a run sweeps (`--perturb AXIS=LEVELS`) to find where a policy's success breaks.

Three kinds of axis. Every Eval has the noise axes, applied between the env and the policy (the
World adds them): `action_noise` (Gaussian noise on each action, its standard deviation the
level times half the action space's range, clipped to the space) and `obs_noise` (Gaussian
noise on the `state` vector, the level its standard deviation). An Eval adds the axes its env
stages itself (`Eval.perturbations`: MuJoCo suites move cameras and dim lights), which the World
asks for through the reset's options (`perturbation`), so an env in an interpreter of its own
stages them too. An Eval with paraphrases of its tasks' instructions (`Eval.paraphrases`, shipped
text, no model call) has the `instruction` axis: level k gives each rollout its task's k-th
paraphrase in place of the instruction, and changes nothing else.

A perturbation is seeded by its scene and axis alone: at every level a scene's draws are the
same numbers, scaled by the level (common random numbers, so the levels compare pairwise), on
any worker and in any order. A rollout's record names its perturbation; a World replays it from
the record's scene and perturbation (`World(eval).reset(scene, Perturbation(axis, level))`).
"""

from __future__ import annotations

import collections
import itertools
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

if __package__:  # policybench.perturbation
    from policybench import keys
else:  # a leaf module beside an env server in another interpreter (Isolated(modules=...))
    import keys

PERTURBATION = keys.PERTURBATION  # the reset option, and the record field, that name one
NONE = "none"  # the arm of the unperturbed scenes, which every level is compared with


@dataclass(frozen=True)
class Axis:
    """A way to perturb a scene: its name, the range of its levels, what a level means; an
    axis of `whole` levels takes 1, 2, ... (a set, as paraphrases), not a magnitude."""

    name: str
    high: float  # levels lie in [0, high]
    unit: str
    doc: str
    whole: bool = False

    def problem(self, level: float) -> str | None:
        """Why `level` is not one of this axis's, or None."""
        if 0 <= level <= self.high and (not self.whole or level == int(level)):
            return None
        kind = "not a whole number in" if self.whole else "outside"
        return f"{self.name} level {level:g} is {kind} [0, {self.high:g}] ({self.unit})"

    def __str__(self) -> str:
        return f"{self.name} [0, {self.high:g}] {self.unit}"


@dataclass(frozen=True)
class Perturbation:
    """One axis at one level."""

    axis: str
    level: float

    @property
    def label(self) -> str:
        """How items and reports name it: `action_noise-0.1`."""
        return f"{self.axis}-{self.level:g}"

    def as_json(self) -> dict[str, Any]:
        return {"axis": self.axis, "level": self.level}

    @property
    def parts(self) -> tuple[Perturbation, ...]:
        return (self,)

    def draws(self, seed: int) -> np.random.Generator:
        """The scene's draws for this axis: the same at every level (see the module's doc)."""
        return np.random.default_rng([seed, zlib.crc32(self.axis.encode())])


@dataclass(frozen=True)
class Grid:
    """A cell of a grid of axes (`--perturb-grid`): one level of each, all at once. Each part
    draws what it draws alone, so a cell and its parts' own arms share their random numbers."""

    parts: tuple[Perturbation, ...]

    @property
    def label(self) -> str:
        """`camera_pose-0.1+action_noise-0.5`."""
        return "+".join(part.label for part in self.parts)

    def as_json(self) -> dict[str, Any]:
        return {GRID: [part.as_json() for part in self.parts]}


GRID = "grid"  # a grid cell's parts, in its record


def from_json(given: Mapping[str, Any]) -> Perturbation | Grid:
    """The perturbation a record (or run.json) names, as as_json wrote it."""
    if GRID in given:
        return Grid(tuple(Perturbation(p["axis"], float(p["level"])) for p in given[GRID]))
    return Perturbation(given["axis"], float(given["level"]))


ACTION_NOISE = Axis(
    "action_noise",
    1.0,
    "std / half the action range",
    "Gaussian noise on every action, clipped to the action space",
)
OBS_NOISE = Axis("obs_noise", 1.0, "std of the state", "Gaussian noise on the state vector")
ACTION_DELAY = Axis(
    "action_delay",
    10,
    "control steps",
    "every action played that many control steps late (the Eval's hold until the first one "
    "arrives), beside any inference latency",
    whole=True,
)
NOISE_AXES = {axis.name: axis for axis in (ACTION_NOISE, OBS_NOISE, ACTION_DELAY)}


INSTRUCTION = "instruction"


def axes_of(eval: Any) -> dict[str, Axis]:
    """The axes `eval` can be perturbed along: the noise axes, those its env stages, and the
    instruction's when it has paraphrases (as many levels as its tasks' fewest)."""
    axes = {**NOISE_AXES, **dict(getattr(eval, "perturbations", {}))}
    paraphrases = getattr(eval, "paraphrases", {})
    if paraphrases:
        fewest = min(len(texts) for texts in paraphrases.values())
        doc = "level k: each task's k-th shipped paraphrase in place of its instruction"
        axes[INSTRUCTION] = Axis(INSTRUCTION, fewest, "paraphrase number", doc, whole=True)
    return axes


def perturbed(rollout: Any, perturbation: Perturbation | Grid | None, eval: Any) -> Any:
    """`rollout` under `perturbation`: the same scene (and id), and for the instruction axis its
    task's paraphrase in place of the instruction."""
    if perturbation is None:
        return rollout
    said = getattr(eval, "paraphrases", {}).get(rollout.scene.task, ())
    for part in perturbation.parts:
        level = int(part.level)
        if part.axis == INSTRUCTION and 1 <= level <= len(said):  # else refused later
            return replace(rollout, perturbation=perturbation, instruction=said[level - 1])
    return replace(rollout, perturbation=perturbation)


def staged_by_env(eval: Any, perturbation: Perturbation | Grid | None) -> tuple[Perturbation, ...]:
    """The parts of `perturbation` that `eval`'s env stages itself."""
    staged = getattr(eval, "perturbations", {})
    return () if perturbation is None else tuple(p for p in perturbation.parts if p.axis in staged)


class Noise:
    """The noise axes of one rollout, applied by the World: each axis's draws seeded per scene;
    a delay plays each action `level` steps late, `hold()` (the Eval's hold) before the first."""

    def __init__(
        self, perturbation: Perturbation | Grid, seed: int, hold: Callable[[], Any] = list
    ) -> None:
        self.levels = {p.axis: p.level for p in perturbation.parts if p.axis in NOISE_AXES}
        self.rngs = {p.axis: p.draws(seed) for p in perturbation.parts if p.axis in NOISE_AXES}
        self.hold = hold
        self.delayed: collections.deque[Any] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self.levels)

    def action(self, action: np.ndarray, bounds: tuple[np.ndarray, np.ndarray] | None) -> Any:
        delay = int(self.levels.get(ACTION_DELAY.name, 0))
        if delay:
            self.delayed.append(action)
            action = self.delayed.popleft() if len(self.delayed) > delay else self.hold()
        level = self.levels.get(ACTION_NOISE.name)
        if level is None:
            return action
        if bounds is None:
            raise ValueError("action_noise needs an env with a bounded (Box) action space")
        low, high = bounds
        draw = self.rngs[ACTION_NOISE.name].standard_normal(np.shape(action))
        noisy = action + level * draw * (high - low) / 2
        return np.clip(noisy, low, high).astype(np.asarray(action).dtype)

    def observation(self, obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        level = self.levels.get(OBS_NOISE.name)
        if level is None or keys.STATE not in obs:
            return dict(obs)
        state = np.asarray(obs[keys.STATE])
        draw = self.rngs[OBS_NOISE.name].standard_normal(state.shape)
        return {**obs, keys.STATE: (state + level * draw).astype(state.dtype)}


def parse_perturb(values: Sequence[str], grid: bool = False) -> tuple[Perturbation | Grid, ...]:
    """The perturbations of `--perturb AXIS=LEVELS` values (each `axis=0.05,0.1`; repeatable),
    level 0 left out (the unperturbed arm runs anyway), and under `grid` (--perturb-grid) every
    combination of one level of each axis after them. ValueError naming what came."""
    found = _levels(values)
    axes = list(dict.fromkeys(p.axis for p in found))
    if not grid:
        return found
    if len(axes) < 2:
        raise ValueError(
            f"--perturb-grid combines the levels of two or more axes, but --perturb names "
            f"{len(axes)} ({', '.join(axes) or 'none'}); add another --perturb AXIS=LEVELS"
        )
    levels = [[p for p in found if p.axis == axis] for axis in axes]
    return (*found, *(Grid(cell) for cell in itertools.product(*levels)))


def _levels(values: Sequence[str]) -> tuple[Perturbation, ...]:
    found: list[Perturbation] = []
    for value in values:
        axis, equals, levels = value.partition("=")
        try:
            if not equals or not axis.strip():
                raise ValueError
            numbers = [float(level) for level in levels.split(",")]
        except ValueError:
            raise ValueError(
                f"--perturb takes AXIS=LEVELS (levels joined by commas, e.g. "
                f"action_noise=0.05,0.1), got {value!r}"
            ) from None
        found += [Perturbation(axis.strip(), level) for level in numbers if level != 0]
    labels = [p.label for p in found]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"--perturb names {', '.join(repeated)} more than once")
    return tuple(found)


def refusals(eval: Any, perturbations: Sequence[Perturbation | Grid]) -> str | None:
    """Why `eval` cannot run `perturbations` (an axis it lacks, a level out of range), naming
    its axes and their ranges; None when it can."""
    axes = axes_of(eval)
    problems = []
    for perturbation in (part for given in perturbations for part in given.parts):
        axis = axes.get(perturbation.axis)
        problem = (
            f"{eval.name} has no axis {perturbation.axis!r}"
            if axis is None
            else axis.problem(perturbation.level)
        )
        if problem is not None and problem not in problems:
            problems.append(problem)
    if not problems:
        return None
    return (
        f"--perturb: {'; '.join(problems)}; {eval.name}'s axes: "
        f"{', '.join(str(axis) for axis in axes.values())}"
    )


# --- axes a MuJoCo env stages on its model -------------------------------------------------------


CAMERA_POSE = Axis(
    "camera_pose", 0.2, "metres", "every fixed camera moved by the level, in a seeded direction"
)
LIGHTING = Axis(
    "lighting", 0.9, "share of light taken", "every light's diffuse and ambient dimmed by the level"
)
COLOUR = Axis(
    "colour",
    0.5,
    "RGB shift",
    "every geom's and material's colour shifted by the level, in a seeded direction each",
)
TEXTURE = Axis(
    "texture",
    1.0,
    "share of textured materials",
    "that share of the textured materials given another of the model's textures of the same "
    "kind, both seeded",
)
MUJOCO_AXES = {axis.name: axis for axis in (CAMERA_POSE, LIGHTING, COLOUR, TEXTURE)}
INITIAL_STATE = Axis(
    "initial_state",
    0.05,
    "metres",
    "every free body (the objects) moved in the table's plane by the level, in a seeded "
    "direction each, once the scene is staged",
)


class MujocoStaging:
    """Stages the MuJoCo axes on a model: at each reset, the model's cameras, lights and
    colours as they were built, then the reset's perturbation (if any) on top. Only what
    renders changes: a camera's position, a light's and a geom's colour are not physics."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.originals = {
            name: np.array(getattr(model, name))
            for name in (
                "cam_pos",
                "light_diffuse",
                "light_ambient",
                "geom_rgba",
                "mat_rgba",
                "mat_texid",
            )
        }

    def stage(self, options: Mapping[str, Any] | None) -> None:
        for name, original in self.originals.items():
            getattr(self.model, name)[:] = original
        for perturbation, seed in _staged_parts(options):
            if perturbation.axis in STAGES:
                STAGES[perturbation.axis](self.model, perturbation.level, perturbation.draws(seed))

    def sync(self, context: Any) -> None:
        """The model's material textures into a renderer's context (an MjrContext): MuJoCo 3
        copies them there when the context is made, and draws from that copy (MuJoCo 2 draws
        from the model's, and its context holds none)."""
        if context is not None and hasattr(context, "mat_texid"):
            context.mat_texid[: self.model.mat_texid.size] = self.model.mat_texid.ravel()

    def displace(self, data: Any, options: Mapping[str, Any] | None) -> bool:
        """The initial-state axis, on `data` once the reset has staged its scene: each free
        body's position moved by the level in the table's plane (a seeded direction each), the
        model's state then computed again (mj_forward). Returns whether it moved anything, so
        that the env observes the scene anew."""
        import mujoco

        moved = False
        for perturbation, seed in _staged_parts(options):
            if perturbation.axis != INITIAL_STATE.name:
                continue
            rng = perturbation.draws(seed)
            for joint in np.flatnonzero(self.model.jnt_type == mujoco.mjtJoint.mjJNT_FREE):
                angle = rng.uniform(0, 2 * np.pi)
                at = self.model.jnt_qposadr[joint]
                data.qpos[at : at + 2] += perturbation.level * np.array(
                    [np.cos(angle), np.sin(angle)]
                )
                moved = True
        if moved:
            mujoco.mj_forward(self.model, data)
        return moved


def _staged_parts(options: Mapping[str, Any] | None) -> list[tuple[Perturbation, int]]:
    """The perturbations a reset's options ask the env to stage, each with its scene's seed."""
    given = (options or {}).get(PERTURBATION) or []
    return [
        (Perturbation(part["axis"], float(part["level"])), int(part[keys.SEED]))
        for part in ([given] if isinstance(given, Mapping) else given)  # a grid cell: a list
    ]


def _move_cameras(model: Any, level: float, rng: np.random.Generator) -> None:
    directions = rng.standard_normal(model.cam_pos.shape)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    model.cam_pos[:] += level * directions


def _dim_lights(model: Any, level: float, rng: np.random.Generator) -> None:
    model.light_diffuse[:] *= 1 - level
    model.light_ambient[:] *= 1 - level


def _recolour(model: Any, level: float, rng: np.random.Generator) -> None:
    for name in ("geom_rgba", "mat_rgba"):  # a geom shows its material's colour when it has one
        colours = getattr(model, name)
        directions = rng.standard_normal((len(colours), 3))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
        colours[:, :3] = np.clip(colours[:, :3] + level * directions, 0, 1)


def _retexture(model: Any, level: float, rng: np.random.Generator) -> None:
    """The textured materials in a seeded order, each with a seeded other texture of its
    texture's kind (2D, cube, skybox): the first `level` share of them take it. The draws are
    the same at every level, so a higher level changes what a lower one did, and more. A
    material's textures are one per role since MuJoCo 3.2 (a 2-d mat_texid), one before (1-d)."""
    textured = [tuple(where) for where in np.argwhere(model.mat_texid >= 0)]
    order, picks = rng.permutation(len(textured)), rng.random(len(textured))
    for index in order[: round(level * len(textured))]:
        texture = model.mat_texid[textured[index]]
        others = np.flatnonzero(model.tex_type == model.tex_type[texture])
        others = others[others != texture]
        if len(others):
            model.mat_texid[textured[index]] = others[int(picks[index] * len(others))]


STAGES: dict[str, Callable[[Any, float, np.random.Generator], None]] = {
    CAMERA_POSE.name: _move_cameras,
    LIGHTING.name: _dim_lights,
    COLOUR.name: _recolour,
    TEXTURE.name: _retexture,
}


def reset_options(
    fields: Mapping[str, Any], perturbation: Perturbation | Grid | None, seed: int, eval: Any
) -> dict[str, Any] | None:
    """The options of a scene's reset: its fields, and the perturbation its env stages (a
    grid cell's parts its env stages: a list of them)."""
    options = dict(fields)
    staged = [{**part.as_json(), keys.SEED: seed} for part in staged_by_env(eval, perturbation)]
    if staged:
        options[PERTURBATION] = staged if isinstance(perturbation, Grid) else staged[0]
    return options or None
