"""Attended rollouts end to end: a run of an attended Eval (a person stages each scene, then
judges each rollout) with its operator on the web page, driven in real Chromium by Playwright,
and with its operator on the terminal, a real tmux pane with keys sent to it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from policybench import keys
from policybench.run.verdicts import read_verdicts

CHROMIUM = next(
    (
        found
        for name in ("chromium", "chromium-browser", "google-chrome")
        if (found := shutil.which(name))
    ),
    None,
)
TMUX = shutil.which("tmux")
# CI installs Chromium and tmux (.ci/setup), so there (CI=true) a missing one fails these tests.
IN_CI = os.environ.get("CI", "").lower() == "true"

ENVS = (Path(__file__).parent / "envs.py").read_text()

# PointEnv's goal is drawn from its seed; the cup's side is a staged field the env ignores.
BENCHMARK = """
import dataclasses
import policybench
from envs import GreedyPointModel, point_eval
from policybench.spec import Attended, Scene, numbered


def plan(eval_name, rollouts_per_task, base_seed):
    sides = ("left", "right")
    return numbered(eval_name, 2.0, [
        ("reach the goal", Scene("reach", base_seed + i, {"cup": sides[i % 2]}))
        for i in range(rollouts_per_task)
    ])


ATTENDED = dataclasses.replace(
    point_eval("attended", scripted=GreedyPointModel),
    plan=plan,
    attended=Attended(staged=("cup", "seed"), judged=True),
)


@policybench.parametrize(ATTENDED)
def test_point(rollout, harness):
    harness(rollout)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "envs.py").write_text(ENVS)
    (tmp_path / "test_point.py").write_text(BENCHMARK)
    return tmp_path


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rollouts", "2", *args]


