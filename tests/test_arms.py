"""A/B runs: `--policy A --policy B` runs every planned scene under each policy as items side by
side in plan order and reports the arms with their paired comparison; `--assign balanced` gives
each scene one arm, balanced within each task and reproducible; `--blind` hides the policies'
names everywhere in the report until `policybench report unblind`; resume and merge keep arms
apart. A one-policy run is unchanged."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from policybench import keys
from policybench.cli import main as policybench_main
from policybench.pytest_plugin.arms import Arm, assign_balanced, blinded, parse_arms
from policybench.report.merge import missing_rollouts
from policybench.spec import Rollout, Scene
from tests.test_plugin import ENVS

BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

POINT = point_eval("point", tasks={"near": "reach near", "far": "reach far"},
                   scripted=GreedyPointModel)


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""
AB = ("--policy", "scripted", "--policy", "random")
# What names the two policies in a run's files: the policies and the scripted model's own name.
NAMES = ("scripted", "random", "greedy")
REPORT_FILES = ("results.jsonl", "summary.json", "run.json", "index.html")


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    return pytester


def run_dir(pytester: pytest.Pytester) -> Path:
    return (pytester.path / "reports" / "latest").resolve()


def records(pytester: pytest.Pytester) -> list[dict]:
    lines = (run_dir(pytester) / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def summary(pytester: pytest.Pytester) -> dict:
    return json.loads((run_dir(pytester) / "summary.json").read_text())


def run_settings(pytester: pytest.Pytester) -> dict:
    return json.loads((run_dir(pytester) / "run.json").read_text())["settings"]


def test_ab_run_runs_each_scene_under_every_policy_side_by_side_in_plan_order(bench):
    result = bench.runpytest("--collect-only", "-q", "--rollouts", "2", *AB)
    ids = [line for line in result.outlines if line.startswith("test_point.py::")]
    assert ids == [
        f"test_point.py::test_point[{task}/seed={seed}/policy={arm}]"
        for task, seed in (("near", 0), ("near", 1), ("far", 0), ("far", 1))
        for arm in ("scripted", "random")
    ]


def test_a_comma_list_and_labels_name_the_arms(bench):
    result = bench.runpytest(
        "--collect-only", "-q", "--rollouts", "1", "--policy", "s=scripted,r=random"
    )
    result.stdout.fnmatch_lines(
        ["test_point.py::test_point[[]near/seed=0/policy=s[]]", "*near/seed=0/policy=r[]]"]
    )
    same = bench.runpytest("--collect-only", "--policy", "a=scripted", "--policy", "a=random")
    assert same.ret == pytest.ExitCode.USAGE_ERROR
    same.stderr.fnmatch_lines(["*two arms are labelled 'a'*name them apart with LABEL=POLICY*"])


def test_labels_are_short_and_unique_and_urls_name_where_an_arm_is_served():
    arms = parse_arms(
        [
            "lerobot:/ckpt/run1/pretrained_model,lerobot:/ckpt/run2/pretrained_model",
            "pi0=openpi@ws://gpu1:8000",
            "mypkg.models:make_policy",
        ]
    )
    assert [arm.label for arm in arms] == [
        "run1-pretrained_model",
        "run2-pretrained_model",
        "pi0",
        "make_policy",
    ]
    assert arms[2] == Arm("pi0", "openpi", "ws://gpu1:8000")
    assert parse_arms(["openpi@ws://a:1", "openpi@ws://b:2"])[1].label == "openpi-2"
    with pytest.raises(ValueError, match=r"expected \[LABEL=\]POLICY\[@ws://HOST:PORT\]"):
        parse_arms(["a=b=c"])


def test_one_policy_run_keeps_its_ids_records_and_reports(bench):
    result = bench.runpytest("--rollouts", "1")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*policybench: policy scripted*", "eval * 95% CI"])
    assert all("/policy=" not in r[keys.NODEID] and keys.ARM not in r for r in records(bench))
    assert "arms" not in summary(bench) and "arm_comparisons" not in summary(bench)
    assert not {"arms", "assign", "blinding"} & set(run_settings(bench))
    index = (run_dir(bench) / "index.html").read_text()
    assert 'id="arms-table"' not in index and 'data-filter="arm"' not in index


def test_ab_run_reports_each_arm_and_their_paired_comparison(bench):
    result = bench.runpytest("--rollouts", "2", *AB, "-n", "2")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*policybench: arms scripted, random*",
            "eval   arm * 95% CI",
            "point  scripted  * 4 * 4 * 0 * 0 * 100.0% *",
            "point  random  * 4 * 0 * 4 * 0 * 0.0% *",
            "random vs scripted, paired: every scene ran under each arm*",
            "point  (all tasks)  McNemar  4/4 (100%)  0/4 (0%)  -100.0% * 4/0  0.125 *",
        ]
    )
    found = records(bench)
    assert Counter(r[keys.ARM] for r in found) == {"scripted": 4, "random": 4}
    assert all(r[keys.NODEID].endswith(f"/policy={r[keys.ARM]}]") for r in found)
    assert all(keys.ASSIGNMENT not in r for r in found)
    arms = summary(bench)["arms"]
    rows = {(row[keys.EVAL], row[keys.ARM]): row for arm in arms for row in arm["evals"]}
    assert rows[("point", "scripted")]["success_rate"] == 1.0
    assert rows[("point", "random")]["success_rate"] == 0.0
    (versus,) = summary(bench)["arm_comparisons"]
    assert (versus["before"], versus["after"]) == ("scripted", "random")
    assert versus["design"].startswith("paired")
    assert {row["design"] for row in versus["tasks"]} == {"paired"}
    assert run_settings(bench)["arms"] == ["scripted", "random"]
    assert run_settings(bench)[keys.POLICY] == ["scripted", "random"]
    index = (run_dir(bench) / "index.html").read_text()
    assert 'id="arms-table"' in index and 'data-filter="arm"' in index
    assert '<th class="num" title="success rate' in index and "random vs scripted" in index


def test_balanced_assignment_is_balanced_within_each_task_and_reproducible():
    tasks = {f"task{t}": 2 * t + 1 for t in range(6)}  # 1, 3, 5, ... scenes per task
    plan, index = [], 0
    for task, count in tasks.items():
        for seed in range(count):
            plan.append(Rollout("e", index, 36, task, 1.0, Scene(task, seed)))
            index += 1
    arms = (Arm("a", "scripted"), Arm("b", "random"), Arm("c", "x:y"))
    assigned = assign_balanced("e", plan, arms, seed=3)
    for task in tasks:
        counts = Counter(assigned[r.index].label for r in plan if r.scene.task == task)
        assert max(counts.values()) - min(counts.get(arm.label, 0) for arm in arms) <= 1
    overall = Counter(arm.label for arm in assigned.values())
    assert set(overall.values()) == {12}
    assert assign_balanced("e", plan, arms, seed=3) == assigned
    assert assign_balanced("e", plan, arms, seed=4) != assigned


def test_assigned_run_gives_each_scene_one_arm_records_it_and_compares_unpaired(bench):
    args = ("--rollouts", "3", *AB, "--assign", "balanced", "--assign-seed", "7")
    result = bench.runpytest(*args)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "random vs scripted, unpaired: each scene ran under one arm, by balanced assignment "
            "with seed 7 (Fisher's exact test):"
        ]
    )
    found = records(bench)
    assert len(found) == 6
    for task in ("near", "far"):
        counts = Counter(r[keys.ARM] for r in found if r[keys.TASK] == task)
        assert sorted(counts.values()) == [1, 2]
    assert Counter(r[keys.ARM] for r in found) == {"scripted": 3, "random": 3}
    assert all(r[keys.ASSIGNMENT] == {"method": "balanced", keys.SEED: 7} for r in found)
    assert run_settings(bench)["assign"] == {"method": "balanced", keys.SEED: 7}
    (versus,) = summary(bench)["arm_comparisons"]
    assert {row["design"] for row in versus["tasks"]} == {"unpaired"}
    assert versus["design"].startswith("unpaired")
    first = sorted(r[keys.NODEID] for r in found)
    again = bench.runpytest(*args, "--collect-only", "-q")
    assert sorted(line for line in again.outlines if line.startswith("test_point.py::")) == first


def test_blind_hides_the_names_in_every_report_file_until_unblinded(bench):
    result = bench.runpytest("--rollouts", "1", *AB, "--blind")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*policybench: arms A, B*", "B vs A, paired*"])
    assert not any(name in result.stdout.str() for name in NAMES)
    directory = run_dir(bench)
    report = [directory / name for name in REPORT_FILES] + sorted(directory.glob("rollouts/*"))
    for path in report:
        text = path.read_text()
        assert not [name for name in NAMES if name in text], path
    assert {r[keys.ARM] for r in records(bench)} == {"A", "B"}
    letters = json.loads((directory / "blinding.json").read_text())["letters"]

    assert policybench_main(["report", "unblind", str(directory)]) == 0
    named = {letter: real["label"] for letter, real in letters.items()}
    assert {r[keys.ARM] for r in records(bench)} == {"scripted", "random"}
    for record in records(bench):
        assert record[keys.NODEID].endswith(f"/policy={record[keys.ARM]}]")
    scripted = next(r for r in records(bench) if r[keys.ARM] == "scripted")
    assert scripted[keys.POLICY][keys.POLICY_NAME] == "greedy"
    assert sorted(run_settings(bench)["arms"]) == ["random", "scripted"]
    assert run_settings(bench)["arms"] == [named["A"], named["B"]]
    assert (
        "--policy scripted --policy random"
        in json.loads((directory / "run.json").read_text())["command"]
    )
    for name in ("index.html", "summary.json"):
        assert all(arm in (directory / name).read_text() for arm in ("scripted", "random"))
    with pytest.raises(SystemExit, match="unblinded already"):
        policybench_main(["report", "unblind", str(directory)])


def test_blind_letters_follow_the_key_not_the_order_of_the_policies():
    arms = parse_arms(["scripted", "random", "x:y"])
    lettered, blinding = blinded(arms, "k1")
    assert [arm.label for arm in lettered] == ["A", "B", "C"]
    assert {arm.policy for arm in lettered} == {"scripted", "random", "x:y"}
    assert blinded(arms, "k1") == (lettered, blinding)
    orders = {tuple(arm.policy for arm in blinded(arms, f"k{i}")[0]) for i in range(20)}
    assert len(orders) > 1
    # The digest tells blindings apart by their key too, not only by their letters.
    same_letters = next(f"k{i}" for i in range(2, 200) if blinded(arms, f"k{i}")[0] == lettered)
    assert blinded(arms, same_letters)[1].letters == blinding.letters
    assert blinded(arms, same_letters)[1].digest != blinding.digest
    assert blinded(arms, "k1")[1].digest == blinding.digest


def test_assign_and_blind_need_two_policies(bench):
    result = bench.runpytest("--collect-only", "--assign", "balanced")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--assign and --blind compare policies: give two or more*"])


def test_ab_run_resumes_with_its_arms_and_refuses_other_arms(bench):
    first = bench.runpytest("--rollouts", "2", *AB, "-k", "near")
    first.assert_outcomes(passed=2)
    resumed = bench.runpytest("--rollouts", "2", *AB, "--resume", "latest")
    resumed.assert_outcomes(passed=2)
    resumed.stdout.fnmatch_lines(["*carried over from the interrupted run: 4 rollouts*"])
    found = records(bench)
    assert len({r[keys.NODEID] for r in found}) == len(found) == 8
    assert Counter(r[keys.ARM] for r in found) == {"scripted": 4, "random": 4}
    other = bench.runpytest("--rollouts", "2", "--policy", "scripted", "--resume", "latest")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    other.stderr.fnmatch_lines(
        [
            "*the protocol differs*",
            '*policy is [[]"scripted", "random"[]] in the run being resumed*',
        ]
    )


def test_blind_run_resumes_under_the_same_letters(bench):
    first = bench.runpytest("--rollouts", "2", *AB, "--blind", "-k", "near")
    assert first.ret == 0
    letters = {r[keys.NODEID]: r[keys.ARM] for r in records(bench)}
    resumed = bench.runpytest("--rollouts", "2", *AB, "--blind", "--resume", "latest")
    resumed.stdout.fnmatch_lines(["*carried over from the interrupted run: 4 rollouts*"])
    found = records(bench)
    assert len(found) == 8 and {r[keys.ARM] for r in found} == {"A", "B"}
    assert all(letters.get(r[keys.NODEID], r[keys.ARM]) == r[keys.ARM] for r in found)
    sealed = (run_dir(bench) / "blinding-policies.jsonl").read_text().splitlines()
    assert len(sealed) == 8
    assert policybench_main(["report", "unblind", str(run_dir(bench))]) == 0
    assert {r[keys.ARM] for r in records(bench)} == {"scripted", "random"}


def test_merge_misses_a_scene_one_arm_did_not_run():
    def record(index: int, arm: str, **more) -> dict:
        return {
            keys.EVAL: "point",
            keys.NODEID: f"t.py::test[x/seed={index}/policy={arm}]",
            keys.ROLLOUT_INDEX: index,
            keys.ROLLOUT_COUNT: 2,
            keys.ARM: arm,
            **more,
        }

    paired = [record(0, "a"), record(1, "a"), record(0, "b")]
    (line,) = missing_rollouts(paired)
    assert "arm b" in line and "plan indices 1" in line
    assigned = {keys.ASSIGNMENT: {"method": "balanced", keys.SEED: 0}}
    assert missing_rollouts([record(0, "a", **assigned), record(1, "b", **assigned)]) == ()


SERVED_BENCHMARK = """
import policybench
from tests.served import POINT


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""


