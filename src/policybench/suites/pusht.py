"""PushT (gym-pusht): push a T-shaped block onto a target pose, seen as a 96x96 image plus the
agent's position. Its `scripted` policy is a pushing heuristic that works from the pixels."""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.envserver import isolable
from policybench.policy.base import Chunk, ChunkSource, Observation, SessionContext
from policybench.policy.codec import (
    Codec,
    action_dims,
    concat,
    expect_size,
    keep,
    prompt,
    rename,
)
from policybench.policy.contract import Contract, Image, actions_only
from policybench.spec import Eval, seeded_per_task

ENV_ID = "gym_pusht/PushT-v0"
CONTROL_HZ = 10.0  # gym-pusht's control_hz
MAX_STEPS = 300  # gym-pusht's registered episode limit
TASK = "push-t"
INSTRUCTION = "push the T-shaped block onto the T-shaped target"


class PushTObservation(gym.ObservationWrapper):
    """Names gym-pusht's `pixels` and `agent_pos` with the shared `image` and `state` keys."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        spaces = env.observation_space
        self.observation_space = gym.spaces.Dict(
            {keys.IMAGE: spaces["pixels"], keys.STATE: spaces["agent_pos"]}
        )

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {keys.IMAGE: observation["pixels"], keys.STATE: observation["agent_pos"]}


def make_env(task: str, scenes: str = "gym-pusht") -> gym.Env:
    """gym-pusht's env for `task`; `scenes`: which rule makes a seed a scene (SEED_RULES)."""
    import gym_pusht  # noqa: F401 - registers the env id

    if scenes not in SEED_RULES:
        raise ValueError(f"no PushT seed rule {scenes!r}; known: {', '.join(SEED_RULES)}")
    # gym-pusht's registration (episode limit and wrappers included), built from our subclass.
    spec = dataclasses.replace(gym.spec(ENV_ID), entry_point=pusht_env_class())
    env = gym.make(spec, obs_type="pixels_agent_pos", disable_env_checker=True)
    if scenes == DIFFUSION_POLICY:
        env = DiffusionPolicyScenes(env)
    return PushTObservation(env)


# How a seed becomes PushT's first state: gym-pusht draws it from the env's seeded generator
# (np_random) since 0.1.6; gym-pusht 0.1.5 and Diffusion Policy's own PushTEnv, behind the
# published PushT numbers, from `np.random.RandomState(seed)`: other scenes for the same seed.
GYM_PUSHT, DIFFUSION_POLICY = "gym-pusht", "diffusion-policy"
SEED_RULES = {
    GYM_PUSHT: "the installed gym-pusht's reset(seed) (np_random since 0.1.6)",
    DIFFUSION_POLICY: "Diffusion Policy's and gym-pusht 0.1.5's: np.random.RandomState(seed)",
}
DP_TEST_START_SEED = 100000  # Diffusion Policy's PushT runner's test_start_seed


def diffusion_policy_state(seed: int) -> np.ndarray:
    """The first state (agent x, y; block x, y, angle) Diffusion Policy's PushTEnv, and
    gym-pusht 0.1.5, stage for `seed`."""
    draws = np.random.RandomState(seed=seed)
    return np.array(
        [
            draws.randint(50, 450),
            draws.randint(50, 450),
            draws.randint(100, 400),
            draws.randint(100, 400),
            draws.randn() * 2 * np.pi - np.pi,
        ]
    )


