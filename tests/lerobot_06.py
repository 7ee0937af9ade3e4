"""LeRobot 0.6.1's own env code, run beside policybench on this interpreter.

LeRobot 0.6 installs on Python >= 3.12 only, with numpy >= 2 and torch; its env modules
(`lerobot/envs/metaworld.py`, `lerobot/envs/libero.py`) are plain Python that runs here. The tox
envs download its wheel (`pip download lerobot==0.6.1 --no-deps --python-version 3.12
--only-binary=:all:`, into $LEROBOT_0_6_WHEELS); `importable` unpacks those modules unchanged
beside a `lerobot` package of two stand-ins for what they import and do not use in an env:
`lerobot.lerobot_types.RobotObservation` (a type alias) and `lerobot.envs.utils`, which holds
LeRobot's own `parse_camera_names` (copied from the wheel's utils.py by its source) and no lazy
vector env (lerobot-eval's async wrapper; these tests make one env at a time). The stand-ins
shadow any installed LeRobot, so the modules are run in a child interpreter.
"""

from __future__ import annotations

import ast
import os
import zipfile
from pathlib import Path

import pytest

VERSION = "0.6.1"
WHEELS = "LEROBOT_0_6_WHEELS"
IN_CI = os.environ.get("CI", "").lower() == "true"

TYPES = "from typing import Any\n\nRobotObservation = dict[str, Any]\n"


def wheel() -> Path:
    """The LeRobot 0.6.1 wheel the tox env downloaded; a skip (a failure in CI) without it."""
    folder = os.environ.get(WHEELS)
    found = sorted(Path(folder).glob(f"lerobot-{VERSION}-*.whl")) if folder else []
    if not found:
        how = (
            f"pip download lerobot=={VERSION} --no-deps --python-version 3.12 "
            f"--only-binary=:all: -d DIR, then {WHEELS}=DIR (tox does both)"
        )
        if IN_CI:
            pytest.fail(f"LeRobot {VERSION}'s wheel is missing in CI: {how}")
        pytest.skip(f"needs LeRobot {VERSION}'s wheel: {how}")
    return found[-1]


def importable(root: Path, *modules: str) -> Path:
    """A tree under `root` from which a child interpreter imports LeRobot 0.6.1's env `modules`
    (paths inside the wheel, e.g. "lerobot/envs/metaworld.py") as LeRobot ships them."""
    with zipfile.ZipFile(wheel()) as archive:
        for name in modules:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(archive.read(name))
        utils = archive.read("lerobot/envs/utils.py").decode()
    (root / "lerobot" / "__init__.py").write_text("")
    (root / "lerobot" / "envs" / "__init__.py").write_text("")
    (root / "lerobot" / "lerobot_types.py").write_text(TYPES)
    (root / "lerobot" / "envs" / "utils.py").write_text(_kept(utils, "parse_camera_names"))
    return root


def _kept(source: str, *functions: str) -> str:
    """`source`'s imports and the named functions, verbatim."""
    tree = ast.parse(source)
    kept = ["_LazyAsyncVectorEnv = None  # lerobot-eval's async wrapper: not used here"]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "collections.abc":
            kept.append(ast.get_source_segment(source, node))
        if isinstance(node, ast.FunctionDef) and node.name in functions:
            kept.append(ast.get_source_segment(source, node))
    return "\n\n".join(kept) + "\n"


def child_env(root: Path) -> dict[str, str]:
    """The environment of a child interpreter that imports from `root` first."""
    path = os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path}
