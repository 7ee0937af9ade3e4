"""Shards: `--shard K/N` runs a deterministic share of the plan (each task's rollouts dealt out
evenly, the same whatever -n), `--shard auto` reads SLURM and Kubernetes job arrays, and the
examples under examples/ run as an engine would run them, merging into the unsharded result."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from policybench.pytest_plugin.shards import dealt, from_engine
from policybench.run.shard import Shard
from policybench.spec import Scene, numbered
from tests.envs import point_eval
from tests.test_remote import free_port

REPO = Path(__file__).resolve().parents[1]
ENVS = (Path(__file__).parent / "envs.py").read_text()
BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

REACH = point_eval("reach", tasks={"a": "reach a", "b": "reach b", "c": "reach c"},
                   scripted=GreedyPointModel)
SLOW = point_eval("slow", tasks={"far": "reach slowly"}, timeout_s=0.2, scripted=GreedyPointModel)


@policybench.parametrize(REACH, SLOW)
def test_point(rollout, harness):
    harness(rollout)
"""
ITEM = re.compile(r"^test_point\.py::test_point\[(\w+)/seed=(\d+)\]$", re.M)


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    return pytester


def collected(pytester: pytest.Pytester, *args: str) -> list[tuple[str, int]]:
    result = pytester.runpytest("--collect-only", "-q", *args)
    assert result.ret == 0, result.stdout.str()
    return [(task, int(seed)) for task, seed in ITEM.findall(result.stdout.str())]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
@pytest.mark.parametrize(("tasks", "per_task"), [(1, 1), (1, 5), (3, 2), (4, 3), (10, 7)])
def test_dealing_gives_every_shard_each_tasks_rollouts_in_equal_share(count, tasks, per_task):
    eval = point_eval(f"deal-{tasks}", tasks={f"t{i}": "reach" for i in range(tasks)})
    plan = eval.rollouts(per_task, 0)
    places = dealt(eval, plan)
    shards = [
        [r for r in plan if Shard(k, count).takes(places[r.index])] for k in range(1, count + 1)
    ]
    assert sorted(r.index for shard in shards for r in shard) == list(range(len(plan)))
    for task in {r.scene.task for r in plan}:
        share = [sum(r.scene.task == task for r in shard) for shard in shards]
        assert max(share) - min(share) <= 1, (task, share)
    sizes = [len(shard) for shard in shards]
    assert max(sizes) - min(sizes) <= 1, sizes


def test_dealing_keeps_each_task_even_when_the_plan_interleaves_tasks():
    eval = point_eval("interleaved", tasks={"a": "reach a", "b": "reach b"})
    scenes = [Scene(task, seed) for seed in range(4) for task in ("a", "b")]  # a, b, a, b, ...
    plan = numbered(eval.name, 2.0, [("reach", scene) for scene in scenes])
    places = dealt(eval, plan)
    for k in (1, 2):
        taken = [r.scene.task for r in plan if Shard(k, 2).takes(places[r.index])]
        assert sorted(taken) == ["a", "a", "b", "b"]


def test_shards_deselect_at_collection_and_cover_the_plan_once(bench):
    shards = [collected(bench, "--rollouts", "5", "--shard", f"{k}/2") for k in (1, 2)]
    plan = [(task, seed) for task in ("a", "b", "c", "far") for seed in range(5)]
    assert sorted(item for shard in shards for item in shard) == sorted(plan)
    # A rollout's shard depends on its Eval's plan alone, not on what else is selected.
    only_b = collected(bench, "--rollouts", "5", "--shard", "2/2", "-k", "b/")
    assert only_b == [item for item in shards[1] if item[0] == "b"] != []


def test_a_shard_runs_the_same_rollouts_with_and_without_xdist_in_a_run_dir_named_for_it(bench):
    one = bench.runpytest("--rollouts", "3", "--shard", "2/3", "-n", "0")
    one.stdout.fnmatch_lines(["policybench: shard 2/3 (--shard 2/3)", "*8 deselected*"])
    two = bench.runpytest_subprocess("--rollouts", "3", "--shard", "2/3", "-n", "2")
    runs = sorted((bench.path / "reports").glob("*-shard2of3*"))
    assert one.ret == two.ret == 0 and len(runs) == 2, two.stdout.str()
    assert (bench.path / "reports" / "latest").resolve() == runs[1].resolve()
    nodeids = [
        sorted(json.loads(line)["nodeid"] for line in (run / "results.jsonl").open())
        for run in runs
    ]
    assert nodeids[0] == nodeids[1] and len(nodeids[0]) == 12 - 8
    for run in runs:
        assert json.loads((run / "run.json").read_text())["settings"]["shard"].startswith("2/3")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0/4", "*--shard K/N needs 1 <= K <= N, got 0/4*numbered from 1*"),
        ("5/4", "*--shard K/N needs 1 <= K <= N, got 5/4*"),
        ("two", "*--shard takes K/N (shard K of N, numbered from 1, e.g. --shard 2/4) or auto*"),
    ],
)
def test_a_bad_shard_is_a_usage_error_saying_what_is_accepted(bench, value, message):
    result = bench.runpytest("--shard", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_shard_auto_outside_a_job_array_says_what_it_expected(bench, monkeypatch):
    for name in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"):
        monkeypatch.delenv(name, raising=False)
    result = bench.runpytest("--shard", "auto")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*expected SLURM_ARRAY_TASK_ID*or JOB_COMPLETION_INDEX*neither is set*--shard K/N*"]
    )


