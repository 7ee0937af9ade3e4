"""`--latency-sweep`: the run's one policy under each inference latency setting, as the arms of
one run (real MetaWorld, its scripted experts): every scene under each setting, each setting
compared with zero latency on the same scenes, success plotted against latency per Eval; resume,
shards, merge and blinding work as for any A/B run, and a bad sweep is a usage error."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from policybench import keys
from policybench.cli import main as policybench_main
from policybench.pytest_plugin.arms import declared_arms, sweep_arms

pytest.importorskip("metaworld")

# Two MT10 tasks. With no latency their experts solve them; they replan every control step
# (80 Hz), so a delay of 8 steps (0.1 s) leaves push's expert acting on a stale state.
BENCHMARK = """
import policybench
from policybench.suites.metaworld import MT10, mt10

MT = mt10(tasks={task: MT10[task] for task in ("reach-v3", "push-v3")})


@policybench.parametrize(MT)
def test_mt(rollout, harness):
    harness(rollout)
"""
SWEEP = ("--policy", "scripted", "--latency-sweep", "0,steps:8,0.05")
# The arms' labels: each setting as the run names it, zero first, then in the command's order
# (the terminal, run.json, summary.json and the report list them alike).
ARMS = SETTINGS = ["none", "steps:8", "0.05"]


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_mt=BENCHMARK)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester


def run_dir(pytester: pytest.Pytester, name: str = "latest") -> Path:
    return (pytester.path / "reports" / name).resolve()


def records(directory: Path) -> list[dict]:
    lines = (directory / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def sweep_of(directory: Path) -> dict:
    return json.loads((directory / "summary.json").read_text())["latency_sweep"]


def test_sweep_runs_every_scene_once_under_each_latency_as_arms(bench):
    result = bench.runpytest("--collect-only", "-q", "--rollouts", "2", *SWEEP)
    ids = [line for line in result.outlines if line.startswith("test_mt.py::")]
    assert ids == [
        f"test_mt.py::test_mt[{task}/seed={seed}/policy={setting}]"
        for task in ("reach-v3", "push-v3")
        for seed in (0, 1)
        for setting in ARMS
    ]


def test_sweep_charges_each_arm_its_latency_and_compares_it_with_zero_on_the_same_scenes(bench):
    result = bench.runpytest("--rollouts", "2", *SWEEP)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*policybench: arms none, steps:8, 0.05*"])
    found = records(run_dir(bench))
    assert Counter(r[keys.ARM] for r in found) == dict.fromkeys(SETTINGS, 4)
    assert {r[keys.ARM]: r[keys.POLICY][keys.INFERENCE_LATENCY] for r in found} == {
        setting: setting for setting in SETTINGS
    }
    settings = json.loads((run_dir(bench) / "run.json").read_text())["settings"]
    assert settings["arms"] == ARMS
    assert sorted(settings[keys.INFERENCE_LATENCY]) == sorted(SETTINGS)

    sweep = sweep_of(run_dir(bench))
    assert sweep["reference"] == "none" and sweep["settings"] == SETTINGS
    (curve,) = sweep["evals"]
    points = {p[keys.INFERENCE_LATENCY]: p for p in curve["points"]}
    assert list(points) == SETTINGS
    assert points["none"]["versus_no_latency"] is None
    assert points["none"]["solved"] == 4  # both experts solve both scenes with no latency
    late = points["steps:8"]
    assert late["solved"] < points["none"]["solved"]  # push's expert fails 8 steps late
    versus = late["versus_no_latency"]
    assert versus["design"] == "paired" and versus["left_out"] == [0, 0]  # every scene paired
    assert versus["before"] == [4, 4] and versus["after"] == [late["solved"], 4]
    assert versus["pairs"] == {"both": late["solved"], "lost": 4 - late["solved"], "gained": 0}
    low, high = versus["interval"]
    assert -1 <= low < versus["difference"] < 0 and versus["difference"] < high
    assert 0 <= versus["p_value"] <= 1
    comparisons = json.loads((run_dir(bench) / "summary.json").read_text())["arm_comparisons"]
    assert all(not c["protocol"] for c in comparisons)  # the arms share the run's protocol
    # each setting with zero latency, and no two other settings with each other
    assert [(c["before"], c["after"]) for c in comparisons] == [
        ("none", "steps:8"),
        ("none", "0.05"),
    ]
    compared = [line for line in result.outlines if re.match(r"^\S+ vs \S+, ", line)]
    assert [line.split(",")[0] for line in compared] == ["steps:8 vs none", "0.05 vs none"]


def test_report_plots_one_point_per_setting_per_eval_and_tables_the_changes(bench):
    assert bench.runpytest("--rollouts", "1", *SWEEP).ret == 0
    html = (run_dir(bench) / "index.html").read_text()
    plots = re.findall(r'<svg class="sweep-plot" data-eval="([^"]+)"(.*?)</svg>', html, re.S)
    assert [eval for eval, _ in plots] == ["metaworld-mt10"]
    drawn = re.findall(r'class="sweep-point" data-latency="([^"]+)"', plots[0][1])
    assert drawn == SETTINGS
    table = re.search(r'<table class="sweep-table".*?</table>', html, re.S)
    assert table is not None
    assert re.findall(r'<tr data-latency="([^"]+)"', table.group(0)) == SETTINGS
    assert "<script src" not in html  # self-contained: the plot is inline SVG


def test_a_one_policy_or_ab_run_has_no_sweep(bench):
    assert bench.runpytest("--rollouts", "1", "-k", "reach").ret == 0
    assert "latency_sweep" not in json.loads((run_dir(bench) / "summary.json").read_text())
    assert 'class="sweep-plot"' not in (run_dir(bench) / "index.html").read_text()


def test_sweep_resumes_and_refuses_another_sweep(bench):
    first = bench.runpytest("--rollouts", "1", *SWEEP)
    assert first.ret == 0
    resumed = bench.runpytest("--rollouts", "2", *SWEEP, "--resume", "latest")
    assert resumed.ret == 0
    resumed.stdout.fnmatch_lines(["*carried over from the interrupted run: 6 rollouts*"])
    found = records(run_dir(bench))
    assert len({r[keys.NODEID] for r in found}) == len(found) == 12
    assert all(p["rollouts"] == 4 for p in sweep_of(run_dir(bench))["evals"][0]["points"])
    other = bench.runpytest("--rollouts", "2", "--latency-sweep", "0,0.1", "--resume", "latest")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    other.stderr.fnmatch_lines(["*the protocol differs*", "*inference_latency*"])


def test_sweep_shards_merge_into_one_sweep(bench, tmp_path):
    for shard in ("1/2", "2/2"):
        assert bench.runpytest("--rollouts", "2", *SWEEP, "--shard", shard).ret == 0
    parts = sorted(p for p in (bench.path / "reports").iterdir() if "shard" in p.name)
    assert len(parts) == 2
    out = tmp_path / "merged"
    assert policybench_main(["report", "merge", *map(str, parts), "--out", str(out)]) == 0
    sweep = sweep_of(out)
    assert [p["rollouts"] for p in sweep["evals"][0]["points"]] == [4, 4, 4]
    assert all(
        p["versus_no_latency"]["pairs"] is not None
        for p in sweep["evals"][0]["points"]
        if p[keys.INFERENCE_LATENCY] != "none"
    )
    assert 'class="sweep-plot"' in (out / "index.html").read_text()


# What a rollout's latency made of its calls: a blinded sweep's records keep none of it.
REALTIME = (keys.CALL_LATENCY_MS, keys.DELAY_STEPS_MEAN, keys.LATENCY_MS_P50)
REALTIME += (keys.STALE_ACTION_SHARE, keys.MODEL_CALLS)


def test_blind_sweep_hides_each_letters_latency_until_unblinded(bench):
    result = bench.runpytest("--rollouts", "1", *SWEEP, "--blind", "k", "-k", "reach")
    assert result.ret == 0
    directory = run_dir(bench)
    found = records(directory)
    assert {r[keys.ARM] for r in found} == {"A", "B", "C"}
    assert all(keys.INFERENCE_LATENCY not in r[keys.POLICY] for r in found)
    assert not [(r[keys.ARM], name) for r in found for name in REALTIME if name in r]
    for preflight in (directory / "preflight").glob("*.json"):
        assert keys.INFERENCE_LATENCY not in json.loads(preflight.read_text())["policy"]
    summary = json.loads((directory / "summary.json").read_text())
    assert "latency_sweep" not in summary
    assert not [arm for arm in summary["arms"] for row in arm["evals"] if "realtime" in row]
    # the terminal's table has no real-time columns: no letter shows a delay
    assert not [line for line in result.outlines if "stale" in line or "fresh Hz" in line]

    assert policybench_main(["report", "unblind", str(directory)]) == 0
    points = sweep_of(directory)["evals"][0]["points"]
    assert [p[keys.INFERENCE_LATENCY] for p in points] == SETTINGS  # the command's order
    unblinded = records(directory)
    assert {r[keys.ARM]: r[keys.POLICY][keys.INFERENCE_LATENCY] for r in unblinded} == {
        setting: setting for setting in SETTINGS
    }
    assert all(keys.MODEL_CALLS in r for r in unblinded)
    delays = {r[keys.ARM]: r.get(keys.DELAY_STEPS_MEAN) for r in unblinded}
    assert delays == {"none": None, "steps:8": 8, "0.05": 4}  # 50 ms: 4 periods at 80 Hz
    summary = json.loads((directory / "summary.json").read_text())
    assert [arm["arm"] for arm in summary["arms"]] == ARMS
    assert all("realtime" in row for arm in summary["arms"][1:] for row in arm["evals"])


@pytest.mark.parametrize(
    ("sweep", "said"),
    [
        ("0,fast", "setting 'fast': inference latency must be"),
        ("0,,0.1", "an empty setting"),
        ("0.05,0.1", "lacks; add 0, e.g. --latency-sweep 0,0.05,0.1"),
        ("0", "two or more latency settings"),
        ("0,none", "'none' is the setting 'none' again"),
        ("0,steps:0", "'steps:0' is the setting 'none' again"),
        ("0,steps:x", "setting 'steps:x': inference latency steps:D takes a whole number"),
    ],
)
def test_a_bad_sweep_is_refused_naming_what_came_and_what_to_give(sweep, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        sweep_arms(declared_arms(["scripted"], None, None)[0], sweep)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--latency-sweep", "0,0.1", "--inference-latency", "0.1"), "--inference-latency 0.1"),
        (("--latency-sweep", "0,0.1", "--policy", "scripted,random"), "--policy named 2"),
        (("--latency-sweep", "0.1,0.2"), "add 0"),
    ],
)
def test_sweep_with_another_latency_or_policy_is_a_usage_error(bench, args, said):
    result = bench.runpytest("--collect-only", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--latency-sweep*{said}*"])


def test_an_execution_horizon_shorter_than_a_swept_delay_is_a_usage_error(bench):
    result = bench.runpytest(
        "--collect-only", "--latency-sweep", "0,steps:4", "--execute-steps", "2"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--execute-steps 2 is shorter than the delay of 4 control steps*"]
    )


def test_sweep_of_a_profile_labels_it_by_file_and_records_its_digest(bench):
    head = {"format": "policybench-latency-profile", "version": 1}
    (bench.path / "slow.json").write_text(json.dumps({**head, "sample_s": [0.1, 0.11]}))
    args = ("--rollouts", "1", "-k", "push", "-n", "2", "--latency-sweep", "0,profile:slow.json")
    assert bench.runpytest(*args).ret == 0
    found = records(run_dir(bench))
    assert {r[keys.ARM] for r in found} == {"none", "profile:slow.json"}
    digests = {r[keys.POLICY].get(keys.LATENCY_PROFILE) for r in found}
    settings = json.loads((run_dir(bench) / "run.json").read_text())["settings"]
    assert settings[keys.LATENCY_PROFILE] == sorted(digests - {None})
    points = sweep_of(run_dir(bench))["evals"][0]["points"]
    assert [p[keys.INFERENCE_LATENCY] for p in points] == ["none", "profile:slow.json"]
    assert points[1]["solved"] < points[0]["solved"]  # 8 steps or more late, push fails
