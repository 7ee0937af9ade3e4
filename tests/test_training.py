"""`policybench.evaluate(model, ...)` from a training loop: an in-memory model, served from the
caller's process to a child pytest run with two workers, gives the same rollouts as the pytest
command on the same selection and seed; a model that raises makes error records, not a crash;
the run is a run like any (results, summary, report), and the summary returned is the one its
summary.json holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gym_pusht", reason="needs the pusht extra")

import policybench
from policybench import keys
from policybench.run.info import RunInfo
from policybench.suites.pusht import PUSHT
from policybench.training import Evaluation

REPO = Path(__file__).resolve().parents[1]
ROLLOUTS = 2


class Exploding:
    """A model whose every call raises, as a half-trained model with a shape bug would."""

    name = "exploding"

    def open(self, context):
        def predict(obs):
            raise RuntimeError("shapes (2,) and (3,) not aligned")

        return predict

    def describe(self):
        return {"name": self.name}


def assert_summary_is_the_runs(found: Evaluation) -> None:
    written = json.loads((found.run_dir / "summary.json").read_text())
    returned = found.summary.as_json(RunInfo.load(found.run_dir))
    assert "passed" in written.pop("verdict")  # the file adds how the run's gates ended
    assert json.loads(json.dumps(returned)) == written


def per_scene(run_dir: Path) -> dict:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return {
        json.dumps(r[keys.SCENE], sort_keys=True): (
            r[keys.OUTCOME],
            r[keys.STEPS],
            r[keys.SUM_REWARD],
        )
        for r in records
    }


def test_an_in_memory_model_evaluates_as_the_pytest_command_does(tmp_path):
    expert = PUSHT.scripted()  # an object in this process, as a training loop holds its model
    found = policybench.evaluate(
        expert, evals=["pusht"], rollouts=ROLLOUTS, workers=2, seed=3, report_dir=tmp_path / "a"
    )
    assert found.returncode == 0, found.output[-3000:]
    assert (found.run_dir / "index.html").is_file()
    run = RunInfo.load(found.run_dir)
    assert run.settings[keys.POLICY] == "scripted"  # the model, not the wire the child used
    assert run.command == (
        f"policybench.evaluate(<model 'scripted'>, evals=['pusht'], rollouts={ROLLOUTS}, "
        f"workers=2, seed=3, report_dir={str(tmp_path / 'a')!r})"
    )
    overall = found.summary.overall.stats.tally
    assert overall.rollouts == ROLLOUTS and overall.errors == 0
    assert_summary_is_the_runs(found)

    command = [sys.executable, "-m", "pytest", "benchmarks/test_pusht.py", "-p", "no:cacheprovider"]
    command += ["--policy=scripted", f"--rollouts={ROLLOUTS}", "--seed=3"]
    command += [f"--report-dir={tmp_path / 'b'}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert per_scene(found.run_dir) == per_scene(tmp_path / "b" / "latest")
    assert found.success_rate("pusht") == found.success_rate()


def test_a_model_that_raises_gives_error_records_and_a_summary(tmp_path):
    found = policybench.evaluate(
        Exploding(), evals=["pusht"], rollouts=1, workers=0, report_dir=tmp_path
    )
    tally = found.summary.overall.stats.tally
    assert (tally.rollouts, tally.errors) == (1, 1)
    assert_summary_is_the_runs(found)
    (record,) = [json.loads(line) for line in (found.run_dir / "results.jsonl").open()]
    assert "not aligned" in record[keys.REASON], record[keys.REASON]


def test_evaluate_given_evals_says_to_parametrize_instead():
    with pytest.raises(TypeError, match=r"@policybench.parametrize"):
        policybench.evaluate(PUSHT)


def test_evaluate_refuses_an_unregistered_eval_by_name():
    with pytest.raises(LookupError, match="no registered eval 'pushtt'"):
        policybench.evaluate(Exploding(), evals=["pushtt"])


class OwnSessions:
    """A Policy with sessions of its own (new_session), as `pytest --policy module:attr` runs."""

    name = "own-sessions"

    def new_session(self, context):
        raise AssertionError("never opened: evaluate serves models only")

    def describe(self):
        return {"name": self.name}


def test_evaluate_refuses_a_policy_with_sessions_of_its_own_saying_what_it_serves():
    with pytest.raises(TypeError) as refused:
        policybench.evaluate(OwnSessions(), evals="pusht")
    said = str(refused.value)
    assert "\n" not in said
    assert "evaluate serves a Model (name, open, describe), a factory" in said
    assert "'own-sessions'" in said and "pytest --policy module:attr" in said


def test_an_ab_runs_success_rate_is_asked_per_arm_not_pooled(tmp_path):
    found = policybench.evaluate(
        PUSHT.scripted(),
        evals="pusht",  # one Eval, by name
        rollouts=1,
        workers=0,
        report_dir=tmp_path,
        pytest_args=["--latency-sweep", "0,steps:2"],
    )
    assert found.returncode == 0, found.output[-3000:]
    assert found.arms == ["none", "steps:2"]
    command = RunInfo.load(found.run_dir).command
    assert command.endswith(", pytest_args=['--latency-sweep', '0,steps:2'])"), command
    with pytest.raises(ValueError, match=r"arms \['none', 'steps:2'\].*success_rate\(arm='none'\)"):
        found.success_rate()
    written = json.loads((found.run_dir / "summary.json").read_text())
    for arm in written["arms"]:
        rate = arm["overall"]["success_rate"]
        assert found.success_rate(arm=arm[keys.ARM]) == rate
        assert found.success_rate("pusht", arm=arm[keys.ARM]) == rate
    with pytest.raises(ValueError, match=r"no arm 'steps:4'"):
        found.success_rate(arm="steps:4")
    with pytest.raises(ValueError, match=r"no Eval 'aloha'; it evaluated \['pusht'\]"):
        found.success_rate("aloha", arm="none")


def test_two_evaluations_at_once_in_one_report_dir_each_find_their_own_run(tmp_path):
    """Each evaluation reads its run from what its run says, not from the report dir's new
    folders: two at once (as two training jobs sharing reports/) each get their own."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        found = list(
            pool.map(
                lambda model: policybench.evaluate(
                    model, "pusht", rollouts=1, workers=0, report_dir=tmp_path
                ),
                [Exploding(), Exploding()],
            )
        )
    assert found[0].run_dir != found[1].run_dir
    for each in found:
        assert each.run_dir.parent == tmp_path.resolve()
        assert_summary_is_the_runs(each)


def test_evaluate_says_how_its_run_goes_unless_quiet(tmp_path, capfd):
    """The run's progress line reaches the caller's stderr as the run goes (it used to print
    nothing until it ended); quiet=True prints none."""
    policybench.evaluate(Exploding(), evals=["pusht"], rollouts=1, workers=0, report_dir=tmp_path)
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("policybench")]
    assert said and said[-1].startswith("policybench: 1/1 done"), said
    policybench.evaluate(
        Exploding(), evals=["pusht"], rollouts=1, workers=0, report_dir=tmp_path, quiet=True
    )
    assert "policybench: " not in capfd.readouterr().err
