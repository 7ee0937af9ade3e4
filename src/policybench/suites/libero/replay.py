"""Replays LIBERO resets without running them: numpy's global RNG and the env's per-build state
advance exactly as hard resets would advance them, at a few hundredths of a second each.

A LIBERO reset is a hard reset: robosuite rebuilds the model, recompiles it (seconds) and makes a
new renderer, then draws object placements from numpy's global RNG. How many numbers it draws
depends on the draws (a placement that collides is drawn again) and on where the compiled model
puts its sites, so a replay runs the env's own reset code on the already compiled sim put back
to its freshly compiled state, and skips only the recompile and the renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree

import numpy as np


@dataclass(frozen=True)
class BodyPoses:
    """`body_pos` and `body_quat` of a freshly compiled model: the only model fields a LIBERO
    reset writes (it moves fixtures by setting their bodies' poses)."""

    pos: np.ndarray
    quat: np.ndarray


_FRESH_POSES: dict[str, BodyPoses] = {}


def fresh_poses(env: Any, key: str) -> BodyPoses:
    """The body poses of `env`'s model as a hard reset compiles it (compiled once per `key`, the
    task's file, in a process: a second or more). The copy compiled here has no textures and no
    visual-only geoms: neither moves a body, and a LIBERO scene's textures (two of them 4096 x
    4096) and visual meshes (a million vertices) would add about 600 MB to the process' peak
    while the env's own model is live."""
    if key not in _FRESH_POSES:
        import mujoco

        xml = env.model.get_xml()
        if env._xml_processor is not None:  # as robosuite's _initialize_sim
            xml = env._xml_processor(xml)
        model = mujoco.MjModel.from_xml_string(bodies_only(xml))
        _FRESH_POSES[key] = BodyPoses(model.body_pos.copy(), model.body_quat.copy())
    return _FRESH_POSES[key]


def bodies_only(xml: str) -> str:
    """A MuJoCo model file reduced to what places its bodies: the same bodies and joints, with
    the `<texture>` assets (and every material's reference to one) taken out and the compiler
    told to discard visual-only geoms (`discardvisual`: contype and conaffinity both 0)."""
    root = ElementTree.fromstring(xml)
    for parent in root.iter():
        for child in list(parent):
            if child.tag == "texture" or (parent.tag == "material" and child.tag == "layer"):
                parent.remove(child)
        if parent.tag == "material":
            parent.attrib.pop("texture", None)
    compiler = root.find("compiler")
    if compiler is None:
        compiler = ElementTree.SubElement(root, "compiler")
    compiler.set("discardvisual", "true")
    return ElementTree.tostring(root, encoding="unicode")


def replay_resets(env: Any, count: int, poses: BodyPoses) -> None:
    """Advances numpy's global RNG, and `env`'s list of joint samplers, exactly as `count` calls
    of LIBERO's `ControlEnv.reset()` on the robosuite env `env` would. Each replayed reset
    rebuilds the model's description (as a hard reset does, appending its joint samplers),
    returns the compiled sim to its freshly compiled state and runs the env's reset draws;
    a placement that fails is drawn again from a new build, as LIBERO's reset retries it.
    The sim is left mid-reset: a real reset must follow before the env is used."""
    from robosuite.utils.errors import RandomizationError

    sim = env.sim
    for _ in range(count):
        while True:
            env._load_model()
            sim.reset()
            sim.model.body_pos[:] = poses.pos
            sim.model.body_quat[:] = poses.quat
            sim.forward()
            try:
                env._reset_internal()
                break
            except RandomizationError:
                continue
