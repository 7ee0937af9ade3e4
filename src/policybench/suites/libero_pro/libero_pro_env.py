"""LIBERO-PRO's env as a gymnasium env, built inside LIBERO-PRO's own interpreter by the env
server. It imports nothing of policybench: the launcher puts it on that interpreter's path beside
the server, with the leaf modules it uses (LIBERO's `sim_env` and `replay`, and `keys`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sim_env import LiberoSimEnv, ResetPlan

# LIBERO-PRO's `libero` finds its files through the config LIBERO_CONFIG_PATH names; inherited
# from a process that runs hf-libero, it would name hf-libero's. It keeps one of its own, made
# there on first import.
CONFIG_PATH = Path(sys.prefix) / "libero-config"
os.environ["LIBERO_CONFIG_PATH"] = str(CONFIG_PATH)


def task_files(suite: str, index: int) -> tuple[Path, np.ndarray]:
    """Task `index` of LIBERO-PRO suite `suite` as its benchmark registers it (task order 0, as
    LIBERO-PRO's evaluator): its problem file and its init states."""
    from libero.libero import benchmark, get_libero_path

    tasks = benchmark.get_benchmark(suite)(0)
    task = tasks.get_task(index)
    bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
    return bddl, tasks.get_task_init_states(index)


class LiberoProEnv(LiberoSimEnv):
    """Task `index` of a LIBERO-PRO suite, staged as LIBERO-PRO's evaluator stages its episodes:
    `reset(seed=s, options={"init_state": i})` shows what episode i of the task's env shows when
    that env was seeded once with s after it was built and reset i + 1 times (the first i
    replayed, not run), then set to init state i and settled; see LiberoSimEnv."""

    name = "LIBERO-PRO"

    def __init__(
        self,
        suite: str,
        index: int,
        camera_size: int,
        horizon: int,
        settle_steps: int,
        settle_action: list[float],
    ) -> None:
        bddl_file, init_states = task_files(suite, index)
        super().__init__(
            bddl_file,
            init_states,
            camera_size,
            settle_steps,
            settle_action,
            horizon=horizon,
            ignore_done=True,
        )

    def plan(self, seed: int, init_state: int) -> ResetPlan:
        return ResetPlan(seed, init_state, replayed=init_state)


def make(task: str, suite: str, **settings: Any) -> LiberoProEnv:
    """The env server's entry: `task` is policybench's task id (`task3`: LIBERO-PRO's task 3)."""
    return LiberoProEnv(suite, int(task.removeprefix("task")), **settings)
