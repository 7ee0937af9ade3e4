"""A headless machine never aborts the process: where no display exists and MUJOCO_GL is unset,
the run picks a GL backend that renders here (egl, then osmesa) before any simulator loads,
says which in its header, and its workers inherit it; where none renders, the Evals that render
error with one line naming the fix, and the run still writes its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from policybench.gl import DISABLED, VARIABLE, choose_backend, no_backend_reason

pytest.importorskip("gym_hil")

REPO = Path(__file__).resolve().parents[1]


def headless(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    for name in (VARIABLE, "DISPLAY", "WAYLAND_DISPLAY", "PYOPENGL_PLATFORM"):
        env.pop(name, None)
    return {**env, **changes}


@pytest.mark.parametrize("workers", ["0", "2"])
def test_gym_hil_without_mujoco_gl_runs_on_a_backend_chosen_for_it(tmp_path, workers):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_gym_hil.py", "-k", "pixels and PickCube",
         "--policy=random", "--rollouts", "1", "-n", workers, "-p", "no:cacheprovider",
         "--report-dir", str(tmp_path)],
        cwd=REPO, env=headless(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "policybench: rendering: MUJOCO_GL=" in done.stdout  # the header says which
    assert (tmp_path / "latest" / "index.html").is_file()
    records = [json.loads(line) for line in (tmp_path / "latest" / "results.jsonl").open()]
    [record] = records
    assert record["outcome"] in ("solved", "unsolved"), record["reason"]  # it rendered


def test_with_no_backend_the_rendering_evals_error_naming_the_fix(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_gym_hil.py", "-k", "pixels and PickCube",
         "--policy=random", "--rollouts", "1", "-p", "no:cacheprovider",
         "--report-dir", str(tmp_path)],
        cwd=REPO, env=headless(**{VARIABLE: DISABLED}), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:]
    [record] = [json.loads(line) for line in (tmp_path / "latest" / "results.jsonl").open()]
    assert record["outcome"] == "error"
    assert "no OpenGL backend renders here (MUJOCO_GL=disable)" in record["reason"]
    assert "apt-get install -y libegl1 libgl1 libosmesa6" in record["reason"]
    assert done.stdout.rstrip().splitlines()[-1] == "policybench: NO RESULT — 1 rollout errored"
    assert (tmp_path / "latest" / "index.html").is_file()


def test_a_backend_is_chosen_only_where_none_is_set_and_no_display_exists(monkeypatch):
    monkeypatch.setenv(VARIABLE, "osmesa")
    assert choose_backend() is None and os.environ[VARIABLE] == "osmesa"  # the user's stands
    monkeypatch.delenv(VARIABLE)
    monkeypatch.setenv("DISPLAY", ":0")
    assert choose_backend() is None and VARIABLE not in os.environ  # a display: GLFW's
    monkeypatch.delenv("DISPLAY")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    chosen = choose_backend()
    assert chosen is not None and os.environ[VARIABLE] == chosen.backend
    assert chosen.works == (chosen.backend != DISABLED)
    assert (no_backend_reason() is None) == chosen.works
