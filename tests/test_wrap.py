"""policybench.wrap: a loop policybench does not drive leaves the run directory a pytest run
leaves (results.jsonl, run.json, traces, videos, summary and report), one record per episode (per
sub-env of a vector env), and an episode the loop dies in is marked, then recorded as an error."""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import policybench
from policybench import keys
from policybench.cli import main as policybench_main
from policybench.pages.server import Request
from policybench.record.rollout_trace import read_trace
from policybench.report.html import Findings, write_html
from policybench.report.summary import Summary
from policybench.run.arms import BLINDED, BLINDING_FILE, SEALED_FILE, Blinding
from policybench.run.info import RUN_INFO
from policybench.run.layout import SUMMARY
from policybench.run.results import LATEST, RESULTS, read_results
from policybench.run.unfinished import UNFINISHED
from policybench.run.verdicts import Verdict, append_verdict, read_verdicts
from policybench.scoring.app import PAGE, ScoringApp

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).with_name("policybench")


def records(run_dir: Path) -> list[dict]:
    results = read_results(run_dir / RESULTS)
    assert not results.problems
    return list(results.records)


def run_to_end(env: gym.Env, action: int = 0) -> None:
    while not any(env.step(action)[2:4]):
        pass


def test_each_episode_is_one_record_of_its_scene_with_its_trace_and_run_files(tmp_path, capsys):
    env = policybench.wrap(
        gym.make("CartPole-v1"), eval="cartpole", task="balance", run_dir=tmp_path
    )
    for seed in range(2):
        env.reset(seed=seed)
        run_to_end(env)
    env.reset()  # no seed: the scene is not known
    env.step(0)
    env.close()
    found = records(tmp_path)
    assert [r[keys.OUTCOME] for r in found] == ["unsolved"] * 3
    assert all(r[keys.SUM_REWARD] == r[keys.STEPS] for r in found)  # CartPole: 1 per step
    assert [r[keys.SCENE] for r in found] == [
        {keys.TASK: "balance", keys.SEED: 0},
        {keys.TASK: "balance", keys.SEED: 1},
        None,
    ]
    assert found[2][keys.REASON] == "the loop ended the episode after 1 steps"
    run = tmp_path.name  # the run an episode is of is in its id: runs merged never collide
    assert [r[keys.NODEID] for r in found] == [
        f"cartpole::balance/seed=0/episode={run}:0",
        f"cartpole::balance/seed=1/episode={run}:1",
        f"cartpole::balance/episode={run}:2",
    ]
    assert env.run_dir == tmp_path
    assert found[0][keys.SUCCESS_REPORTED] is False  # CartPole never says success
    assert found[0][keys.SIM_S] is None and found[0][keys.WALL_S] > 0  # the loop's own time
    assert {"policybench", "gymnasium"} <= set(found[0][keys.PACKAGES])
    assert all((tmp_path / r[keys.ROLLOUT_TRACE]).is_file() for r in found)
    run = json.loads((tmp_path / RUN_INFO).read_text())
    assert run["fingerprint"]["evals"]["cartpole"] and run["command"]
    assert json.loads((tmp_path / SUMMARY).read_text())["overall"]["rollouts"] == 3
    assert (tmp_path / "index.html").is_file() and not (tmp_path / UNFINISHED).exists()
    assert "no simulated clock" in (tmp_path / "rollouts" / "00000.html").read_text()
    assert "the env never said whether the task was achieved" in capsys.readouterr().err


def test_a_loop_that_raises_in_a_with_block_records_the_open_episode_as_an_error(tmp_path):
    env = gym.make("CartPole-v1")
    with (
        pytest.raises(RuntimeError),
        policybench.wrap(env, "cartpole", "balance", run_dir=tmp_path) as env,
    ):
        env.reset(seed=0)
        run_to_end(env)
        env.reset(seed=1)
        env.step(0)
        raise RuntimeError("the policy broke")
    found = records(tmp_path)
    assert [r[keys.OUTCOME] for r in found] == ["unsolved", "error"]
    assert found[1][keys.REASON] == "the loop raised RuntimeError: the policy broke (after 1 steps)"


def test_a_loop_recording_into_its_run_again_goes_on_counting_its_episodes(tmp_path):
    for seeds in ((0, 1), (0,)):
        env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
        for seed in seeds:
            env.reset(seed=seed)
            run_to_end(env)
        env.close()
    found = records(tmp_path)
    assert [r[keys.ROLLOUT_INDEX] for r in found] == [0, 1, 2]
    assert len({r[keys.ROLLOUT_TRACE] for r in found}) == 3  # the same scene's too
    assert len({r[keys.NODEID] for r in found}) == 3  # what verdicts and merge tell apart
    assert json.loads((tmp_path / SUMMARY).read_text())["overall"]["rollouts"] == 3


def test_report_merge_of_separate_loop_runs_keeps_every_episode_and_a_copy_adds_none(tmp_path):
    for name, seeded in (("a", True), ("b", True), ("c", False), ("d", False)):
        env = policybench.wrap(
            gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path / name
        )
        with env:
            for seed in range(3 if seeded else 2):
                env.reset(seed=seed if seeded else None)
                run_to_end(env)
    shutil.copytree(tmp_path / "a", tmp_path / "a-copy")
    parts = [tmp_path / name for name in ("a", "b", "c", "d", "a-copy")]
    merge = subprocess.run(
        [CLI, "report", "merge", *parts, "--out", tmp_path / "merged"],
        capture_output=True,
        text=True,
    )
    assert merge.returncode == 0, merge.stderr
    found = records(tmp_path / "merged")
    assert len(found) == 3 + 3 + 2 + 2  # the same seeds' and the unseeded episodes of each run
    assert len({r[keys.NODEID] for r in found}) == 10
    assert len({r[keys.ROLLOUT_TRACE] for r in found}) == 10
    assert all((tmp_path / "merged" / r[keys.ROLLOUT_TRACE]).is_file() for r in found)
    merging = json.loads((tmp_path / "merged" / RUN_INFO).read_text())["settings"]["merge"]
    assert merging["exact_duplicates_dropped"] == 3 and merging["repeats"] == 0  # a-copy's


