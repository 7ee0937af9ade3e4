"""Trajectory specs: the STL robustness against a small reference written from the definitions
(hypothesis, random signals and formulas); the library's margins on real MetaWorld rollouts
equal a hand computation on the recorded trace; an unsafe policy fails its item naming the step
while its outcome stays the env's; a spec naming a signal the Eval has not is refused before
anything runs."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policybench.policy.base import control_period_ns
from policybench.record.rollout_trace import read_trace
from policybench.trajectory import (
    FOREVER,
    Always,
    And,
    Eventually,
    Not,
    Or,
    Signal,
    Until,
    no_progress,
)
from policybench.trajectory.stl import Predicate, margin_of, steps_of

# The browser test's fixtures: `chromium` fails (never skips) under CI=true without a browser.
from tests.test_html_browser import (  # noqa: F401
    CHROMIUM,
    IN_CI,
    NO_CHROMIUM,
    chromium,
    page,
)
from tests.test_report import table_rows

HZ = 10.0
# The rates the harness runs Evals at, each with its period rounded to whole nanoseconds as the
# harness rounds it (1/30 s is 33,333,333 ns): windows in seconds must land on the same steps.
RATES = (10.0, 12.5, 15.0, 20.0, 30.0, 50.0, 60.0, 80.0)


# --- a reference written from the definitions, one step at a time, in exact seconds ---------------


def in_window(window, hz: float, t: int, u: int) -> bool:
    """Whether step u lies in `window` seconds from step t, at exactly 1/hz seconds a step (the
    window's decimal edges and the rate as exact fractions: no rounding of any kind)."""
    low, high = (Fraction(str(edge)) if math.isfinite(edge) else None for edge in window)
    elapsed = Fraction(u - t) / Fraction(str(hz))
    return elapsed >= low and (high is None or elapsed <= high)


def reference(formula, signals, t: int, hz: float = HZ) -> float:
    steps = len(signals["time_s"])

    def at(child, u):
        return reference(child, signals, u, hz)

    if isinstance(formula, Predicate):
        values = np.atleast_1d(formula.signal.values(signals)[t])
        bounds = np.broadcast_to(np.asarray(formula.bound, dtype=float), values.shape)
        margins = bounds - values if formula.op == "<=" else values - bounds
        return float(margins.min())
    if isinstance(formula, Not):
        return -at(formula.formula, t)
    if isinstance(formula, And):
        return min(at(f, t) for f in formula.formulas)
    if isinstance(formula, Or):
        return max(at(f, t) for f in formula.formulas)
    window = [u for u in range(t, steps) if in_window(formula.window, hz, t, u)]
    if isinstance(formula, Always):
        return min((at(formula.formula, u) for u in window), default=math.inf)
    if isinstance(formula, Eventually):
        high = formula.window[1]
        if formula.weak and math.isfinite(high) and in_window((0.0, high), hz, t, steps):
            return math.inf  # the window's end lies past the last step: not judged
        return max((at(formula.formula, u) for u in window), default=-math.inf)
    assert isinstance(formula, Until)
    best = -math.inf
    for u in window:
        held = min((at(formula.holding, v) for v in range(t, u)), default=math.inf)
        best = max(best, min(at(formula.reached, u), held))
    return best


def harness_times(steps: int, hz: float) -> np.ndarray:
    """Each step's start as the harness records it: whole nanoseconds a period."""
    return np.arange(steps) * control_period_ns(hz) / 1e9


windows = st.sampled_from(
    [(0.0, FOREVER), (0.0, 0.3), (0.1, 0.5), (0.2, 0.2), (0.0, 1.0), (0.1, 0.2), (0.05, 0.1)]
)
predicates = st.builds(
    lambda name, op, bound: Predicate(Signal(name), op, bound),
    st.sampled_from(["x", "y"]),
    st.sampled_from(["<=", ">="]),
    st.floats(-2, 2, allow_nan=False),
)


def composite(children):
    return st.one_of(
        children.map(Not),
        st.tuples(children, children).map(lambda pair: And(*pair)),
        st.tuples(children, children).map(lambda pair: Or(*pair)),
        st.tuples(children, windows).map(lambda pair: Always(*pair)),
        st.tuples(children, windows, st.booleans()).map(lambda t: Eventually(t[0], t[1], t[2])),
        st.tuples(children, children, windows).map(lambda t: Until(*t)),
    )


formulas = st.recursive(predicates, composite, max_leaves=5)


def traces(most: int):
    return st.integers(1, most).flatmap(
        lambda steps: st.tuples(
            st.lists(st.floats(-2, 2, allow_nan=False), min_size=steps, max_size=steps),
            st.lists(st.floats(-2, 2, allow_nan=False), min_size=steps, max_size=steps),
        )
    )


def assert_equals_the_reference(formula, trace, hz):
    x, y = trace
    signals = {
        "time_s": harness_times(len(x), hz),
        "period_s": np.full(len(x), control_period_ns(hz) / 1e9),
        "x": np.array(x),
        "y": np.array(y),
    }
    got = formula.robustness(signals)
    want = [reference(formula, signals, t, hz) for t in range(len(x))]
    assert np.allclose(got, want, equal_nan=False), (hz, repr(formula), list(got), want)
    margin = margin_of(formula, signals)
    assert margin.value == pytest.approx(want[0])
    assert 0 <= margin.step < len(x)


@settings(max_examples=300, deadline=None)
@given(formula=formulas, trace=traces(14))
def test_robustness_equals_the_reference_at_every_step(formula, trace):
    assert_equals_the_reference(formula, trace, HZ)


@pytest.mark.parametrize("hz", RATES)
@settings(max_examples=60, deadline=None)
@given(formula=formulas, trace=traces(24))
def test_windows_in_seconds_land_on_the_same_steps_at_every_rate(hz, formula, trace):
    assert_equals_the_reference(formula, trace, hz)


@pytest.mark.parametrize("hz", RATES)
def test_a_violation_at_a_windows_first_instant_is_caught_at_every_rate(hz):
    """`Always(x <= 0.5, (0.1, 0.2))` at the step 0.1 s in (where the window starts: one exists
    at every listed rate), and at the step 0.2 s in, where it ends."""
    steps = int(hz) + 2
    for edge in (0.1, 0.2):
        at = round(edge * hz)
        if not math.isclose(at / hz, edge):
            continue
        x = np.zeros(steps)
        x[at] = 1.0
        signals = {"time_s": harness_times(steps, hz), "x": x}
        margin = margin_of(Always(Signal("x") <= 0.5, (0.1, 0.2)), signals)
        assert margin.value == pytest.approx(-0.5), (hz, edge)
        assert margin.step == at
        x[at] = 0.0
        outside = at - 1 if edge == 0.1 else at + 1  # the step just before or after the window
        x[outside] = 1.0
        assert margin_of(Always(Signal("x") <= 0.5, (0.1, 0.2)), signals).held, (hz, edge)
        x[outside] = 0.0


def test_a_window_to_a_whole_second_at_60_hz_ends_on_step_60():
    signals = {"time_s": harness_times(100, 60.0)}
    assert steps_of((0.0, 1.0), signals) == (0, 60)
    assert steps_of((0.1, 0.2), {"time_s": harness_times(10, 30.0)}) == (3, 6)


def test_a_vector_signal_is_judged_by_its_worst_element_and_its_witness_is_the_worst_step():
    time = harness_times(5, HZ)
    hand = np.array([[0, 0], [0, 0.5], [0, 1.4], [0, 0.9], [0, 0]], dtype=float)
    formula = Always(Signal("hand").within([-1, -1], [1, 1]))
    margin = margin_of(formula, {"time_s": time, "hand": hand})
    assert margin.value == pytest.approx(-0.4)
    assert (margin.step, margin.time_s, margin.values) == (2, 0.2, {"hand": [0.0, 1.4]})


def test_no_progress_is_judged_only_where_the_window_fits():
    time = harness_times(10, HZ)
    reward = np.array([0, 1, 2, 2, 2, 2, 2, 3, 3, 3], dtype=float)
    margin = no_progress("reward", 0.3, 0.5).margin({"time_s": time, "reward": reward})
    # From step 2 the reward stays 2 through step 6: a rise of 0 in 0.3 s, 0.5 short; the steps
    # after 6 are too near the end to judge (their windows would reach past it).
    assert (margin.value, margin.step) == (pytest.approx(-0.5), 2)
    rises = no_progress("reward", 0.3, 0.5).formula.formula.robustness(
        {"time_s": time, "reward": reward}
    )
    assert list(rises[7:]) == [math.inf] * 3


# --- real runs ------------------------------------------------------------------------------------

MT = """
import dataclasses

import policybench
from policybench.spec import seeded_per_task
from policybench.suites.metaworld import MT10, mt10

TASKS = {"reach-v3": MT10["reach-v3"]}
MT = dataclasses.replace(mt10(tasks=TASKS), plan=seeded_per_task(TASKS, timeout_s=1.5))


@policybench.parametrize(MT)
def test_mt(rollout, harness):
    harness(rollout)
"""
SPECS = """
from policybench.trajectory import action_rate_limit, workspace

LOW, HIGH = [-0.5, 0.3, 0.0], [0.5, 1.0, 0.3]


def pytest_policybench_specs(config, eval):
    return [workspace("hand", LOW, HIGH), action_rate_limit(60.0)]
"""
UNSAFE = """
import numpy as np

from policybench.policy.base import Chunk


class Upward:
    name = "upward"

    def open(self, context):
        return lambda obs: Chunk(np.array([[0.0, 0.0, 1.0, -1.0]], np.float32), context.control_hz)

    def describe(self):
        return {"name": self.name}


UPWARD = Upward()
"""


@pytest.fixture
def mt(pytester: pytest.Pytester) -> pytest.Pytester:
    pytest.importorskip("metaworld")
    pytester.makepyfile(test_mt=MT, conftest=SPECS, unsafe=UNSAFE)
    pytester.syspathinsert()
    return pytester


def records(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_library_margins_equal_a_hand_computation_on_the_recorded_trace(mt):
    result = mt.runpytest_subprocess("--rollouts", "2")
    assert result.ret == 0
    run = mt.path / "reports" / "latest"
    for record in records(mt):
        trace = read_trace(run / record["rollout_trace"])["arrays"]
        hand = trace["state/state"][0:3].T.astype(np.float64)  # float16 in the trace file
        low, high = np.array([-0.5, 0.3, 0.0]), np.array([0.5, 1.0, 0.3])
        inside = np.minimum(hand - low, high - hand).min(axis=1)
        action = trace["action"].T.astype(np.float64)
        rate = np.abs(np.diff(action, axis=0, prepend=action[:1])) * 80.0  # MetaWorld's 80 Hz
        specs = record["specs"]
        workspace = specs["hand in workspace [-0.5, 0.3, 0]-[0.5, 1, 0.3]"]
        assert workspace["margin"] == pytest.approx(inside.min(), abs=5e-4)
        assert workspace["step"] == int(np.argmin(inside))
        limit = specs["action rate <= 60/s"]
        assert limit["margin"] == pytest.approx(60.0 - rate.max(), abs=1e-5)
        assert limit["step"] == int(np.argmax(rate.max(axis=1)))
        assert record["trajectory_specs"][0].startswith("hand in workspace")


def test_an_unsafe_policy_fails_the_spec_with_the_step_named(mt):
    result = mt.runpytest_subprocess("--rollouts", "1", "--policy", "unsafe:UPWARD")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "trajectory spec 'hand in workspace [[]-0.5, 0.3, 0[]]-[[]0.5, 1, 0.3[]]' violated "
            "at step * (t=* s): margin -*; hand=[[]*[]] (first at step *, t=* s)",
            "*1 failed*",
        ]
    )
    [record] = records(mt)
    assert record["outcome"] == "unsolved"  # the env's outcome stands beside the failed spec
    margin = record["specs"]["hand in workspace [-0.5, 0.3, 0]-[0.5, 1, 0.3]"]
    assert margin["margin"] < 0 and margin["values"]["hand"][2] > 0.3
    assert f"at step {margin['step']} " in result.stdout.str()


