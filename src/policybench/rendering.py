"""Whether this machine renders with an Eval's OpenGL library under the configured MUJOCO_GL:
asked once per process, in a child process with a deadline, so that a backend which fails or
hangs is reported before an Eval's first rollout instead of hanging its first reset."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policybench.spec import Eval

MUJOCO = "mujoco"  # an Eval's `renderer`: MuJoCo's OpenGL, which honours MUJOCO_GL
# SAPIEN's Vulkan renderer (ManiSkill's), which needs a Vulkan device even to build a scene. A
# device is the machine's, not a setting: an Eval that needs one is skipped where there is none.
SAPIEN = "sapien"
NEEDS_DEVICE = (SAPIEN,)

# One frame of a one-geom model: what every MuJoCo camera of a suite needs from the backend.
# It prints why it failed as its last line of output.
RENDER_ONE_FRAME = """
import sys
try:
    import mujoco
    model = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><light pos="0 0 1"/><geom size=".1"/></worldbody></mujoco>'
    )
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    renderer = mujoco.Renderer(model, 32, 32)  # no context manager before MuJoCo 3
    renderer.update_scene(data)
    frame = renderer.render()
    getattr(renderer, "close", lambda: None)()
    assert frame.shape == (32, 32, 3) and frame.any(), "it rendered an empty frame"
except Exception as error:
    print(f"{type(error).__name__}: {error}")
    sys.exit(1)
"""

# SAPIEN's render system, which ManiSkill's envs build first; its last line says why not.
FIND_VULKAN_DEVICE = """
import sys
try:
    import sapien
    sapien.render.RenderSystem()
except Exception as error:
    print(f"{type(error).__name__}: {error}")
    sys.exit(1)
"""
SAPIEN_FIX = (
    "install a Vulkan driver: Mesa's lavapipe >= 25 on a machine without a GPU (Debian 12: add "
    "the bookworm-backports suite, then apt-get install -t bookworm-backports "
    "mesa-vulkan-drivers; .ci/setup does this), or a GPU's Vulkan driver"
)

DEADLINE_S = 60.0


def render_problem(
    renderer: str | None, deadline_s: float = DEADLINE_S, python: str | None = None
) -> str | None:
    """Why `renderer` cannot render here under the current MUJOCO_GL; None when it can (or
    the Eval renders nothing that needs it). `python`: the interpreter the env renders in (an
    isolated Eval's), default this one."""
    if renderer is None:
        return None
    if renderer == SAPIEN:
        return _vulkan_problem(deadline_s, python or sys.executable)
    if renderer != MUJOCO:
        raise ValueError(
            f"unknown renderer {renderer!r}; policybench checks {MUJOCO!r}, {SAPIEN!r}"
        )
    return _mujoco_problem(os.environ.get("MUJOCO_GL"), deadline_s, python or sys.executable)


def env_render_problem(eval: Eval) -> str | None:
    """render_problem for `eval`'s renderer where its env renders: in its own interpreter for
    an isolated Eval (Isolated.render_problem), else here."""
    render_problem_there = getattr(eval.make_env, "render_problem", None)
    if render_problem_there is not None:
        return render_problem_there(eval.renderer)
    return render_problem(eval.renderer)


@functools.cache
def _mujoco_problem(
    backend: str | None, deadline_s: float, python: str, script: str = RENDER_ONE_FRAME
) -> str | None:
    shown = f"MUJOCO_GL={backend}" if backend else "MUJOCO_GL unset (MuJoCo then wants a display)"
    fix = (
        "set MUJOCO_GL=egl (or osmesa) with the system's libraries installed "
        "(apt-get install libegl1 libgl1 libosmesa6)"
    )
    try:
        done = subprocess.run(
            [python, "-c", script],
            capture_output=True,
            text=True,
            timeout=deadline_s,
        )
    except subprocess.TimeoutExpired:
        return (
            f"MuJoCo did not render one frame within {deadline_s:g} s under {shown}: the "
            f"backend hangs here; {fix}"
        )
    if done.returncode != 0:
        output = (done.stdout.strip() or done.stderr.strip()).splitlines()
        last = output[-1] if output else f"exit status {done.returncode}"
        return f"MuJoCo cannot render under {shown}: {last}; {fix}"
    return None


@functools.cache
def _vulkan_problem(deadline_s: float, python: str) -> str | None:
    try:
        done = subprocess.run(
            [python, "-c", FIND_VULKAN_DEVICE], capture_output=True, text=True, timeout=deadline_s
        )
    except subprocess.TimeoutExpired:
        return f"SAPIEN found no Vulkan device within {deadline_s:g} s; {SAPIEN_FIX}"
    if done.returncode != 0:
        output = (done.stdout.strip() or done.stderr.strip()).splitlines()
        last = output[-1] if output else f"exit status {done.returncode}"
        return f"SAPIEN finds no Vulkan device here ({last}); {SAPIEN_FIX}"
    return None