def test_report_merge_of_two_loop_runs_of_one_name_keeps_both_runs_episodes(tmp_path):
    """Two machines each wrote `runs/loop` (copied here to here/run and there/run): their episode
    ids name the same run id, yet they are two runs; merge keeps both, each episode with its
    own id, trace, video and verdict, and a copy of either still adds nothing."""
    for where in ("here", "there"):
        env = gym.make("CartPole-v1", render_mode="rgb_array")
        with policybench.wrap(env, "cartpole", "balance", run_dir=tmp_path / where / "run") as env:
            for seed in range(2):
                env.reset(seed=seed)
                run_to_end(env)
    here, there = records(tmp_path / "here" / "run"), records(tmp_path / "there" / "run")
    assert [r[keys.NODEID] for r in here] == [r[keys.NODEID] for r in there]  # one name's ids
    given = Verdict.now(there[1][keys.NODEID], "success", "ann")  # on there's episode 1
    append_verdict(tmp_path / "there" / "run", given)
    shutil.copytree(tmp_path / "there" / "run", tmp_path / "copy" / "run")
    parts = [tmp_path / where / "run" for where in ("here", "there", "copy")]
    merge = subprocess.run(
        [CLI, "report", "merge", *parts, "--out", tmp_path / "m"], capture_output=True, text=True
    )
    assert merge.returncode == 0, merge.stderr
    assert f"{parts[1]} is another loop run named run" in merge.stdout
    found = records(tmp_path / "m")
    assert len(found) == 4  # both runs' two episodes; the copy's are exact duplicates
    assert len({r[keys.NODEID] for r in found}) == 4
    assert sum("/episode=run~2:" in r[keys.NODEID] for r in found) == 2
    for name in (keys.ROLLOUT_TRACE, keys.VIDEO):
        assert len({r[name] for r in found}) == 4
        assert all((tmp_path / "m" / r[name]).is_file() for r in found)
    # The renamed episode's video is its own run's, not the other run's of the old name.
    renamed = next(r for r in found if r[keys.NODEID].endswith("/episode=run~2:1"))
    twin = tmp_path / "there" / "run" / there[1][keys.VIDEO]
    assert (tmp_path / "m" / renamed[keys.VIDEO]).read_bytes() == twin.read_bytes()
    # The verdict given on `there`'s episode follows it, not `here`'s episode of the old id.
    summary = json.loads((tmp_path / "m" / SUMMARY).read_text())
    assert [v.rollout for v in read_verdicts(tmp_path / "m").given] == [renamed[keys.NODEID]]
    assert summary["operator"] is not None
    assert summary["overall"]["rollouts"] == 4
    listed = json.loads((tmp_path / "m" / RUN_INFO).read_text())["settings"]["merged_from"]
    assert [part.get("episodes_named") for part in listed] == [None, "run~2", "run~2"]


def test_report_merge_refuses_copies_of_one_loop_run_both_recorded_into_again(tmp_path):
    """A run copied, then recorded into again in both places: the copies' new episodes took the
    same ids as one run's; merge names the clash rather than drop either."""
    with policybench.wrap(gym.make("CartPole-v1"), "c", "b", run_dir=tmp_path / "a" / "run") as env:
        env.reset(seed=0)
        run_to_end(env)
    shutil.copytree(tmp_path / "a" / "run", tmp_path / "b" / "run")
    for where in ("a", "b"):
        with policybench.wrap(
            gym.make("CartPole-v1"), "c", "b", run_dir=tmp_path / where / "run"
        ) as env:
            env.reset(seed=1)
            run_to_end(env, action=1 if where == "a" else 0)
    merge = subprocess.run(
        [
            CLI,
            "report",
            "merge",
            tmp_path / "a" / "run",
            tmp_path / "b" / "run",
            "--out",
            tmp_path / "m",
        ],
        capture_output=True,
        text=True,
    )
    assert merge.returncode != 0
    assert "as two different episodes of one run" in merge.stderr
    assert str(tmp_path / "a" / "run") in merge.stderr and "Traceback" not in merge.stderr
    assert not (tmp_path / "m" / RESULTS).exists()


COMMAND_LOOP = """
import sys
import gymnasium as gym
import policybench
env = gym.make("CartPole-v1")
arm = sys.argv[2]
with policybench.wrap(env, "cartpole", "balance", arm=arm, run_dir=sys.argv[1]) as env:
    env.reset(seed=0)
    env.step(0)
"""


def test_run_json_of_loops_recording_into_one_run_lists_every_loops_command(tmp_path):
    """Arms recorded by processes of different scripts and arguments: run.json's `command` is
    the first loop's, its `commands` every distinct one (a loop run again adds none), and the
    report and a merge of the run show them all."""
    scripts = {arm: tmp_path / f"loop_{arm.lower()}.py" for arm in ("A", "B")}
    for script in scripts.values():
        script.write_text(COMMAND_LOOP)
    run_dir = tmp_path / "run"
    calls = [
        [sys.executable, scripts["A"], run_dir, "A"],
        [sys.executable, scripts["B"], run_dir, "B"],
        [sys.executable, scripts["A"], run_dir, "A"],  # the same command again
    ]
    for call in calls:
        assert subprocess.run(call, capture_output=True).returncode == 0
    said = [shlex.join([Path(sys.executable).name, str(c[1]), str(run_dir), c[3]]) for c in calls]
    run = json.loads((run_dir / RUN_INFO).read_text())
    assert run["command"] == said[0]
    assert run["settings"]["commands"] == said[:2]
    index = (run_dir / "index.html").read_text()
    assert all(html.escape(command) in index for command in said[:2])
    merge = subprocess.run(
        [CLI, "report", "merge", run_dir, "--out", tmp_path / "m"], capture_output=True, text=True
    )
    assert merge.returncode == 0, merge.stderr
    merged = json.loads((tmp_path / "m" / RUN_INFO).read_text())["settings"]
    assert merged["commands"] == said[:2] and merged["merged_from"][0]["commands"] == said[:2]


