"""MuJoCo's OpenGL backend, chosen for the user on a machine without a display: where
`MUJOCO_GL` is unset, the first of egl and osmesa that renders (tried in a child process, so a
backend that aborts aborts the child), before any simulator loads; children inherit it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass

VARIABLE = "MUJOCO_GL"
BACKENDS = ("egl", "osmesa")  # in the order tried: egl is the faster where both work
DISABLED = "disable"  # MuJoCo's value for no backend: a renderer raises instead of aborting
PROBE_TIMEOUT_S = 60.0
# Renders one frame of an empty model; exits at once (a context freed at interpreter shutdown
# can print errors that say nothing of whether it rendered).
PROBE = (
    "import os, mujoco\n"
    "model = mujoco.MjModel.from_xml_string('<mujoco/>')\n"
    "renderer = mujoco.Renderer(model, 16, 16)\n"
    "renderer.render()\n"
    "renderer.close()\n"
    "os._exit(0)\n"
)
FIX = (
    "install a software renderer (Debian/Ubuntu: apt-get install -y libegl1 libgl1 "
    "libosmesa6) or set MUJOCO_GL to a backend that works here"
)


@dataclass(frozen=True)
class Choice:
    """What was chosen, and the line a run's header says of it."""

    backend: str
    line: str

    @property
    def works(self) -> bool:
        return self.backend != DISABLED


def choose_backend() -> Choice | None:
    """Sets `MUJOCO_GL` where it is unset and no display exists (Linux), to the first backend
    that renders, or to `disable` with the fix to say where none does; None where nothing was
    to be chosen (set by the user, a display, no MuJoCo installed)."""
    if os.environ.get(VARIABLE) or not _headless():
        return None
    if importlib.util.find_spec("mujoco") is None:
        return None
    for backend in BACKENDS:
        if _renders(backend):
            os.environ[VARIABLE] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return Choice(backend, f"{VARIABLE}={backend} (no display and {VARIABLE} unset)")
    os.environ[VARIABLE] = DISABLED
    return Choice(
        DISABLED,
        f"no display, {VARIABLE} unset, and no OpenGL backend renders here "
        f"({', '.join(BACKENDS)} tried): Evals that render will error; {FIX}",
    )


def no_backend_reason() -> str | None:
    """Why rendering cannot work in this process (for an error where a renderer failed), or
    None where a backend is set."""
    if os.environ.get(VARIABLE) == DISABLED:
        return f"no OpenGL backend renders here ({VARIABLE}={DISABLED}): {FIX}"
    return None


def _headless() -> bool:
    return sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )


def _renders(backend: str) -> bool:
    env = {**os.environ, VARIABLE: backend, "PYOPENGL_PLATFORM": backend}
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE],
            env=env,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0
