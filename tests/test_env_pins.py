"""A candidate pin set as an arm (`--env-pins`): MetaWorld's scripted experts with the envs as
installed (MuJoCo 3.3.0) and under mujoco==3.3.7, built into an interpreter of their own (once,
under the interpreter cache), on the same scenes; the run reports, per Eval, where trajectories
part and whether success changed. The candidate arm's observations equal, bit for bit, those of a
plain MetaWorld loop run in that interpreter; under mujoco==4.0.1 MetaWorld does not load, and
the run says so (never a 0% success) and fails under --fail-on-drift."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from policybench.envserver.interpreters import python_of
from policybench.pins import PinSet, under_pins
from policybench.record.rollout_trace import read_trace

pytest.importorskip("metaworld")

REPO = Path(__file__).resolve().parents[1]


def run(tmp_path: Path, pins: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["MUJOCO_GL"] = "disable"
    command = [sys.executable, "-m", "pytest", "benchmarks/test_metaworld.py",
               "-p", "no:cacheprovider", "--env-pins", pins, "--report-dir", str(tmp_path),
               *args]  # fmt: skip
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "latest" / "summary.json").read_text())


def test_a_patch_release_of_mujoco_moves_every_trajectory_but_not_success(tmp_path):
    done = run(tmp_path, "mujoco==3.3.7", "-k", "reach or push", "--rollouts", "2", "-n", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [drift] = summary(tmp_path)["drift"]
    assert drift["packages"] == {"mujoco": ["3.3.0", "3.3.7"]}
    assert drift["verdict"] == "trajectories differ, success unchanged"
    assert drift["pairs"] == 4 and drift["lost"] == drift["gained"] == 0
    scenes = drift["scenes"]
    # From the first observation (the hand's position moves by about 5e-4), in every scene.
    assert [scene["first_differing_step"] for scene in scenes] == [0, 0, 0, 0]
    assert all(1e-5 < scene["difference_at_first_observation"] < 1e-2 for scene in scenes)
    assert "drift under candidate pins mujoco-3.3.7" in done.stdout
    assert 'id="drift"' in (tmp_path / "latest" / "index.html").read_text()


PLAIN_LOOP = """
import json, pickle, sys
import numpy as np
from metaworld.env_dict import ALL_V3_ENVIRONMENTS
from metaworld.types import Task

task, seed = sys.argv[1], int(sys.argv[2])
actions = np.asarray(json.loads(sys.argv[3]), dtype=sys.argv[4])  # as the policy answered them
env_cls = ALL_V3_ENVIRONMENTS[task]
env = env_cls()
data = {"env_cls": env_cls, "rand_vec": np.zeros(0), "partially_observable": False}
env.set_task(Task(env_name=task, data=pickle.dumps(data)))
env._freeze_rand_vec = False
env.seeded_rand_vec = True
env.seed(seed)
obs, _ = env.reset()
seen = [obs.tolist()]
for action in actions:
    obs, *_ = env.step(action)
    seen.append(obs.tolist())
print(json.dumps(seen))
"""


def test_the_candidate_arm_equals_a_plain_loop_under_the_candidate_pins_bit_for_bit(tmp_path):
    from policybench.suites.metaworld import MT10_STATE

    done = run(tmp_path, "mujoco==3.3.7", "-k", "reach", "--rollouts", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "latest" / "results.jsonl").open()]
    [candidate] = [r for r in records if r["arm"] == "mujoco-3.3.7"]
    trace = read_trace(tmp_path / "latest" / candidate["rollout_trace"])
    states = np.asarray(trace["arrays"]["state/state"]).T  # steps along the first axis
    actions = np.asarray(trace["arrays"]["action"], np.float64).T
    assert states.dtype == np.float64  # a run under candidate pins keeps states exactly
    python = python_of(under_pins(MT10_STATE, PinSet.parse("mujoco==3.3.7")).make_env.interpreter)
    loop = subprocess.run(
        [str(python), "-c", textwrap.dedent(PLAIN_LOOP), "reach-v3", "0",
         json.dumps(actions[:-1].tolist()), "float32"],  # the experts answer float32
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert loop.returncode == 0, loop.stderr[-3000:]
    plain = np.asarray(json.loads(loop.stdout))
    assert plain.shape == states.shape
    assert np.array_equal(plain, states)  # every number of every observation


def test_a_simulator_the_suite_cannot_load_is_said_so_and_fails_the_drift_gate(tmp_path):
    done = run(tmp_path, "mujoco==4.0.1", "-k", "reach", "--rollouts", "1",
               "--fail-on-drift")  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:]
    [drift] = summary(tmp_path)["drift"]
    assert drift["verdict"] == "does not load"
    assert (
        "could not broadcast input array from shape (11,) into shape (12,)" in (drift["not_loaded"])
    )  # MetaWorld writes 11 numbers into each of MuJoCo 4's 12-number eq_data rows
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith("policybench: FAIL — drift metaworld-mt10 under mujoco 3.3.0 -> 4.0.1")
    assert "no result" in done.stdout  # the candidate arm's row: never a 0% success