def records(project: Path) -> list[dict]:
    results = project / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_attended_eval_without_an_operator_is_refused_at_collection(project, workers):
    """Under xdist too, where the workers collect: the controller shows their error."""
    done = subprocess.run(
        pytest_command("-n", workers), cwd=project, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert "the Eval 'attended' of test_point.py::test_point is attended" in done.stdout, (
        done.stdout
    )
    assert "give --operator tty" in done.stdout and "Traceback" not in done.stdout
    assert not (project / "reports" / "latest").exists()  # nothing ran


def test_bad_operator_option_is_a_usage_error(project):
    done = subprocess.run(
        pytest_command("--operator", "web:http"), cwd=project, capture_output=True, text=True
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--operator takes tty, web or web:PORT" in done.stderr


# --- the web page, in real Chromium ---------------------------------------------------------


@pytest.fixture
def page() -> Iterator[object]:
    if CHROMIUM is None:
        if IN_CI:
            pytest.fail("no Chromium installed; under CI=true this test may not skip")
        pytest.skip("no Chromium installed: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser.new_page()
        browser.close()


def test_web_operator_stages_and_judges_every_rollout_of_an_attended_run(project, page):
    """Under xdist (-n 2): workers ask the controller's page; the records keep the automatic
    outcome and hold the operator's staged fields and verdict beside it."""
    run = subprocess.Popen(
        pytest_command("-n", "2", "--operator", "web:0", "--operator-name", "ann"),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = None
        for line in run.stdout:
            found = re.search(r"asked on the page (http://127\.0\.0\.1:\d+/)", line)
            if found:
                url = found.group(1)
                break
        assert url, "the run did not name its operator page"
        page.goto(url)
        staged, judged = {}, {}
        # Two workers ask at once: the page shows the oldest request, a staging or a verdict.
        for _ in range(4):
            page.locator("#stage:visible, #judge:visible").wait_for(timeout=60_000)
            rollout = page.text_content("#rollout")
            if page.locator("#staged").is_visible():
                cells = page.locator("#fields tbody td").all_text_contents()
                staged[rollout] = dict(zip(cells[::2], cells[1::2], strict=True))
                page.click("#staged")
            else:
                assert rollout in staged  # judged only once staged
                verdict = "success" if staged[rollout]["cup"] == "left" else "failure"
                page.click(f".verdicts button[data-verdict={verdict}]")
                page.fill("#note", f"cup on the {staged[rollout]['cup']}")
                judged[rollout] = verdict
                page.click("#submit")
            page.locator("#message", has_text=f"answered {rollout}").wait_for(timeout=10_000)
        output, _ = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 0, output
    assert page.locator("#idle").is_visible()
    by_id = {record[keys.NODEID]: record for record in records(project)}
    assert sorted(by_id) == sorted(staged) and len(by_id) == 2
    for nodeid, record in by_id.items():
        assert record[keys.OUTCOME] == "solved"  # the automatic outcome stands
        scene = record[keys.SCENE]
        assert record[keys.STAGED] == {"cup": scene["cup"], "seed": scene[keys.SEED]}
        assert staged[nodeid] == {"cup": scene["cup"], "seed": str(scene[keys.SEED])}
        verdict = record[keys.OPERATOR_VERDICT]
        assert verdict[keys.VERDICT] == judged[nodeid]
        assert verdict[keys.VERDICT_NOTE] == f"cup on the {scene['cup']}"
        assert verdict[keys.SCORER] == "ann" and verdict[keys.VERDICT_ROLLOUT] == nodeid
        assert record[keys.OPERATOR_WAIT_S] > 0
        assert record[keys.SIM_S] <= 2.0  # no simulated time charged for the wait
    # ... and the verdicts are in verdicts.jsonl, as the report and its gates count them.
    given = read_verdicts(project / "reports" / "latest")
    assert given.problems == ()
    assert {v.rollout: (v.verdict, v.scorer) for v in given.given} == {
        nodeid: (verdict, "ann") for nodeid, verdict in judged.items()
    }


# --- the terminal, in a tmux pane -------------------------------------------------------------


class Pane:
    """A tmux pane on a server of its own, running one command."""

    def __init__(self, cwd: Path, command: list[str]) -> None:
        self.socket = f"policybench-attended-{os.getpid()}"
        self.done = cwd / "exit-status"
        line = f"{subprocess.list2cmdline(command)}; echo $? > {self.done}"
        # A shell started by a background job may inherit an ignored SIGINT: restore it.
        self._tmux("new-session", "-d", "-x", "200", "-y", "50", "-c", str(cwd),
                   f"trap - INT; {line}; sleep 600")  # fmt: skip

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True
        ).stdout

    def text(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-S", "-")

    def wait_for(self, text: str, count: int = 1, timeout_s: float = 90.0) -> None:
        end = time.monotonic() + timeout_s
        while self.text().count(text) < count:
            if time.monotonic() > end or self.done.exists():
                raise AssertionError(f"no {count}x {text!r} in the pane:\n{self.text()}")
            time.sleep(0.1)

    def wait_for_any(self, texts: tuple[str, ...], count: int, timeout_s: float = 90.0) -> None:
        """Until the pane shows `count` of `texts`, all told."""
        end = time.monotonic() + timeout_s
        while sum(map(self.text().count, texts)) < count:
            if time.monotonic() > end or self.done.exists():
                raise AssertionError(f"no {count} prompts in the pane:\n{self.text()}")
            time.sleep(0.1)

    def send(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    def exit_status(self, timeout_s: float = 90.0) -> int:
        end = time.monotonic() + timeout_s
        while not self.done.exists() or not self.done.read_text().strip():
            if time.monotonic() > end:
                raise AssertionError(f"the run did not end:\n{self.text()}")
            time.sleep(0.1)
        return int(self.done.read_text())

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def tmux() -> None:
    if TMUX is None:
        if IN_CI:
            pytest.fail("no tmux installed; under CI=true this test may not skip")
        pytest.skip("no tmux installed: apt-get install -y tmux")


STAGE = "press Enter once the scene is staged"
VERDICT = "verdict: (s)uccess, (f)ailure, (u)nsure?"
NOTE = "note (Enter for none)"
AGAIN = "answer s, f or u"


def test_terminal_operator_in_tmux_stages_and_judges_and_the_watchdog_waits(project, tmux):
    """Under xdist (-n 2), with a 1-second watchdog: the operator takes longer than that to
    stage the first scene, which is not a hang. Both workers ask at once: the terminal asks
    one thing at a time, in the order asked."""
    pane = Pane(
        project,
        pytest_command("-n", "2", "--operator", "tty", "--rollout-wall-timeout", "1"),
    )
    prompts = (STAGE, VERDICT, NOTE)
    try:
        answered = 0
        while answered < 7:  # two stagings, two verdicts (one asked twice), two notes
            pane.wait_for_any(prompts, answered + 1)
            text = pane.text()
            asked = max(prompts, key=text.rfind)
            cup = re.findall(r"\[operator\] attended \S+cup=(\w+)\]", text)[-1]
            if asked == STAGE:
                if answered == 0:
                    time.sleep(1.5)  # longer than the watchdog's limit
                pane.send("Enter")
            elif asked == VERDICT and text.count(AGAIN) == 0:
                pane.send("x", "Enter")  # not an answer: asked again
            elif asked == VERDICT:
                pane.send("u" if cup == "left" else "s", "Enter")
            else:
                pane.send(f"cup {cup}", "Enter")
            answered += 1
        status = pane.exit_status()
        assert status == 0, pane.text()
        text = pane.text()
    finally:
        pane.close()
    assert "stage cup = left" in text and "stage cup = right" in text
    got = sorted(
        (r[keys.SCENE]["cup"], r[keys.OPERATOR_VERDICT][keys.VERDICT],
         r[keys.OPERATOR_VERDICT][keys.VERDICT_NOTE])
        for r in records(project)
    )  # fmt: skip
    assert got == [("left", "unsure", "cup left"), ("right", "success", "cup right")]
    assert all(r[keys.OUTCOME] == "solved" for r in records(project))
    assert not (project / "reports" / "latest" / "hangs").exists()


def test_ctrl_c_while_the_operator_stages_keeps_the_finished_rollouts(project, tmux):
    pane = Pane(project, pytest_command("-n", "0", "--operator", "tty"))
    try:
        pane.wait_for(STAGE, 1)
        pane.send("Enter")
        pane.wait_for(VERDICT, 1)
        pane.send("s", "Enter")
        pane.wait_for(NOTE, 1)
        pane.send("Enter")
        pane.wait_for(STAGE, 2)
        pane.send("C-c")
        status = pane.exit_status()
        text = pane.text()
    finally:
        pane.close()
    assert status == pytest.ExitCode.INTERRUPTED, text
    kept = records(project)
    assert len(kept) == 1, text
    assert kept[0][keys.OPERATOR_VERDICT][keys.VERDICT] == "success"
    assert kept[0][keys.SCENE]["cup"] == "left"


def test_the_page_says_which_request_it_answered_when_the_next_came_in_meanwhile(tmp_path, page):
    """Two rollouts wait; the answer to the first is slow to come back (held by the browser's
    route), and meanwhile the page's poll shows the second. The page says it answered the first
    and keeps the second on screen (it said 'answered' the second and hid it, unanswered)."""
    import time

    from policybench.operator.base import Ask, Request
    from policybench.operator.desk import Desk, DeskServer

    desk = Desk("ann", lambda verdict: None)
    server = DeskServer(desk, 0, tmp_path)
    first, second = (
        Request(Ask.STAGE, "point", f"test_point.py::test_point[reach/seed={seed}]", "reach", {})
        for seed in (0, 1)
    )
    try:
        desk.post(first)
        desk.post(second)

        def answered_slowly(route) -> None:
            response = route.fetch()  # the desk has the answer: the second is now the oldest
            time.sleep(1.5)  # several polls (every 0.3 s) come back meanwhile
            route.fulfill(response=response)

        page.route("**/api/answer*", answered_slowly)
        page.goto(server.url)
        page.locator("#stage:visible").wait_for(timeout=10_000)
        assert page.text_content("#rollout") == first.rollout
        page.click("#staged")
        page.locator("#message", has_text="answered").wait_for(timeout=10_000)
        assert page.text_content("#message") == f"answered {first.rollout}"
        assert page.locator("#stage").is_visible() and not page.locator("#idle").is_visible()
        assert page.text_content("#rollout") == second.rollout
    finally:
        server.close()