def test_an_arm_is_served_at_its_own_url_beside_an_in_process_arm(pytester):
    from tests.test_remote import free_port, start_server

    pytester.makepyfile(test_point=SERVED_BENCHMARK)
    port = free_port()
    server = start_server(port)
    try:
        url = f"ws://127.0.0.1:{port}"
        result = pytester.runpytest(
            "--rollouts", "2", "--policy", "here=scripted", "--policy", f"there=openpi@{url}"
        )
    finally:
        server.kill()
        server.wait()
    result.assert_outcomes(passed=4)
    found = records(pytester)
    there = [r for r in found if r[keys.ARM] == "there"]
    here = [r for r in found if r[keys.ARM] == "here"]
    assert {r[keys.POLICY]["url"] for r in there} == {url}
    assert all("url" not in r[keys.POLICY] for r in here)
    (versus,) = summary(pytester)["arm_comparisons"]
    assert [row["pairs"] for row in versus["evals"]] == [{"both": 2, "lost": 0, "gained": 0}]


def test_a_shard_runs_both_arms_of_each_of_its_scenes(bench):
    shards = []
    for shard in ("1/2", "2/2"):
        result = bench.runpytest("--collect-only", "-q", "--rollouts", "2", *AB, "--shard", shard)
        shards.append([line for line in result.outlines if line.startswith("test_point.py::")])
    for ids in shards:
        scenes = Counter(nodeid.rsplit("/policy=", 1)[0] for nodeid in ids)
        assert set(scenes.values()) == {2}
    assert len(shards[0]) + len(shards[1]) == 8
