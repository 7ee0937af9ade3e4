"""Suites are discovered through the `policybench.suites` entry point, the built-in ones too:
`policybench list` and `policybench serve` find an Eval by its registered name or module:attr,
and an installed package's suite appears without any list being edited."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from policybench.suites import eval_named, registered_evals, suite_modules
from policybench.suites.pusht import PUSHT
from tests.served import POINT
from tests.test_own_policy import installed_distribution

REPO = Path(__file__).resolve().parents[1]

MY_SUITE = """
from policybench.spec import Eval, seeded_per_task

REACH = Eval(
    name="my-reach",
    make_env=lambda task: None,
    plan=seeded_per_task({"a": "do a", "b": "do b"}, timeout_s=1.0),
    control_hz=10.0,
    hold=lambda last, obs: last,
    hold_name="hold",
)
"""


def test_the_built_in_suites_are_registered_like_any_other():
    assert suite_modules() == {
        "metaworld": "policybench.suites.metaworld",
        "metaworld-ml45": "policybench.suites.metaworld_ml",
        "gym-hil": "policybench.suites.gym_hil",
        "ogbench": "policybench.suites.ogbench",
        "dm-control-manipulation": "policybench.suites.dm_control_manipulation",
        "playground": "policybench.suites.playground",
        "myosuite": "policybench.suites.myosuite",
        "panda-gym": "policybench.suites.panda_gym",
        "pusht": "policybench.suites.pusht",
        "aloha": "policybench.suites.aloha",
        "gymnasium-robotics": "policybench.suites.gymnasium_robotics",
        "libero": "policybench.suites.libero",
        "libero-pro": "policybench.suites.libero_pro",
        "lerobot-env": "policybench.suites.lerobot_env",
        "robomimic": "policybench.suites.robomimic",
        "robosuite": "policybench.suites.robosuite15",
        "maniskill": "policybench.suites.maniskill",
        "maniskill-primitives": "policybench.suites.maniskill_primitives",
        "maniskill-rdt": "policybench.suites.maniskill_rdt",
        "kinetix": "policybench.suites.kinetix",
    }
    assert {
        "metaworld-mt10",
        "pusht",
        "aloha",
        "libero_spatial",
        "kitchen",
        "robomimic-lift",
        "maniskill-pick-cube",
        "maniskill-push-t-rgb",
        "kinetix",
        "kinetix-wheel",
        "maniskill-plug-charger",
        "maniskill-rdt-pick-cube",
        "robosuite-lift",
        "robosuite-two-arm-transport",
    } <= set(registered_evals())


def test_an_eval_is_found_by_registered_name_or_module_attr_and_a_wrong_one_is_named():
    assert eval_named("pusht") is PUSHT
    assert eval_named("tests.served:POINT") is POINT
    with pytest.raises(LookupError, match=r"no registered eval 'nope'; known: \[.*'pusht'"):
        eval_named("nope")
    with pytest.raises(LookupError, match=r"tests\.served:OPENPI is not an Eval"):
        eval_named("tests.served:OPENPI")


def test_an_installed_packages_suite_is_listed_without_editing_any_list(tmp_path):
    (tmp_path / "my_suite.py").write_text(MY_SUITE)
    installed_distribution(tmp_path, "[policybench.suites]\nmine = my_suite\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    command = [sys.executable, "-m", "policybench.cli", "list"]
    listed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "mine (my_suite)" in listed.stdout
    assert any(
        line.split()[:3] == ["my-reach", "2", "tasks"] for line in listed.stdout.splitlines()
    )
    assert "metaworld-mt10" in listed.stdout


def test_an_eval_named_module_attr_is_found_beside_the_user_or_named_clearly(tmp_path, monkeypatch):
    """`policybench probe/serve --eval mymodule:EVAL` finds a module in the working directory,
    as `python -m` would, and a module that is nowhere is a LookupError saying what to do."""
    (tmp_path / "beside_user_evals.py").write_text(
        "from policybench.suites.pusht import PUSHT\nEVAL = PUSHT\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert eval_named("beside_user_evals:EVAL").name == "pusht"
    with pytest.raises(LookupError, match=r"cannot import 'nowhere_module'.*PYTHONPATH"):
        eval_named("nowhere_module:EVAL")


def test_list_eval_shows_its_tasks_and_the_overview_one_line_per_interpreter():
    command = [sys.executable, "-m", "policybench.cli", "list"]
    path = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(REPO)])}
    tasks = subprocess.run(
        [*command, "--eval", "metaworld-mt10"], env=env, capture_output=True, text=True
    )
    assert tasks.returncode == 0, tasks.stderr
    lines = tasks.stdout.splitlines()
    assert lines[0] == (
        "metaworld-mt10: 10 tasks; a built-in expert (--policy=scripted; eval.scripted() in Python)"
    )
    assert lines[1].split() == ["reach-v3", "reach", "the", "goal", "position"]
    overview = subprocess.run(command, env=env, capture_output=True, text=True).stdout
    # Every axis beyond the noise ones every Eval has, the instruction's paraphrases included.
    [mt10] = [line for line in overview.splitlines() if line.split()[:1] == ["metaworld-mt10"]]
    assert mt10.endswith("axes +initial_state,instruction"), mt10
    pro = [line for line in overview.splitlines() if "interpreter libero-pro" in line]
    assert len(pro) == 1 and "and 43 more" in pro[0], pro
    # One column of names, as wide as the longest, then the task counts.
    assert any(line.split()[:3] == ["pusht", "1", "task"] for line in overview.splitlines())
    listed = [line for line in overview.splitlines() if re.match(r"  \S+ +\d+ tasks?\b", line)]
    counts = {line.index(" task") for line in listed}
    assert len(counts) == 1, counts
    unknown = subprocess.run([*command, "--eval", "nope"], env=env, capture_output=True, text=True)
    assert unknown.returncode == 1 and "known: [" in unknown.stderr