def test_a_spec_naming_a_signal_the_eval_has_not_is_refused_before_anything_runs(mt):
    mt.makeconftest(
        "from policybench.trajectory import workspace\n"
        "def pytest_policybench_specs(config, eval):\n"
        "    return [workspace('elbow', [0], [1])]\n"
    )
    result = mt.runpytest_subprocess("--rollouts", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in result.stderr.lines if line.strip()]
    assert line == (
        "ERROR: metaworld-mt10: trajectory spec 'elbow in workspace [0]-[1]' names signal "
        "elbow, which its rollouts do not have; they have action, action_rate, goal, "
        "gripper_opening, hand, object, period_s, reward, success, time_s, and obs.NAME for an "
        "observation entry NAME"
    )
    assert not (Path(mt.path) / "reports").exists()


@pytest.mark.skipif(CHROMIUM is None and not IN_CI, reason=NO_CHROMIUM)
def test_the_rollout_page_marks_the_violation_on_every_plot(mt, page):  # noqa: F811
    """In a real browser (headless Chromium): the unsafe rollout's page draws, on each of its
    plots, a mark where the workspace spec first failed and one where it was worst."""
    mt.runpytest_subprocess("--rollouts", "1", "--policy", "unsafe:UPWARD")
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto((mt.path / "reports" / "latest" / "rollouts" / "00000.html").resolve().as_uri())
    page.wait_for_selector("#rollout-plots[data-ready=true]", timeout=10_000)
    plots = page.locator("figure.plot svg").count()
    assert plots >= 5  # four action dimensions, the reward, the state
    marks = page.locator("svg line.violation")
    assert marks.count() == 2 * plots
    name = "hand in workspace [-0.5, 0.3, 0]-[0.5, 1, 0.3]"
    margin = records(mt)[0]["specs"][name]["margin"]
    titles = {marks.nth(i).text_content() for i in range(2)}
    assert titles == {f"{name}: first violated", f"{name}: margin {margin}"}
    assert errors == []


GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "trajectory-specs.md"


def test_the_guides_formula_reads_as_it_says():
    """The guide's Until example, run as written, on a drawer opened before and after the cup."""
    blocks = re.findall(r"```python\n(.*?)\n```", GUIDE.read_text(), re.S)
    found: dict = {}
    exec(blocks[1], found)
    spec = found["spec"]
    time = harness_times(30, HZ)
    drawer = np.clip(time - 0.5, 0, 1)  # open (>= 0.9) from t = 1.4 s
    assert spec.margin(
        {"time_s": time, "drawer_opening": drawer, "cup_height": (time > 2.0) * 0.3}
    ).held
    early = {"time_s": time, "drawer_opening": drawer, "cup_height": (time > 1.0) * 0.3}
    assert not spec.margin(early).held
    hook = {}
    exec(blocks[0], hook)
    assert [
        s.name
        for s in hook["pytest_policybench_specs"](None, type("E", (), {"name": "metaworld-mt10"}))
    ] == [
        "hand in workspace [-0.5, 0.3, 0]-[0.5, 1, 0.5]",
        "action rate <= 1000/s",
    ]


def test_specs_on_observations_are_refused_under_envs_per_worker_and_action_specs_run(mt):
    refused = mt.runpytest_subprocess("--rollouts", "2", "--envs-per-worker", "2")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in refused.stderr.lines if line.strip()]
    assert line.startswith(
        "ERROR: metaworld-mt10: trajectory spec 'hand in workspace [-0.5, 0.3, 0]-[0.5, 1, "
        "0.3]' reads observations, which --envs-per-worker 2 does not record"
    )
    mt.makeconftest(
        "from policybench.trajectory import action_rate_limit\n"
        "def pytest_policybench_specs(config, eval):\n"
        "    return [action_rate_limit(60.0)]\n"
    )
    side_by_side = mt.runpytest_subprocess("--rollouts", "2", "--envs-per-worker", "2")
    assert side_by_side.ret == 0
    assert all(r["specs"]["action rate <= 60/s"]["margin"] > 0 for r in records(mt))