def test_a_loop_runs_report_says_its_steps_took_wall_time_and_shows_no_model_calls(tmp_path):
    env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
    with env:
        env.reset(seed=0)
        run_to_end(env)
    index = (tmp_path / "index.html").read_text()
    page = (tmp_path / "rollouts" / "00000.html").read_text()
    assert 'id="loop-run"' in index and "the loop's own wall time" in index
    for harness_only in ("charged in simulated time", ">sim s<", ">infer ms<", ">latency<"):
        assert harness_only not in index
    assert "Model calls" not in page and "call-plots" not in page
    # The same episode as a harness rollout's record (of a plan, in simulated time) keeps them.
    record = {**records(tmp_path)[0], keys.ROLLOUT_COUNT: 1, keys.SIM_S: 1.0}
    harness = tmp_path / "harness"
    shutil.copytree(tmp_path / "traces", harness / "traces")
    write_html(harness, Findings(Summary.of([record]), (record,), None))
    index = (harness / "index.html").read_text()
    assert 'id="loop-run"' not in index and "charged in simulated time" in index
    assert ">sim s<" in index and ">infer ms<" in index
    assert "Model calls" in (harness / "rollouts" / "00000.html").read_text()


def test_policybench_score_of_a_loop_run_says_its_verdicts_once_at_ctrl_c(tmp_path):
    env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
    with env:
        env.reset(seed=0)
        run_to_end(env)
    [record] = records(tmp_path)
    server = subprocess.Popen(
        [CLI, "score", tmp_path, "--port", "0", "--scorer", "ana"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = next(line for line in server.stdout if line.startswith("scoring"))
        url = url.rsplit("open ", 1)[1].strip()
        verdict = {keys.VERDICT_ROLLOUT: record[keys.NODEID], keys.VERDICT: "success"}
        request = urllib.request.Request(
            url.rstrip("/") + "/verdict",
            json.dumps(verdict).encode(),
            {"Content-Type": "application/json"},  # as the page sends it
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, out + err
    assert out.count("operator verdicts from ana") == 1, out
    assert "report:" in out


SUCCEEDS = """
class Succeeds(gym.Wrapper):  # says success when the episode lasted its time limit
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "is_success": truncated}
"""


def succeeding_cartpole() -> gym.Env:
    namespace = {"gym": gym}
    exec(SUCCEEDS, namespace)
    return namespace["Succeeds"](gym.make("CartPole-v1", max_episode_steps=20))


def balance(obs: np.ndarray) -> int:
    return int(obs[2] + obs[3] > 0)  # push toward where the pole leans


def play(env: gym.Env, policy: Callable[[np.ndarray], int], episodes: int) -> None:
    """`episodes` whole episodes of `policy`, on seeds 0, 1, ..."""
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(policy(obs))
            done = terminated or truncated


def test_two_wrapped_loops_as_arms_are_compared_paired_by_scene(tmp_path):
    for arm, policy in (("A", lambda obs: 0), ("B", balance)):
        for run_dir in (tmp_path / "both", tmp_path / arm):
            env = policybench.wrap(
                succeeding_cartpole(), "cartpole", "balance", arm=arm, run_dir=run_dir
            )
            play(env, policy, 4)
            env.close()
    summary = json.loads((tmp_path / "both" / SUMMARY).read_text())
    [versus] = summary["arm_comparisons"]
    compare = subprocess.run(
        [CLI, "report", "compare", tmp_path / "A", tmp_path / "B"], capture_output=True, text=True
    )
    assert compare.returncode == 0, compare.stderr
    compared = json.loads((tmp_path / "B" / "compare-A.json").read_text())
    for comparison in (versus, compared):
        [row] = comparison["tasks"]
        assert (row["design"], row["before"], row["after"]) == ("paired", [0, 4], [4, 4])
        assert row["pairs"] == {"both": 0, "gained": 4, "lost": 0}


def test_a_vector_env_records_one_episode_per_sub_env_per_reset_cycle(tmp_path):
    pytest.importorskip("gym_pusht", reason="needs pip install 'policybench[pusht]'")
    from policybench.suites.pusht import TASK, make_env

    steps = 3
    vector = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TimeLimit(make_env(TASK), steps)] * 4)
    env = policybench.wrap(vector, eval="pusht", task=TASK, run_dir=tmp_path)
    env.reset(seed=10)
    for _ in range(2 * (steps + 1) + 1):  # two episodes of each sub-env, each followed by the
        env.step(env.action_space.sample())  # step that resets it, and one step of a third
    env.close()
    found = records(tmp_path)
    assert len(found) == 12
    assert all(r[keys.STEPS] == steps and r[keys.SUCCESS_REPORTED] for r in found[:8])
    assert {r[keys.REASON] for r in found[8:]} == {"the loop ended the episode after 1 steps"}
    assert [r[keys.SCENE][keys.SEED] for r in found[:4]] == [10, 11, 12, 13]
    assert [r[keys.SCENE] for r in found[4:]] == [None] * 8  # reset by the vector env, unseeded
    assert len({r[keys.ROLLOUT_TRACE] for r in found}) == 12


@pytest.mark.parametrize("mode", list(gym.vector.AutoresetMode), ids=lambda mode: mode.value)
def test_every_autoreset_mode_of_a_vector_env_gives_whole_episodes(tmp_path, mode):
    make = [lambda: gym.make("CartPole-v1", max_episode_steps=5)] * 2
    vector = gym.vector.SyncVectorEnv(make, autoreset_mode=mode)
    env = policybench.wrap(vector, eval="cartpole", task="balance", run_dir=tmp_path)
    env.reset(seed=0)
    for _ in range(11):  # two whole episodes of each sub-env, under any mode
        _, _, terminated, truncated, _ = env.step(np.zeros(2, int))
        if mode is gym.vector.AutoresetMode.DISABLED and any(terminated | truncated):
            env.reset(options={"reset_mask": terminated | truncated})
    env.close()
    whole = [r for r in records(tmp_path) if r[keys.REASON].startswith("env ended")]
    assert [r[keys.STEPS] for r in whole] == [5] * 4
    assert [(r[keys.SCENE] or {}).get(keys.SEED) for r in whole] == [0, 1, None, None]


def test_an_env_that_renders_gets_a_video_shown_by_its_report_page_and_scoring_page(tmp_path):
    pytest.importorskip("av", reason="needs pip install 'policybench[video]'")
    pytest.importorskip("gym_pusht", reason="needs pip install 'policybench[pusht]'")
    import gym_pusht  # noqa: F401 - registers the env

    pusht = gym.make("gym_pusht/PushT-v0", render_mode="rgb_array", max_episode_steps=4)
    env = policybench.wrap(pusht, eval="pusht", task="push-t", run_dir=tmp_path)
    env.reset(seed=0)
    run_to_end(env, pusht.action_space.sample())
    env.close()
    [record] = records(tmp_path)
    assert (tmp_path / record[keys.VIDEO]).stat().st_size > 0
    page = (tmp_path / "rollouts" / "00000.html").read_text()
    assert record[keys.VIDEO] in page
    scoring = ScoringApp(tmp_path, scorer="ana").page(Request("GET", PAGE, {}))
    assert record[keys.VIDEO].encode() in scoring.body  # `policybench score` shows it
    with ScoringApp(tmp_path, scorer="ana").server("127.0.0.1", 0) as server:
        video = server.url + "files/" + record[keys.VIDEO]
        assert fetched(video) == (200, (tmp_path / record[keys.VIDEO]).read_bytes())
        assert fetched(video, "bytes=0-9")[0] == 206
        assert fetched(video, "bytes=x-")[0] == 416  # not numbers: refused, not a traceback
        for other in (RESULTS, RUN_INFO, SUMMARY, record[keys.ROLLOUT_TRACE]):
            assert fetched(server.url + "files/" + other)[0] == 404, other  # not on the page


def fetched(url: str, byte_range: str | None = None) -> tuple[int, bytes]:
    """The status and body a GET of `url` answers (with a Range header if given)."""
    headers = {} if byte_range is None else {"Range": byte_range}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


LOOP = """
import os, signal, sys
import gymnasium as gym
import policybench
env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=sys.argv[1])
for seed in range(2):
    env.reset(seed=seed)
    while not any(env.step(0)[2:4]):
        pass
env.reset(seed=9)
env.step(0)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_loop_killed_mid_episode_keeps_finished_episodes_and_report_html_records_the_open_one(
    tmp_path,
):
    done = subprocess.run([sys.executable, "-c", LOOP, tmp_path], capture_output=True)
    assert done.returncode == -9
    assert [r[keys.OUTCOME] for r in records(tmp_path)] == ["unsolved", "unsolved"]
    assert len(list((tmp_path / UNFINISHED).glob("*.json"))) == 1
    report = subprocess.run([CLI, "report", "html", tmp_path], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    found = records(tmp_path)
    assert [r[keys.OUTCOME] for r in found] == ["unsolved", "unsolved", "error"]
    assert found[2][keys.SCENE] == {keys.TASK: "balance", keys.SEED: 9}
    assert found[2][keys.STEPS] is None and "died mid-episode" in found[2][keys.REASON]
    page = (tmp_path / "rollouts" / "00002.html").read_text()
    assert "a killed loop" in page and "made no step" not in page  # it stepped, unrecorded
    assert json.loads((tmp_path / SUMMARY).read_text())["overall"]["errors"] == 1
    assert not list((tmp_path / UNFINISHED).glob("*.json"))


def test_a_killed_episodes_partial_video_is_removed_when_its_error_is_recorded(tmp_path):
    pytest.importorskip("av", reason="needs pip install 'policybench[video]'")
    pytest.importorskip("gym_pusht", reason="needs pip install 'policybench[pusht]'")
    loop = LOOP.replace(
        'gym.make("CartPole-v1")',
        'gym.make("gym_pusht/PushT-v0", render_mode="rgb_array", max_episode_steps=50)',
    )
    loop = loop.replace("import policybench", "import gym_pusht, policybench")
    loop = loop.replace(
        "env.step(0)\nos.kill", "[env.step([256.0, 256.0]) for _ in range(40)]\nos.kill"
    )
    loop = loop.replace("env.step(0)", "env.step([256.0, 256.0])")
    done = subprocess.run([sys.executable, "-c", loop, tmp_path], capture_output=True)
    assert done.returncode == -9
    assert len(list((tmp_path / "videos").glob("*.mp4"))) == 2
    assert len(list((tmp_path / "videos").glob(".*.mp4.*"))) == 1  # the killed one's, half written
    report = subprocess.run([CLI, "report", "html", tmp_path], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    found = records(tmp_path)
    assert [r[keys.OUTCOME] for r in found] == ["unsolved", "unsolved", "error"]
    assert sorted((tmp_path / "videos").glob("*.mp4")) == sorted(
        tmp_path / r[keys.VIDEO] for r in found[:2]
    )
    assert list((tmp_path / "videos").glob(".*")) == []
    assert keys.VIDEO not in found[2] or found[2][keys.VIDEO] is None


def test_a_loop_that_dies_of_an_uncaught_exception_records_the_open_episode_at_exit(tmp_path):
    loop = LOOP.replace("os.kill(os.getpid(), signal.SIGKILL)", "raise SystemError('dead')")
    done = subprocess.run([sys.executable, "-c", loop, tmp_path], capture_output=True, text=True)
    assert done.returncode == 1
    found = records(tmp_path)
    assert [r[keys.OUTCOME] for r in found] == ["unsolved", "unsolved", "error"]
    assert found[2][keys.REASON].startswith("the loop raised SystemError: dead")
    assert (tmp_path / SUMMARY).is_file()


def test_a_wrapped_metaworld_loop_matches_the_benchmark_scene_by_scene(tmp_path):
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    from policybench.policy.base import SessionContext
    from policybench.suites.metaworld import (
        CONTROL_HZ,
        MAX_STEPS,
        MT10,
        MT10_STATE,
        SeededPlacement,
    )

    task, seeds = "reach-v3", (0, 1)
    bench = subprocess.run(
        [sys.executable, "-m", "pytest", REPO / "benchmarks" / "test_metaworld.py", "-p",
         "no:cacheprovider", "--policy=scripted", "-k", task, "--rollouts", str(len(seeds)),
         "--report-dir", tmp_path / "bench"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stdout + bench.stderr
    expert = MT10_STATE.scripted()
    env = policybench.wrap(
        SeededPlacement(task),
        eval=MT10_STATE.name,
        task=task,
        instruction=MT10[task],
        policy=expert.describe(),
        packages=MT10_STATE.packages,
        run_dir=tmp_path / "loop",
    )
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        predict = expert.open(SessionContext(MT10[task], CONTROL_HZ))
        for _ in range(MAX_STEPS):
            obs, _, terminated, truncated, info = env.step(predict({keys.STATE: obs}).actions[0])
            if info["success"] or terminated or truncated:
                break
    env.close()

    def per_scene(run_dir: Path) -> dict:
        return {
            json.dumps(r[keys.SCENE], sort_keys=True): (
                r[keys.OUTCOME],
                r[keys.STEPS],
                r[keys.SUM_REWARD],
            )
            for r in records(run_dir)
        }

    ran = per_scene(tmp_path / "bench" / LATEST)
    assert len(ran) == len(seeds) and per_scene(tmp_path / "loop") == ran
    sections = [sections_of(tmp_path / run / "index.html") for run in ("bench/latest", "loop")]
    assert sections[0] == sections[1]
    pages = [
        sections_of(tmp_path / run / "rollouts" / "00000.html") for run in ("bench/latest", "loop")
    ]
    assert "What the policy did" in pages[1] and "Model calls" in pages[0]  # a loop makes none
    assert [section for section in pages[0] if section != "Model calls"] == pages[1]


def sections_of(page: Path) -> list[str]:
    return re.findall(r"<h[23][^>]*>([^<]*)", page.read_text())


def test_reset_options_and_declared_scene_fields_of_numpy_values_are_kept_as_json(tmp_path):
    env = policybench.wrap(
        gym.make("CartPole-v1"),
        "cartpole",
        "balance",
        scene={"goal": np.array([1, 2])},
        run_dir=tmp_path,
    )
    with env:
        env.reset(seed=3, options={"low": np.float32(-0.01), "high": np.array(0.01)})
        env.step(0)
    [record] = records(tmp_path)
    assert record[keys.SCENE] == {
        keys.TASK: "balance",
        keys.SEED: 3,
        "low": pytest.approx(-0.01),
        "high": 0.01,
        "goal": [1, 2],
    }
    with pytest.raises(
        TypeError, match=r"the scene field 'low' is a object.* JSON values, numpy arrays"
    ):
        policybench.wrap(gym.make("CartPole-v1"), "c", "b", run_dir=tmp_path / "b").reset(
            seed=0, options={"low": object()}
        )


def test_a_closed_wrapped_env_refuses_to_start_an_episode_it_would_not_record(tmp_path):
    env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
    with env:
        env.reset(seed=0)
        env.step(0)
    with pytest.raises(RuntimeError, match=r"is closed .* wrap a new env with run_dir="):
        env.reset(seed=1)
    assert len(records(tmp_path)) == 1
    assert not (tmp_path / UNFINISHED).exists()  # no marker to be taken for a dead loop


def test_report_html_records_a_loop_killed_in_its_first_episode(tmp_path):
    loop = LOOP.replace("for seed in range(2):", "for seed in range(0):")
    done = subprocess.run([sys.executable, "-c", loop, tmp_path], capture_output=True)
    assert done.returncode == -9 and not (tmp_path / RESULTS).exists()
    report = subprocess.run([CLI, "report", "html", tmp_path], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    [record] = records(tmp_path)
    assert record[keys.OUTCOME] == "error" and "died mid-episode" in record[keys.REASON]
    assert (tmp_path / "index.html").is_file()


def test_the_record_of_an_env_that_renders_no_frames_says_why_it_has_no_video(tmp_path):
    env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
    with env:
        env.reset(seed=0)
        env.step(0)
    [record] = records(tmp_path)
    assert keys.VIDEO not in record
    assert 'render_mode="rgb_array"' in record[keys.VIDEO_MISSING]
    page = (tmp_path / "rollouts" / "00000.html").read_text()
    assert "render_mode=&#34;rgb_array&#34;" in page and "--record-video" not in page


def test_two_loops_recording_into_one_run_at_once_give_each_episode_its_own_id(tmp_path):
    envs = [
        policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
        for _ in range(2)
    ]
    for env in envs:
        env.reset(seed=0)
        run_to_end(env)
    for env in envs:
        env.close()
    found = records(tmp_path)
    assert sorted(r[keys.ROLLOUT_INDEX] for r in found) == [0, 1]
    assert len({r[keys.NODEID] for r in found}) == 2
    assert len({r[keys.ROLLOUT_TRACE] for r in found}) == 2
    assert all((tmp_path / r[keys.ROLLOUT_TRACE]).is_file() for r in found)


def test_a_policy_description_of_numpy_values_and_paths_is_recorded_as_json(tmp_path):
    policy = {"name": "mine", "lr": np.float32(0.5), "checkpoint": Path("ckpt/7")}
    env = policybench.wrap(gym.make("CartPole-v1"), "c", "b", policy=policy, run_dir=tmp_path)
    with env:
        env.reset(seed=0)
        env.step(0)
    assert records(tmp_path)[0][keys.POLICY] == {"name": "mine", "lr": 0.5, "checkpoint": "ckpt/7"}
    with pytest.raises(TypeError, match=r"the policy's field 'name' is a object"):
        policybench.wrap(gym.make("CartPole-v1"), "c", "b", policy={"name": object()})


class DictActions(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,))
    action_space = gym.spaces.Dict(
        {"arm": gym.spaces.Box(-1, 1, (2,)), "grip": gym.spaces.Discrete(2)}
    )

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {"success": False}


def test_the_trace_of_a_dict_action_space_holds_its_actions_flattened(tmp_path):
    env = policybench.wrap(DictActions(), "d", "t", run_dir=tmp_path)
    with env:
        env.reset(seed=0)
        env.step({"arm": np.array([0.25, -0.5], np.float32), "grip": 1})
    [record] = records(tmp_path)
    played = read_trace(tmp_path / record[keys.ROLLOUT_TRACE])["arrays"]["action"]
    assert played.ravel().tolist() == [0.25, -0.5, 0.0, 1.0]


def test_an_interrupted_loop_records_its_open_episode_by_the_exception_alone(tmp_path):
    env = gym.make("CartPole-v1")
    with (
        pytest.raises(KeyboardInterrupt),
        policybench.wrap(env, "cartpole", "balance", run_dir=tmp_path) as env,
    ):
        env.reset(seed=0)
        env.step(0)
        raise KeyboardInterrupt
    [record] = records(tmp_path)
    assert record[keys.REASON] == "the loop raised KeyboardInterrupt (after 1 steps)"


def test_a_loop_wrapped_again_after_one_was_killed_keeps_the_killed_episode(tmp_path):
    loop = LOOP.replace("env.reset(seed=9)", "env.reset()")  # undeclared scenes: ids by index
    assert subprocess.run([sys.executable, "-c", loop, tmp_path]).returncode == -9
    env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
    with env:
        env.reset()
        env.step(0)
    found = records(tmp_path)
    assert sorted(r[keys.ROLLOUT_INDEX] for r in found) == [0, 1, 2, 3]
    assert sorted(r[keys.OUTCOME] for r in found) == ["error", "unsolved", "unsolved", "unsolved"]


ARM_LOOP = """
import sys
import gymnasium as gym
import policybench
env = gym.make("CartPole-v1")
env = policybench.wrap(env, "cartpole", "balance", arm=sys.argv[2], run_dir=sys.argv[1])
env.reset(seed=0)
env.step(0)
env.close()
"""


def test_loops_of_several_arms_recording_into_one_run_at_once_all_finish_and_are_listed(tmp_path):
    arms = "ABCD"
    loops = [subprocess.Popen([sys.executable, "-c", ARM_LOOP, tmp_path, arm]) for arm in arms]
    assert [loop.wait() for loop in loops] == [0] * len(arms)
    assert sorted(json.loads((tmp_path / RUN_INFO).read_text())["settings"]["arms"]) == list(arms)
    assert sorted(r[keys.ARM] for r in records(tmp_path)) == list(arms)


def trace_times(run_dir: Path, record: dict) -> tuple[float, np.ndarray]:
    trace = read_trace(run_dir / record[keys.ROLLOUT_TRACE])
    return trace["period_s"], trace["arrays"]["time_s"]


def test_a_trace_runs_on_the_clock_the_env_declares_so_its_plots_span_the_episode(tmp_path):
    env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
    undeclared = gym.make("CartPole-v1")
    undeclared.metadata = {**undeclared.metadata, "render_fps": None}
    other = policybench.wrap(undeclared, "cartpole", "balance", run_dir=tmp_path / "pace")
    for wrapped in (env, other):
        with wrapped:
            wrapped.reset(seed=0)
            for _ in range(5):
                wrapped.step(0)
    [record] = records(tmp_path)
    assert record[keys.CONTROL_HZ] == 50.0  # CartPole's render_fps: its 0.02 s step
    period, times = trace_times(tmp_path, record)
    assert period == 0.02 and times.tolist() == pytest.approx([0, 0.02, 0.04, 0.06, 0.08])
    [paced] = records(tmp_path / "pace")
    period, times = trace_times(tmp_path / "pace", paced)
    assert paced[keys.CONTROL_HZ] is None  # said nowhere: the trace keeps the loop's own pace
    assert period * 5 == pytest.approx(paced[keys.WALL_S], rel=1e-3)
    assert times.tolist() == pytest.approx([k * period for k in range(5)])


@pytest.mark.parametrize("arm", ["", 3])
def test_an_arm_that_is_no_name_is_refused_at_wrap(tmp_path, arm):
    with pytest.raises(TypeError, match=r"arm must be a non-empty string, got "):
        policybench.wrap(gym.make("CartPole-v1"), "c", "b", arm=arm, run_dir=tmp_path)
    assert not (tmp_path / RESULTS).exists()


def test_run_json_of_loops_of_two_arms_names_each_arm_s_policy_as_a_pytest_run_does(tmp_path):
    for arm, name in (("A", "zero"), ("B", "balance")):
        env = policybench.wrap(
            gym.make("CartPole-v1"), "c", "b", arm=arm, policy={"name": name}, run_dir=tmp_path
        )
        with env:
            env.reset(seed=0)
            env.step(0)
    settings = json.loads((tmp_path / RUN_INFO).read_text())["settings"]
    assert (settings["arms"], settings["policy"]) == (["A", "B"], ["zero", "balance"])


# What a blinded run must not show before it is unblinded: the arms' names and their policies'.
BLIND_ARMS = {"pizero": {"name": "openpi-zz", "checkpoint": "/ckpt/pi-77"}, "diffusion": {}}
HIDDEN = ("pizero", "diffusion", "openpi-zz", "pi-77")


def leaks(run_dir: Path) -> dict[str, list[str]]:
    """The names each file of `run_dir` shows, but for the two that keep them aside."""
    found = {
        str(path.relative_to(run_dir)): [name for name in HIDDEN if name in path.read_text()]
        for path in run_dir.rglob("*")
        if path.is_file() and path.name not in (BLINDING_FILE, SEALED_FILE)
    }
    return {path: names for path, names in found.items() if names}


def test_wrapped_loops_as_blinded_arms_show_letters_until_unblinded_and_still_pair(tmp_path):
    for (arm, described), policy in zip(BLIND_ARMS.items(), (lambda obs: 0, balance), strict=True):
        env = policybench.wrap(
            succeeding_cartpole(),
            "cartpole",
            "balance",
            policy=described or None,
            arm=arm,
            blind=True,
            run_dir=tmp_path,
        )
        with env:
            play(env, policy, 4)
    assert leaks(tmp_path) == {}
    with ScoringApp(tmp_path, scorer="ana").server("127.0.0.1", 0) as server:
        for sealed in (BLINDING_FILE, SEALED_FILE, RESULTS):  # the key, the automatic outcomes
            assert fetched(server.url + "files/" + sealed)[0] == 404, sealed
    scoring = ScoringApp(tmp_path, scorer="ana").page(Request("GET", PAGE, {})).body.decode()
    assert b"/policy=A" in scoring.encode() and not [n for n in HIDDEN if n in scoring]
    assert sorted({r[keys.ARM] for r in records(tmp_path)}) == ["A", "B"]
    settings = json.loads((tmp_path / RUN_INFO).read_text())["settings"]
    assert (settings["arms"], settings["policy"]) == (["A", "B"], BLINDED)
    [versus] = json.loads((tmp_path / SUMMARY).read_text())["arm_comparisons"]
    [row] = versus["tasks"]
    assert row["design"] == "paired" and sum(row["pairs"].values()) == 4
    assert sorted([row["before"], row["after"]]) == [[0, 4], [4, 4]]

    assert policybench_main(["report", "unblind", str(tmp_path)]) == 0
    unblinded = records(tmp_path)
    assert sorted({r[keys.ARM] for r in unblinded}) == ["diffusion", "pizero"]
    for record in unblinded:
        assert record[keys.NODEID].endswith(f"/policy={record[keys.ARM]}")
        assert record[keys.POLICY] == (BLIND_ARMS[record[keys.ARM]] or None)
    run = json.loads((tmp_path / RUN_INFO).read_text())
    assert sorted(run["settings"]["arms"]) == ["diffusion", "pizero"]
    assert sorted(run["settings"]["policy"]) == ["(not described)", "openpi-zz"]
    assert run["command"] != BLINDED
    [versus] = json.loads((tmp_path / SUMMARY).read_text())["arm_comparisons"]
    [row] = versus["tasks"]
    assert row["design"] == "paired" and sum(row["pairs"].values()) == 4
    assert all(arm in (tmp_path / "index.html").read_text() for arm in BLIND_ARMS)


BLIND_LOOP = """
import sys
import gymnasium as gym
import policybench
env = policybench.wrap(
    gym.make("CartPole-v1"), "cartpole", "balance", arm=sys.argv[2],
    policy={"name": sys.argv[2] + "-policy"}, blind=True, run_dir=sys.argv[1],
)
with env:
    for seed in range(2):
        env.reset(seed=seed)
        env.step(0)
"""


def test_blinded_loops_recording_at_once_each_keep_one_letter_and_their_own_policy(tmp_path):
    loops = [
        subprocess.Popen([sys.executable, "-c", BLIND_LOOP, tmp_path, arm]) for arm in BLIND_ARMS
    ]
    assert [loop.wait() for loop in loops] == [0, 0]
    assert sorted(r[keys.ARM] for r in records(tmp_path)) == ["A", "A", "B", "B"]
    letters = json.loads((tmp_path / BLINDING_FILE).read_text())["letters"]
    assert sorted(named["label"] for named in letters.values()) == sorted(BLIND_ARMS)
    assert leaks(tmp_path) == {}
    assert policybench_main(["report", "unblind", str(tmp_path)]) == 0
    for record in records(tmp_path):
        assert record[keys.POLICY] == {"name": f"{record[keys.ARM]}-policy"}


def test_the_letters_of_loops_joining_a_blinded_run_say_nothing_of_which_started_first():
    firsts = set()
    for i in range(20):
        blinding, first = Blinding(f"k{i}", {}).joined("first", "p")
        blinding, second = blinding.joined("second", "q")
        assert blinding.joined("first", "p") == (blinding, first)  # a loop joining again
        third = blinding.joined("third", "r")[1]
        assert {first, second} == {"A", "B"} and third in "CD"
        firsts.add(first)
    assert firsts == {"A", "B"}


def test_a_loop_that_blinds_a_run_otherwise_than_its_first_loop_is_refused(tmp_path):
    for blind, other in ((True, False), (False, True)):
        run_dir = tmp_path / str(blind)
        make = gym.make
        with policybench.wrap(make("CartPole-v1"), "c", "b", arm="x", blind=blind, run_dir=run_dir):
            pass
        with pytest.raises(ValueError, match=f"wrap with blind={blind}, or record into another"):
            policybench.wrap(make("CartPole-v1"), "c", "b", arm="y", blind=other, run_dir=run_dir)
    with pytest.raises(TypeError, match=r"blind=True .* needs this loop's arm"):
        policybench.wrap(gym.make("CartPole-v1"), "c", "b", blind=True, run_dir=tmp_path / "n")


def test_verdicts_given_on_a_blinded_run_still_count_once_it_is_unblinded(tmp_path):
    for arm, policy in zip(BLIND_ARMS, (lambda obs: 0, balance), strict=True):
        env = policybench.wrap(
            succeeding_cartpole(), "cartpole", "balance", arm=arm, blind=True, run_dir=tmp_path
        )
        with env:
            play(env, policy, 2)
    app = ScoringApp(tmp_path, scorer="ana")
    for record in records(tmp_path):  # the scorer calls every rollout a success
        body = {keys.VERDICT_ROLLOUT: record[keys.NODEID], keys.VERDICT: "success"}
        assert app.verdict(Request("POST", "/verdict", {}, json.dumps(body).encode())).status == 200

    def operator_rates() -> dict[str, tuple]:
        rows = json.loads((tmp_path / SUMMARY).read_text())["operator"]["rows"]
        return {row["arm"]: (row["scored"], row["operator_rate"]) for row in rows}

    assert policybench_main(["report", "html", str(tmp_path)]) == 0
    assert operator_rates() == {"A": (2, 1.0), "B": (2, 1.0)}
    assert policybench_main(["report", "unblind", str(tmp_path)]) == 0
    assert operator_rates() == {"pizero": (2, 1.0), "diffusion": (2, 1.0)}
    given = [json.loads(line) for line in (tmp_path / "verdicts.jsonl").read_text().splitlines()]
    ids = {record[keys.NODEID] for record in records(tmp_path)}
    assert {verdict[keys.VERDICT_ROLLOUT] for verdict in given} == ids


def test_a_blinded_loops_error_names_neither_its_arm_nor_its_policy(tmp_path):
    for arm, described in BLIND_ARMS.items():
        env = policybench.wrap(
            gym.make("CartPole-v1"),
            "cartpole",
            "balance",
            policy=described or None,
            arm=arm,
            blind=True,
            run_dir=tmp_path,
        )
        with pytest.raises(RuntimeError), env:
            env.reset(seed=0)
            env.step(0)
            raise RuntimeError(f"{arm} ({described}) lost its server; {arm}s kept")
    reasons = {r[keys.ARM]: r[keys.REASON] for r in records(tmp_path)}
    letters = json.loads((tmp_path / BLINDING_FILE).read_text())["letters"]
    for letter, reason in reasons.items():
        arm = letters[letter]["label"]
        shown = (
            f"{{'name': '<arm {letter}>', 'checkpoint': '<arm {letter}>'}}"
            if arm == "pizero"
            else "{}"
        )
        said = f"<arm {letter}> ({shown}) lost its server; {arm}s kept"  # a longer word is kept
        assert reason == f"the loop raised RuntimeError: {said} (after 1 steps)"


def moved_right(obs: np.ndarray, reward: float, info: dict) -> bool:
    """A success rule for CartPole, whose info says nothing of success: the cart is 2 cm right."""
    return bool(obs[0] > 0.02)


def test_a_success_rule_judges_an_env_that_reports_no_success(tmp_path):
    """CartPole's info has no success key: without a rule its episodes are unsolved with no
    success signal; with `success=` each is solved exactly when a step met the rule (a hand
    count over the same seeds says which), and the rule is named in each record."""
    expected = []
    for seed in range(4):
        env = gym.make("CartPole-v1", max_episode_steps=20)
        obs, _ = env.reset(seed=seed)
        met, done = False, False
        while not done:
            obs, reward, terminated, truncated, info = env.step(seed % 2)
            met = met or moved_right(obs, reward, info)
            done = terminated or truncated
        expected.append(met)
    assert True in expected and False in expected  # the check can tell the two apart

    def play_seed_parity(env) -> None:
        for seed in range(4):
            env.reset(seed=seed)
            done = False
            while not done:
                _, _, terminated, truncated, _ = env.step(seed % 2)
                done = terminated or truncated

    plain = policybench.wrap(
        gym.make("CartPole-v1", max_episode_steps=20), "cartpole", "t", run_dir=tmp_path / "plain"
    )
    play_seed_parity(plain)
    plain.close()
    assert {r[keys.SUCCESS_REPORTED] for r in records(tmp_path / "plain")} == {False}
    judged = policybench.wrap(
        gym.make("CartPole-v1", max_episode_steps=20),
        "cartpole",
        "t",
        run_dir=tmp_path / "judged",
        success=moved_right,
    )
    play_seed_parity(judged)
    judged.close()
    found = records(tmp_path / "judged")
    assert [r[keys.OUTCOME] == "solved" for r in found] == expected
    assert {r[keys.SUCCESS_FROM] for r in found} == {"tests.test_wrap.moved_right"}
    with pytest.raises(TypeError, match="success must be a function"):
        policybench.wrap(gym.make("CartPole-v1"), "cartpole", "t", success="moved")


def test_a_success_rule_judges_each_sub_env_of_a_vector_env(tmp_path):
    vector = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=10)] * 2)
    env = policybench.wrap(vector, "cartpole", "t", run_dir=tmp_path, success=moved_right)
    env.reset(seed=0)
    for _ in range(5):  # too few for a pole to fall: one episode of each sub-env
        env.step(np.array([1, 0]))  # sub-env 0 pushed right, sub-env 1 left
    env.close()
    outcomes = {r[keys.SCENE][keys.SEED]: r[keys.OUTCOME] for r in records(tmp_path)}
    assert outcomes == {0: "solved", 1: "unsolved"}