def test_shard_auto_reads_a_slurm_array_whatever_its_first_id():
    zero_based = {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert from_engine(zero_based, None) == Shard(1, 4)
    from_one = {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1"}
    assert from_engine({**from_one, "SLURM_ARRAY_TASK_MAX": "4"}, None) == Shard(4, 4)
    stepped = {"SLURM_ARRAY_TASK_ID": "20", "SLURM_ARRAY_TASK_MIN": "10"}
    stepped |= {"SLURM_ARRAY_TASK_MAX": "30", "SLURM_ARRAY_TASK_STEP": "5"}
    assert from_engine(stepped, None) == Shard(3, 5)


@pytest.mark.parametrize(
    ("environ", "count", "message"),
    [
        ({"SLURM_ARRAY_TASK_ID": "2"}, None, "neither SLURM_ARRAY_TASK_COUNT nor *_MAX is"),
        ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "4"}, None, "an integer, got 'x'"),
        (
            {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "7"}
            | {"SLURM_ARRAY_TASK_COUNT": "3"},
            None,
            "consecutive ids",
        ),
        ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, 8, "disagrees*4 tasks"),
        ({"JOB_COMPLETION_INDEX": "2"}, None, "needs --shard-count N*JOB_COMPLETION_INDEX=2"),
        ({"JOB_COMPLETION_INDEX": "4"}, 4, "outside 0..3 (--shard-count 4)"),
    ],
)
def test_shard_auto_names_the_variable_that_is_missing_or_wrong(environ, count, message):
    with pytest.raises(ValueError) as raised:
        from_engine(environ, count)
    assert fnmatch.fnmatch(str(raised.value), f"*{message}*"), raised.value


def test_shard_auto_reads_a_kubernetes_indexed_job():
    assert from_engine({"JOB_COMPLETION_INDEX": "0"}, 3) == Shard(1, 3)
    assert from_engine({"JOB_COMPLETION_INDEX": "2"}, 3) == Shard(3, 3)


# The examples, played as their engines would run them: a real policy server, one process per
# array task or pod with the engine's variables set, then the merge step.

SERVED_EVALS = """
import dataclasses

from envs import GreedyPointModel, point_eval
from policybench import keys
from policybench.policy.codec import Codec, concat, prompt

OPENPI = Codec("openpi", (concat(keys.STATE, into="observation/state"), prompt()))
REACH = dataclasses.replace(
    point_eval("reach", tasks={"a": "reach a", "b": "reach b", "c": "reach c"},
               scripted=GreedyPointModel),
    codecs={"openpi": OPENPI},
)
SLOW = dataclasses.replace(
    point_eval("slow", tasks={"far": "reach slowly"}, timeout_s=0.2, scripted=GreedyPointModel),
    codecs={"openpi": OPENPI},
)
"""
SERVED_BENCHMARK = """
import policybench
from served_evals import REACH, SLOW


@policybench.parametrize(REACH, SLOW)
def test_point(rollout, harness):
    harness(rollout)
"""
SHARDS = 3


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository as the examples expect one: benchmarks/ under its root."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "pytest.ini").write_text("[pytest]\n")
    benchmarks = root / "benchmarks"
    benchmarks.mkdir()
    (benchmarks / "envs.py").write_text(ENVS)
    (benchmarks / "served_evals.py").write_text(SERVED_EVALS)
    (benchmarks / "test_point.py").write_text(SERVED_BENCHMARK)
    return root