class DiffusionPolicyScenes(gym.Wrapper):
    """PushT whose seed stages Diffusion Policy's scene for that seed (its first state given to
    gym-pusht's reset as `reset_to_state`, which stages it as a drawn one)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None:
            raise ValueError("Diffusion Policy's PushT scenes need a seed")
        state = diffusion_policy_state(seed)
        return self.env.reset(seed=seed, options={**(options or {}), "reset_to_state": state})


@functools.cache
def pusht_env_class() -> type[gym.Env]:
    """gym-pusht's PushTEnv, with the same frames made about 40 times faster.

    gym-pusht copies each 512x512 frame out of pygame through a strided 3-byte view and resizes
    the copy: about 3 ms of a 5 ms step. cv2 resizes each channel on its own, so resizing the
    surface's own 4-byte pixels, read in place, and then picking R, G and B gives the same bytes
    (tests/test_pusht_frames.py checks them against gym-pusht's own). Frames with the action's
    marker drawn on them (videos) and surfaces of another pixel size take gym-pusht's path."""
    import cv2
    import pygame
    from gym_pusht.envs.pusht import PushTEnv

    class FastFramesPushTEnv(PushTEnv):
        def _get_img(self, screen, width, height, render_action=False):
            if render_action or screen.get_bytesize() != 4:
                return super()._get_img(screen, width, height, render_action)
            pixels = pygame.surfarray.pixels2d(screen).T  # rows of 4-byte pixels, no copy
            channels = pixels.view(np.uint8).reshape(*pixels.shape, 4)
            return cv2.resize(channels, (width, height))[..., rgb_bytes(screen)]

    return FastFramesPushTEnv


def rgb_bytes(surface: Any) -> list[int]:
    """Where R, G and B sit among the 4 bytes of a 32-bit pygame surface's pixel in memory."""
    shifts = surface.get_shifts()[:3]
    return [s // 8 if sys.byteorder == "little" else 3 - s // 8 for s in shifts]


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Keep the last target position; before the first command, target where the agent is."""
    return np.asarray(obs[keys.STATE], dtype=np.float64) if last is None else last


# --- The scripted policy: a pushing heuristic that sees only the image and the agent position ---
#
# Geometry is gym-pusht's, in its block frame (origin mid top edge of the bar, stem along +y;
# world = origin + R(angle) @ local). The 96x96 image is the 512x512 world scaled down.

PIXEL = 512 / 96  # world units per image pixel
GOAL_POSE = np.array([256.0, 256.0, np.pi / 4])  # gym-pusht's fixed target: x, y, angle
RECTS = np.array([[-60.0, 0.0, 60.0, 30.0], [-15.0, 30.0, 15.0, 120.0]])  # bar, stem: x0 y0 x1 y1
AREA_CENTROID = np.array([0.0, (3600 * 15 + 2700 * 75) / 6300])  # what the pixel mean estimates
PIVOT = np.array([0.0, 45.0])  # the block's centre of gravity
GYRATION = np.sqrt(2550.0)  # sqrt(inertia / mass) of gym-pusht's block
AGENT_RADIUS = 15.0
ARENA = (25.0, 487.0)  # where the agent's centre can go without touching a wall
MARGIN = 2.0  # how close to the block the agent's edge may pass when walking round it
WAIT_GAP = 5.0  # how far off a contact the agent stops before pushing
MIN_BLOCK_PIXELS = 40


def _edge(
    start: tuple[float, float], end: tuple[float, float], normal: tuple[float, float], n: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """`n` contact points evenly spread from `start` to `end`, each with the inward `normal`."""
    points = np.linspace(start, end, n)
    return [(point, np.array(normal)) for point in points]


# Where the agent may push (block frame) and the inward normal it pushes along. Points keep
# clear of corners, and of the notch beside the stem where the agent does not fit.
CONTACTS = (
    _edge((-55, 0), (55, 0), (0, 1), 12)  # top of the bar
    + _edge((-60, 8), (-60, 22), (1, 0), 2)  # bar ends
    + _edge((60, 8), (60, 22), (-1, 0), 2)
    + _edge((-55, 30), (-40, 30), (0, -1), 2)  # underside of the bar
    + _edge((40, 30), (55, 30), (0, -1), 2)
    + _edge((-15, 55), (-15, 112), (1, 0), 5)  # stem sides
    + _edge((15, 55), (15, 112), (-1, 0), 5)
    + _edge((-8, 120), (8, 120), (0, -1), 3)  # stem end
)
CONTACT_POINTS = np.array([point for point, _ in CONTACTS])
CONTACT_NORMALS = np.array([normal for _, normal in CONTACTS])
# Waypoints for walking round the block: off each outer corner of the T, clear of both edges.
CORNERS = np.array(
    [[-60, 0], [60, 0], [60, 30], [-60, 30], [-15, 120], [15, 120]]
) + 21.0 * np.array([[-1, -1], [1, -1], [1, 1], [-1, 1], [-1, 1], [1, 1]])


def rotation(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s], [s, c]])


def wrap(angle: float) -> float:
    """The angle in [-pi, pi)."""
    return (angle + np.pi) % (2 * np.pi) - np.pi


def to_world(local: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """Block-frame points `[..., 2]` in the world, for a block at `pose` (x, y, angle)."""
    return local @ rotation(pose[2]).T + pose[:2]


def to_block(world: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """World points `[..., 2]` in the frame of a block at `pose`."""
    return (world - pose[:2]) @ rotation(pose[2])


def outside_distance(local: np.ndarray) -> np.ndarray:
    """Distance from block-frame points `[N, 2]` to the T (0 inside it)."""
    lo, hi = RECTS[:, :2], RECTS[:, 2:]
    gap = np.maximum(np.maximum(lo - local[:, None], local[:, None] - hi), 0.0)
    return np.linalg.norm(gap, axis=-1).min(axis=1)


def block_pixels(image: np.ndarray) -> np.ndarray:
    """World positions `[N, 2]` of the pixels showing the block (slate grey, also when blended
    with the white floor or green target, but not with the blue agent)."""
    r, g, b = (image[..., i].astype(np.float64) for i in range(3))
    bluish = b - r
    mask = (bluish >= 12) & (b >= g) & (r < 215) & (bluish < 0.5 * (256 - r))
    rows, cols = np.nonzero(mask)
    return (np.stack([cols, rows], axis=1) + 0.5) * PIXEL


def fit_angle(points: np.ndarray, centroid: np.ndarray, angles: np.ndarray) -> float:
    """The angle in `angles` at which a T with its area centroid at `centroid` best covers
    `points` (each scores its depth inside the T, clipped to a pixel either way)."""
    offsets = points - centroid
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    x = cos * offsets[:, 0] + sin * offsets[:, 1] + AREA_CENTROID[0]
    y = -sin * offsets[:, 0] + cos * offsets[:, 1] + AREA_CENTROID[1]
    depth = [
        np.minimum(np.minimum(x - x0, x1 - x), np.minimum(y - y0, y1 - y))
        for x0, y0, x1, y1 in RECTS
    ]
    score = np.clip(np.maximum(*depth), -PIXEL, PIXEL).sum(axis=1)
    return float(angles[np.argmax(score)])


def estimate_pose(image: np.ndarray) -> np.ndarray | None:
    """The block's pose (x, y, angle), as gym-pusht states it, from the image; None if unseen.

    The pixel mean gives the area centroid; the angle comes from fitting the T's outline,
    first on a 3 degree grid and then on a quarter-degree one around the best.
    """
    points = block_pixels(image)
    if len(points) < MIN_BLOCK_PIXELS:
        return None
    centroid = points.mean(axis=0)
    angle = fit_angle(points, centroid, np.radians(np.arange(0.0, 360.0, 3.0)))
    angle = fit_angle(points, centroid, angle + np.radians(np.arange(-3.0, 3.01, 0.25)))
    origin = centroid - rotation(angle) @ AREA_CENTROID
    return np.array([*origin, wrap(angle)])


def pose_error(pose: np.ndarray, rotation_weight: float) -> np.ndarray:
    """How far the block is from the goal: pivot offset and angle error (as an arc length)."""
    shift = to_world(PIVOT, GOAL_POSE) - to_world(PIVOT, pose)
    turn = wrap(GOAL_POSE[2] - pose[2]) * GYRATION * rotation_weight
    return np.array([*shift, turn])


def push_effects(pose: np.ndarray) -> np.ndarray:
    """Per contact, the block's motion (pivot shift, turn as an arc) per unit of push: a push
    along n at lever r shifts the pivot along n and turns the block by r x n / gyration^2."""
    normals = CONTACT_NORMALS @ rotation(pose[2]).T
    levers = (CONTACT_POINTS - PIVOT) @ rotation(pose[2]).T
    torque = levers[:, 0] * normals[:, 1] - levers[:, 1] * normals[:, 0]
    return np.column_stack([normals, torque / GYRATION])


def standoffs(pose: np.ndarray, gap: float) -> np.ndarray:
    """Where the agent's centre waits `gap` off each contact point before pushing."""
    normals = CONTACT_NORMALS @ rotation(pose[2]).T
    return to_world(CONTACT_POINTS, pose) - normals * (AGENT_RADIUS + gap)


def clear_paths(starts: np.ndarray, ends: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """`[N, M]`: whether the agent can move straight from each start to each end without
    coming within MARGIN of the block."""
    length = np.linalg.norm(ends[None] - starts[:, None], axis=-1).max(initial=0.0)
    t = np.linspace(0.0, 1.0, max(2, int(length / 4.0) + 1))[:, None]
    paths = starts[:, None, None] + (ends[None, :, None] - starts[:, None, None]) * t
    gaps = outside_distance(to_block(paths.reshape(-1, 2), pose)).reshape(paths.shape[:3])
    return gaps.min(axis=-1) > AGENT_RADIUS + MARGIN


def in_arena(points: np.ndarray) -> np.ndarray:
    """Whether each point `[..., 2]` is somewhere the agent's centre can be."""
    return ((points >= ARENA[0]) & (points <= ARENA[1])).all(axis=-1)


def routes(agent: np.ndarray, goals: np.ndarray, pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shortest way from `agent` to each of `goals` [M, 2] that keeps clear of the block
    and in the arena: its length (inf if there is none) and its first waypoint. Ways run
    straight or through waypoints off the T's outer corners (a visibility graph)."""
    corners = to_world(CORNERS, pose)
    usable = in_arena(corners)[:, None]
    hop = np.where(
        clear_paths(corners, corners, pose) & usable & usable.T,
        _distances(corners, corners),
        np.inf,
    )
    np.fill_diagonal(hop, 0.0)
    for k in range(len(corners)):  # Floyd-Warshall: shortest corner-to-corner ways
        hop = np.minimum(hop, hop[:, k : k + 1] + hop[k : k + 1])
    to_goal = np.where(clear_paths(corners, goals, pose), _distances(corners, goals), np.inf)
    corner_to_goal = (hop[:, :, None] + to_goal[None]).min(axis=1)
    reach = np.where(
        clear_paths(agent[None], corners, pose), _distances(agent[None], corners), np.inf
    )
    via = np.where(usable, reach.T + corner_to_goal, np.inf)  # [corners, goals]
    direct = np.where(
        clear_paths(agent[None], goals, pose), _distances(agent[None], goals), np.inf
    )[0]
    length = np.where(in_arena(goals), np.minimum(direct, via.min(axis=0)), np.inf)
    first = np.where((direct <= length)[:, None], goals, corners[via.argmin(axis=0)])
    return length, first


def _distances(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    return np.linalg.norm(ends[None] - starts[:, None], axis=-1)


def step_towards(start: np.ndarray, end: np.ndarray, max_step: float) -> np.ndarray:
    """`end`, or the point `max_step` from `start` on the way there (a gentler walk)."""
    offset = end - start
    distance = np.linalg.norm(offset)
    return end if distance <= max_step else start + offset * (max_step / distance)


def back_off(agent: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """Where the agent must first step to walk round the block: nowhere if it is clear of it,
    else straight away from the block's nearest point until it is."""
    local = to_block(agent, pose)
    nearest = np.clip(local, RECTS[:, :2], RECTS[:, 2:])
    offsets = local - nearest
    gaps = np.linalg.norm(offsets, axis=1)
    gap, offset = gaps.min(), offsets[np.argmin(gaps)]
    if gap > AGENT_RADIUS + MARGIN:
        return agent
    away = rotation(pose[2]) @ (offset / max(gap, 1e-9))
    return agent + away * (AGENT_RADIUS + MARGIN + 1.0 - gap)


@dataclass(frozen=True)
class PushTHeuristic:
    """A scripted PushT policy that works from pixels: it estimates the block's pose from the
    image, picks the contact whose push best moves the block towards the goal pose (a
    quasi-static model: push along the normal, turn by the lever), walks the agent around the
    block to that contact and pushes, re-planning every step. One action per chunk."""

    rotation_weight: float = 1.0
    switch_margin: float = 0.15  # how much better another contact must score to switch
    travel_cost: float = 0.1  # score lost per 100 world units of walking to a contact
    name: str = "scripted"

    def open(self, context: SessionContext) -> ChunkSource:
        fps = context.control_hz
        contact: int | None = None
        pushing = False

        def predict(obs: Observation) -> Chunk:
            nonlocal contact, pushing
            agent = np.asarray(obs[keys.STATE], dtype=np.float64)
            pose = estimate_pose(np.asarray(obs[keys.IMAGE]))
            if pose is None:
                return Chunk(agent[None], fps)
            start = back_off(agent, pose)
            lengths, firsts = routes(start, standoffs(pose, WAIT_GAP), pose)
            best = self.choose_contact(pose, lengths, contact)
            if best != contact:
                contact, pushing = best, False
            waypoint = firsts[contact] if start is agent else start
            target, pushing = self.command(pose, agent, waypoint, contact, pushing)
            return Chunk(np.clip(target, *ARENA)[None], fps)

        return predict

    def choose_contact(self, pose: np.ndarray, walks: np.ndarray, current: int | None) -> int:
        """The contact whose push heads best towards the goal pose, less a cost for the walk
        there (unreachable ones only if none is reachable); the current one is kept unless
        another is clearly better."""
        error = pose_error(pose, self.rotation_weight)
        effects = push_effects(pose)
        effects[:, 2] *= self.rotation_weight
        score = effects @ error / (np.linalg.norm(effects, axis=1) * np.linalg.norm(error) + 1e-9)
        score -= self.travel_cost * walks / 100.0
        if current is not None:
            score[current] += self.switch_margin
        return int(np.argmax(score))

    def command(
        self, pose: np.ndarray, agent: np.ndarray, waypoint: np.ndarray, contact: int, pushing: bool
    ) -> tuple[np.ndarray, bool]:
        """Where to send the agent, and whether it is now pushing: walk (via `waypoint`) to the
        standoff of `contact`, then push through the contact point by a step that shrinks with
        the error."""
        wait = standoffs(pose, WAIT_GAP)[contact]
        touch = standoffs(pose, 0.0)[contact]
        if pushing and np.linalg.norm(agent - touch) > 12.0:  # slid off the contact
            pushing = False
        if not pushing and np.linalg.norm(agent - wait) < 5.0:
            pushing = True
        if pushing:
            normal = rotation(pose[2]) @ CONTACT_NORMALS[contact]
            depth = float(np.clip(0.5 * np.linalg.norm(pose_error(pose, 1.0)), 3.0, 25.0))
            return touch + normal * depth, True
        return step_towards(agent, waypoint, 60.0), False

    def describe(self) -> dict[str, Any]:
        return {
            keys.POLICY_NAME: self.name,
            "heuristic": "pixel pose estimate + quasi-static contact choice",
            "rotation_weight": self.rotation_weight,
            "switch_margin": self.switch_margin,
            "travel_cost": self.travel_cost,
        }


def _contract(image: str) -> Contract:
    """What a PushT model follows: the agent's target position (absolute, in pixels) at 10 Hz,
    the 96x96 image upright under the key `image`, the agent's position as the state."""
    return Contract(
        action="eef-absolute",
        rotation="none",
        control_hz=CONTROL_HZ,
        images={image: Image(96, 96)},
        state=("agent_pos:2",),
    )


# openpi's keys in the style of its LIBERO example: the 96x96 image, upright as gym-pusht renders
# it, as `observation/image`; the agent position as `observation/state`; the instruction as the
# prompt; the first 2 action dimensions (the target position) are played.
OPENPI = Codec(
    "openpi",
    (
        expect_size(keys.IMAGE, height=96, width=96),
        rename({keys.IMAGE: "observation/image"}),
        concat(keys.STATE, into="observation/state"),
        keep("observation/image", "observation/state"),
        prompt(),
        action_dims(2),
    ),
    _contract("observation/image"),
)

# LeRobot's PushT conventions (lerobot.envs: `pixels` -> `observation.image`, `agent_pos` ->
# `observation.state`, the instruction as `task`; the policy adapter turns the uint8 HxWxC image
# into float CxHxW in [0, 1]); the 2-d action is the agent's target position.
LEROBOT = Codec(
    "lerobot",
    (
        expect_size(keys.IMAGE, height=96, width=96),
        rename({keys.IMAGE: "observation.image"}),
        concat(keys.STATE, into="observation.state"),
        keep("observation.image", "observation.state"),
        prompt("task"),
        action_dims(2),
    ),
    _contract("observation.image"),
)


def pusht(scripted: Any = None, scenes: str = GYM_PUSHT) -> Eval:
    """PushT with the seed rule `scenes` names: the installed gym-pusht's (Eval `pusht`), or
    Diffusion Policy's (`pusht-dp`, seeds from its test_start_seed as its runner's tests)."""
    dp = scenes == DIFFUSION_POLICY
    return Eval(
        name="pusht-dp" if dp else "pusht",
        make_env=isolable(make_env, renders=False, scenes=scenes),
        plan=seeded_per_task(
            {TASK: INSTRUCTION},
            timeout_s=MAX_STEPS / CONTROL_HZ,
            first_seed=DP_TEST_START_SEED if dp else 0,
        ),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="hold last target",
        requires=("gym_pusht",),
        extra="pusht",
        packages=("gym-pusht", "pymunk", "gymnasium"),
        scripted=scripted,
        expert_reads=(keys.STATE, keys.IMAGE),
        # The rule, beside the gym-pusht version every record holds (its packages).
        metadata={"observation": "image 96x96 + agent_pos", "seed_rule": SEED_RULES[scenes]},
        codecs={"openpi": OPENPI, "lerobot": LEROBOT},
        contract=actions_only(OPENPI.contract),
    )


PUSHT = pusht(scripted=PushTHeuristic)
PUSHT_DP = pusht(scripted=PushTHeuristic, scenes=DIFFUSION_POLICY)
