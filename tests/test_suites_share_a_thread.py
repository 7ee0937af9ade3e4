"""Suites that render with MuJoCo share a worker's thread: a worker may run LIBERO's rollouts and
then MetaWorld's, each renderer with a GL context of its own. gymnasium's renderer (MetaWorld's)
made its context current only when it held two viewers, so after LIBERO's renderer had taken the
thread's context MetaWorld drew through LIBERO's: its frames changed and stopped following its
own model; dm_control's (ALOHA's) the same after MetaWorld's. Each frame of either now makes
its own context current first."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from policybench import keys
from policybench.perturbation import Perturbation
from policybench.world import World


def test_metaworld_renders_the_same_frames_after_libero_rendered_in_its_thread():
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    for module in ("libero", "robosuite", "bddl"):
        pytest.importorskip(module, reason="needs LIBERO: pip install 'policybench[libero]'")
    from policybench.suites.libero import OPENPI, libero
    from policybench.suites.metaworld import mt10

    metaworld = World(mt10(camera="corner", size=64, tasks={"reach-v3": "reach the goal"}))
    scene = metaworld.eval.rollouts(1, 3)[0].scene
    moved = Perturbation("initial_state", 0.03)
    before = [metaworld.reset(scene)[keys.IMAGE], metaworld.reset(scene, moved)[keys.IMAGE]]
    quick = dataclasses.replace(OPENPI, camera_size=64, settle_steps=1)
    other = World(libero("libero_spatial", quick))
    try:
        other.reset(other.eval.rollouts(1, 0)[0].scene)  # LIBERO renders in this thread
        after = [metaworld.reset(scene)[keys.IMAGE], metaworld.reset(scene, moved)[keys.IMAGE]]
    finally:
        other.close()
        metaworld.close()
    assert not np.array_equal(*before)  # the puck moved, and the frame shows it
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])


def test_aloha_renders_the_same_frames_after_metaworld_rendered_in_its_thread():
    """dm_control (ALOHA's) makes its context current only when it believes another of its own
    is: after MetaWorld's renderer took the thread's context, ALOHA drew through it."""
    for module in ("metaworld", "gym_aloha"):
        pytest.importorskip(module, reason=f"needs {module}")
    from policybench.suites.aloha import Rendering, aloha
    from policybench.suites.metaworld import mt10

    alohas = World(aloha(Rendering(size=(60, 80), shadows=False), max_steps=5))
    scene = alohas.eval.rollouts(1, 0)[0].scene
    metaworld = World(mt10(camera="corner", size=64, tasks={"reach-v3": "reach the goal"}))
    try:
        before = alohas.reset(scene)[keys.IMAGE]
        metaworld.reset(metaworld.eval.rollouts(1, 3)[0].scene)  # MetaWorld renders
        after = alohas.reset(scene)[keys.IMAGE]
    finally:
        metaworld.close()
        alohas.close()
    assert np.array_equal(before, after)