@pytest.fixture(scope="module")
def policy_url(checkout: Path):
    """A real `policybench serve` of the benchmark's Evals, as the examples' one server."""
    port = free_port()
    command = [sys.executable, "-m", "policybench.cli", "serve", "--policy=scripted"]
    command += ["--eval", "served_evals:REACH", "--eval", "served_evals:SLOW", "--port", str(port)]
    env = {**engine_env(checkout), "PYTHONPATH": str(checkout / "benchmarks")}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=checkout)
    try:
        line = server.stdout.readline()
        assert "serving" in line, f"server did not start: {line!r}"
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def engine_env(checkout: Path, **variables: str) -> dict[str, str]:
    """A job's environment: this Python's commands on PATH, no xdist of the test run's own,
    a small plan, and the engine's variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "SLURM"))}
    env.pop("JOB_COMPLETION_INDEX", None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTEST_ADDOPTS"] = "--rollouts 2 -p no:cacheprovider"
    return {**env, **variables}


@pytest.fixture(scope="module")
def unsharded(checkout: Path, policy_url: str) -> dict:
    """The summary of the same benchmark run whole, in one process."""
    command = ["pytest", "benchmarks/", "-m", "not golden", "--policy=openpi"]
    command += ["--policy-url", policy_url, "--report-dir", "reports/whole"]
    done = subprocess.run(
        command, cwd=checkout, env=engine_env(checkout), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return counts(checkout / "reports" / "whole" / "latest")


def counts(run_dir: Path) -> dict:
    """Per Eval, per task and overall: the counts and rates of a run's summary.json."""
    summary = json.loads((run_dir / "summary.json").read_text())
    fields = ("rollouts", "solved", "unsolved", "errors", "success_rate", "interval")
    rows = [*summary["evals"], *summary["tasks"], summary["overall"]]
    return {(row["eval"], row["task"]): {f: row[f] for f in fields} for row in rows}


def run_all(commands: list[tuple[list[str], dict[str, str]]], cwd: Path) -> None:
    """Runs the commands side by side, as an engine runs array tasks; each must succeed."""
    running = [
        subprocess.Popen(c, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for c, e in commands
    ]
    for process in running:
        output = process.communicate(timeout=300)[0].decode()
        assert process.returncode == 0, output[-3000:]


def test_slurm_example_shards_and_merges_into_the_unsharded_result(checkout, policy_url, unsharded):
    job, example = "4242", REPO / "examples" / "slurm"
    array = {"SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_COUNT": str(SHARDS)}
    array |= {"SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": str(SHARDS - 1)}
    tasks = [
        (
            ["bash", str(example / "shard.sbatch")],
            engine_env(checkout, POLICY_URL=policy_url, SLURM_ARRAY_TASK_ID=str(i), **array),
        )
        for i in range(SHARDS)
    ]
    run_all(tasks, checkout)
    labels = sorted(
        run.name.rsplit("-", 1)[1] for run in (checkout / "reports" / job).glob("*-shard*")
    )
    assert labels == [f"shard{k}of{SHARDS}" for k in range(1, SHARDS + 1)]
    merge = ["bash", str(example / "merge.sbatch")]
    run_all([(merge, engine_env(checkout, ARRAY_JOB_ID=job))], checkout)
    assert counts(checkout / "reports" / job / "merged") == unsharded


def test_kubernetes_example_shards_and_merges_into_the_unsharded_result(
    checkout, policy_url, unsharded, tmp_path
):
    yaml = pytest.importorskip("yaml")
    example = REPO / "examples" / "kubernetes"
    shards = yaml.safe_load((example / "shards.yaml").read_text())["spec"]
    merge = yaml.safe_load((example / "merge.yaml").read_text())["spec"]
    assert shards["completionMode"] == "Indexed"
    (container,) = shards["template"]["spec"]["containers"]
    assert f"--shard-count={shards['completions']}" in container["command"]
    (merger,) = merge["template"]["spec"]["containers"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/reports"}
    assert merger["volumeMounts"] == container["volumeMounts"]

    def command(spec: dict, **overrides: str) -> list[str]:
        """The container's command as the kubelet runs it: $(VAR) from its env, the volume at
        tmp_path, SHARDS pods instead of the manifest's count."""
        env = {v["name"]: v["value"] for v in spec.get("env", [])} | overrides
        words = [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], word) for word in spec["command"]]
        words = [word.replace("/reports", str(tmp_path)) for word in words]
        return [re.sub(r"^--shard-count=\d+$", f"--shard-count={SHARDS}", w) for w in words]

    pods = [
        (
            command(container, POLICY_URL=policy_url),
            engine_env(checkout, JOB_COMPLETION_INDEX=str(i)),
        )
        for i in range(SHARDS)
    ]
    run_all(pods, checkout)
    run_all([(command(merger), engine_env(checkout))], checkout)
    run = next(v["value"] for v in container["env"] if v["name"] == "RUN")
    assert len(list((tmp_path / run).glob("*-shard*of3"))) == SHARDS
    assert counts(tmp_path / run / "merged") == unsharded
