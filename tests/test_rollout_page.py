"""A rollout's report page in a real browser (headless Chromium through Playwright): from a real
run's trace it draws one plot per action dimension with the action space's bounds, reward and
success, every model call on a timeline, and a cursor that follows the video and seeks it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from policybench.record.rollout_trace import read_trace

# The browser test's fixtures: `chromium` fails (never skips) under CI=true without a browser.
from tests.test_html_browser import (  # noqa: F401
    CHROMIUM,
    ENVS,
    IN_CI,
    NO_CHROMIUM,
    chromium,
    page,
    pixels,
)

pytestmark = pytest.mark.skipif(CHROMIUM is None and not IN_CI, reason=NO_CHROMIUM)

# A filmed point on a plane: two action dimensions of different bounds (the second is shown,
# not used), chunks of 5 waypoints under a delay of 2 control steps, a new call every 3.
BENCHMARK = """
import gymnasium as gym
import numpy as np
import policybench
from envs import GreedyPointModel, PointEnv, point_eval
from policybench import keys
from policybench.policy.base import Chunk


class FilmedPlaneEnv(PointEnv):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(np.array([-1.0, -2.0]), np.array([1.0, 2.0]))

    def _obs(self):
        image = np.full((48, 64, 3), 255, np.uint8)
        x = int(np.clip(self._pos * 12, 0, 56))
        image[20:28, x : x + 8] = (220, 20, 20)
        return {keys.STATE: super()._obs(), keys.IMAGE: image}


class ChunkedGreedy(GreedyPointModel):
    def open(self, context):
        def predict(obs):
            pos, goal = obs[keys.STATE]
            step = np.clip(goal - pos, -0.3, 0.3)
            waypoints = np.stack([np.full(5, step), np.linspace(-1.5, 1.5, 5)], axis=1)
            return Chunk(waypoints, context.control_hz)

        return predict


PLANE = point_eval("plane", tasks={"reach": "reach"}, timeout_s=3.0, scripted=ChunkedGreedy)
PLANE = type(PLANE)(**{**PLANE.__dict__, "make_env": lambda task: FilmedPlaneEnv(),
                       "hold": lambda last, obs: np.zeros(2)})


@policybench.parametrize(PLANE)
def test_plane(rollout, harness):
    harness(rollout)
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run with a video and latency (a subprocess), shared by this module's tests."""
    project = tmp_path_factory.mktemp("project")
    (project / "envs.py").write_text(ENVS)
    (project / "test_plane.py").write_text(BENCHMARK)
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rollouts", "1",
        "--record-video", "--inference-latency", "steps:2", "--execute-steps", "3",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return (project / "reports" / "latest").resolve()


@pytest.fixture
def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.jsonl").read_text().splitlines()[0])


@pytest.fixture
def opened(run_dir, page):  # noqa: F811
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto((run_dir / "rollouts" / "00000.html").as_uri())
    page.wait_for_selector("#rollout-plots[data-ready=true]", timeout=10_000)
    yield page
    assert errors == []


def test_rollout_page_draws_one_plot_per_action_dimension_with_its_bounds(opened, record):
    plots = opened.locator("svg.action-plot")
    assert plots.count() == 2
    for dim, (low, high) in enumerate([(-1.0, 1.0), (-2.0, 2.0)]):
        plot = opened.locator(f"svg.action-plot[data-dim='{dim}']")
        bounds = plot.locator("line.bound title").all_text_contents()
        assert bounds == [f"action space low {low:g}", f"action space high {high:g}"]
        # The bounds sit where the plot's scale puts them: low below high, both inside the box.
        low_y, high_y = (
            float(plot.locator(f"line.bound.{s}").get_attribute("y1")) for s in ("low", "high")
        )
        assert 0 < high_y < low_y < 120
        points = plot.locator("polyline.series").get_attribute("points").split()
        assert len(points) == record["steps"]
    assert opened.locator("svg.reward-plot polyline.series").count() == 1


def test_rollout_page_shows_every_model_call_on_the_timeline(opened, record):
    calls = opened.locator("#call-timeline g.call")
    assert calls.count() == record["model_calls"] > 2
    first = calls.nth(1).locator("title").text_content()
    assert "latency charged 200.0 ms" in first  # 2 steps at 10 Hz
    assert "5 waypoint(s)" in first and "played steps" in first
    played = opened.locator("#call-timeline rect.played").count()
    held = opened.locator("#call-timeline rect.held").count()
    assert played + held == record["steps"] and held >= 2  # the first chunk is 2 steps late


def test_moving_the_video_moves_the_cursor_and_a_click_seeks_the_video(opened, record, run_dir):
    opened.wait_for_function(
        "document.getElementById('rollout-video').readyState >= 2", timeout=10_000
    )
    cursor = opened.locator("svg.action-plot[data-dim='0'] line.cursor")
    start = float(cursor.get_attribute("x1"))
    opened.evaluate("document.getElementById('rollout-video').currentTime = 0.5")
    opened.wait_for_function(
        "document.querySelector('svg.action-plot line.cursor').dataset.time === '0.500'",
        timeout=5_000,
    )
    assert float(cursor.get_attribute("x1")) > start
    readout = opened.text_content("#cursor-readout")
    assert readout.startswith("step 5 (0.50 s)")
    # The small state vectors' values at the cursor's step, as the trace holds them.
    trace = read_trace(run_dir / record["rollout_trace"])
    shown = re.search(r"; state \[([^\]]*)\]", readout).group(1).split(", ")
    expected = trace["arrays"]["state/state"][:, 5].astype(float)
    np.testing.assert_allclose([float(v) for v in shown], expected, rtol=1e-3)
    # Every plot's cursor moved with it.
    times = opened.locator("line.cursor").evaluate_all("ls => ls.map(l => l.dataset.time)")
    assert set(times) == {"0.500"} and len(times) >= 4
    # A click near the plot's right end seeks the video there.
    box = opened.locator("svg.reward-plot").bounding_box()
    opened.mouse.click(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2)
    seeked = opened.evaluate("document.getElementById('rollout-video').currentTime")
    assert seeked > 0.5 and seeked <= record["sim_s"] + 1e-6


def test_rollout_page_screenshot_shows_the_plots_drawn(opened):
    shot = pixels(opened.locator("#action-plots").screenshot()).astype(int)
    blue = abs(shot - [0x3B, 0x6E, 0xA8]).sum(axis=-1) < 40
    red = (shot[..., 0] - shot[..., 1] > 60) & (shot[..., 0] - shot[..., 2] > 60)
    assert blue.sum() > 100 and red.sum() > 100  # the actions and their dashed bounds