def test_a_margin_of_minus_infinity_counts_as_violated_everywhere():
    """An `eventually` over a window no step lies in can never hold: -inf, kept as no number
    with held false; the spec table and the rollout page count it violated, where +inf (nothing
    to judge) counts as held."""
    from policybench.report.specs import spec_rows, violations
    from policybench.trajectory.library import spec_values

    signals = {"time_s": harness_times(3, HZ), "x": np.zeros(3)}
    never = margin_of(Eventually(Signal("x") <= 1.0, (5.0, 6.0)), signals)
    nothing = margin_of(Always(Signal("x") <= -1.0, (5.0, 6.0)), signals)
    assert never.value == -math.inf and nothing.value == math.inf
    records = [
        {"eval": "e", "specs": {"never": spec_values(never), "nothing": spec_values(nothing)}}
    ]
    rows = {row.spec: row for row in spec_rows(records)}
    assert (rows["never"].violated, rows["never"].judged) == (1, 1)
    assert (rows["nothing"].violated, rows["nothing"].judged) == (0, 1)
    assert [found["spec"] for found in violations(records[0])] == ["never"]


def test_a_specs_module_given_with_p_is_found_where_the_commands_run():
    """The README's `pytest -p my_specs benchmarks/test_metaworld.py ...`, run from the
    repository's root where my_specs.py is saved, as `--policy=my_policy:MODEL` finds its
    module (it once needed PYTHONPATH=.)."""
    import os
    import subprocess
    import sys
    import uuid

    pytest.importorskip("metaworld")
    repo = Path(__file__).resolve().parents[1]
    name = f"my_specs_{uuid.uuid4().hex[:8]}"
    module = repo / f"{name}.py"
    module.write_text(
        "from policybench.trajectory import workspace\n\n\n"
        "def pytest_policybench_specs(config, eval):\n"
        "    return [workspace('hand', [-0.5, 0.3, 0.0], [0.5, 1.0, 0.3])]\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", name, "benchmarks/test_metaworld.py",
             "-k", "reach-v3", "--rollouts", "1", "-p", "no:cacheprovider",
             "--report-dir", str(repo / ".pytest-specs-reports")],
            cwd=repo, env={**env, "MUJOCO_GL": "disable"}, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
    finally:
        module.unlink()
        import shutil

        shutil.rmtree(repo / ".pytest-specs-reports", ignore_errors=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "hand in workspace" in done.stdout


def test_the_report_leads_with_the_answer_and_lists_which_rollouts_broke_which_spec(mt):
    """The index opens with the overview (after any verdict), then tasks and specs, and only
    then how rollouts failed; the rollout list has a column and a filter of the specs broken."""
    result = mt.runpytest_subprocess(
        "--rollouts", "2", "--policy", "unsafe:UPWARD", "--junitxml=junit.xml"
    )
    assert result.ret == 1  # the violations fail their items
    junit = (Path(mt.path) / "junit.xml").read_text()  # each spec's margin, a property per case
    assert junit.count('<property name="policybench.margin.hand in workspace') >= 2
    html = (Path(mt.path) / "reports" / "latest" / "index.html").read_text()
    order = [html.index(f'id="{name}"') for name in ("overview", "tasks", "specs", "failures")]
    assert order == sorted(order)
    broke = [row["broken"] for row in table_rows(html)]
    assert sum(1 for names in broke if names and names[0].startswith("hand in workspace")) == 2
    assert '<select data-filter="broken">' in html and "<option>none</option>" not in html
