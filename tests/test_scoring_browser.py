"""Scoring from recordings in a real browser (headless Chromium through Playwright): a blinded
A/B run of real MetaWorld and PushT rollouts (PushT filmed) is scored on `policybench score`'s
page by two scorers; verdicts.jsonl holds their verdicts, the report's operator columns and
kappa match a hand computation, and nothing the page loads or sends names a policy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from policybench import cli
from policybench.pages.server import PageServer
from policybench.run.records import rollout_id
from policybench.run.verdicts import VERDICTS
from policybench.scoring.app import ScoringApp
from tests.test_html_browser import CHROMIUM, NO_CHROMIUM, pytestmark  # noqa: F401

# Two MetaWorld tasks (state only: fast, the scripted expert solves them within the second)
# and PushT (filmed at 96x96), cut short; each scene under the scripted and the random policy.
BENCHMARK = """
import dataclasses

import policybench
from policybench.spec import seeded_per_task
from policybench.suites.metaworld import MT10, mt10
from policybench.suites.pusht import INSTRUCTION, TASK, PushTHeuristic, pusht

TASKS = {name: MT10[name] for name in ("reach-v3", "push-v3")}
METAWORLD = dataclasses.replace(mt10(tasks=TASKS), plan=seeded_per_task(TASKS, timeout_s=1.0))
PUSHT = dataclasses.replace(
    pusht(scripted=PushTHeuristic), plan=seeded_per_task({TASK: INSTRUCTION}, timeout_s=2.0)
)


@policybench.parametrize(METAWORLD, PUSHT)
def test_filmed(rollout, harness):
    harness(rollout)
"""
# What names the policies: the registry's names and their classes.
NAMES = ("scripted", "random", "PushTHeuristic", "MetaWorldExpert", "RandomPolicy")


@pytest.fixture(scope="module", autouse=True)
def chromium() -> str:
    if CHROMIUM is None:
        pytest.fail(f"{NO_CHROMIUM}; under CI=true the browser test may not skip", pytrace=False)
    return CHROMIUM


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real blinded run with `--record-video` (a subprocess), shared by this module."""
    pytest.importorskip("metaworld")
    pytest.importorskip("gym_pusht")
    project = tmp_path_factory.mktemp("project")
    (project / "test_filmed.py").write_text(BENCHMARK)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q"),
            *("--rollouts", "1", "--policy", "scripted", "--policy", "random", "--blind"),
            *("--record-video", "test_filmed.py"),
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return (project / "reports" / "latest").resolve()


@pytest.fixture
def run_dir(recorded: Path, tmp_path: Path) -> Path:
    """A copy of the recorded run for one test (its verdicts are the test's own)."""
    return Path(shutil.copytree(recorded, tmp_path / recorded.name))


@pytest.fixture
def served(run_dir: Path) -> Iterator[PageServer]:
    with ScoringApp(run_dir).server("127.0.0.1", 0) as server:
        yield server


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


def records(run_dir: Path) -> dict[str, dict[str, Any]]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    return {rollout_id(r): r for r in map(json.loads, lines)}


def score_all(
    browser: Any, url: str, scorer: str, choose: Callable[[str], tuple[str, str]]
) -> list[str]:
    """Scores every rollout on the page as `scorer`; `choose(rollout) -> (verdict, note)`.
    Returns the rollouts in the order the page showed them."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{url}?scorer={scorer}")
    total = page.locator("#rollout-list tbody tr").count()
    shown = []
    for done in range(1, total + 1):
        rollout = page.get_attribute("#rollout", "data-rollout")
        assert rollout is not None
        shown.append(rollout)
        verdict, note = choose(rollout)
        page.fill("#note", note)
        page.click(f"button[data-verdict={verdict}]")
        expect(page.locator(f"#rollout-list[data-recorded='{done}']")).to_have_count(1)
    page.close()
    return shown


def test_a_scorer_scores_each_rollout_on_the_page_and_verdicts_jsonl_holds_them(
    run_dir, served, browser
):
    from playwright.sync_api import expect

    runs = records(run_dir)
    filmed = next(rid for rid, r in runs.items() if r.get("video"))
    page = browser.new_page()
    page.goto(served.url)
    page.fill("#scorer-name", "ana")
    page.click("#who button")
    expect(page.locator("#scorer")).to_have_text("ana")
    while page.get_attribute("#rollout", "data-rollout") != filmed:
        page.click("#next")
    assert page.text_content("#instruction") == runs[filmed]["instruction"]
    assert "seed" in page.text_content("#scene")
    page.wait_for_function("document.getElementById('video').readyState >= 2", timeout=20_000)
    assert page.evaluate("document.getElementById('video').videoWidth") == 96
    page.close()

    given = {
        rid: ("success" if r["outcome"] == "solved" else "failure", "") for rid, r in runs.items()
    }
    given[filmed] = ("unsure", "the T barely moved")
    order = score_all(browser, served.url, "ana", lambda rid: given[rid])
    assert sorted(order) == sorted(runs)
    again = score_all(browser, served.url, "ana", lambda rid: given[rid])
    assert again == order  # the same scorer sees the same order
    assert score_all(browser, served.url, "ben", lambda rid: given[rid]) != order

    lines = [json.loads(line) for line in (run_dir / VERDICTS).read_text().splitlines()]
    assert len(lines) == 3 * len(runs)  # every verdict kept, the rescoring too
    for line in lines[: len(runs)]:
        assert line["scorer"] == "ana"
        assert (line["operator_verdict"], line["note"]) == given[line["rollout_id"]]
        assert line["scored_at"].endswith("+00:00")


def hand_kappa(pairs: list[tuple[str, str]], categories: tuple[str, ...]) -> float | None:
    """Cohen's kappa from its definition: (observed - chance agreement) / (1 - chance)."""
    n = len(pairs)
    if not n:
        return None
    observed = sum(a == b for a, b in pairs) / n
    chance = sum(
        (sum(a == c for a, _ in pairs) / n) * (sum(b == c for _, b in pairs) / n)
        for c in categories
    )
    return None if chance == 1 else (observed - chance) / (1 - chance)


def test_report_operator_columns_and_kappa_match_a_hand_computation(run_dir, served, browser):
    runs = records(run_dir)
    automatic = {
        rid: "success" if r["outcome"] == "solved" else "failure" for rid, r in runs.items()
    }
    ordered = sorted(runs)
    solved = [rid for rid in ordered if automatic[rid] == "success"]
    unsolved = [rid for rid in ordered if automatic[rid] == "failure"]
    assert solved and len(unsolved) >= 2, automatic  # the scripted experts solve MetaWorld
    # ana agrees with the automatic outcome but for one solved rollout and one unsure; ben
    # agrees but for one unsolved rollout.
    ana = {**automatic, solved[0]: "failure", unsolved[0]: "unsure"}
    ben = {**automatic, unsolved[1]: "success"}
    score_all(browser, served.url, "ana", lambda rid: (ana[rid], ""))
    score_all(
        browser, served.url, "ben", lambda rid: (ben[rid], "looked done" * (rid == unsolved[1]))
    )

    assert cli.main(["report", "html", str(run_dir)]) == 0
    operator = json.loads((run_dir / "summary.json").read_text())["operator"]
    assert operator["scorers"] == ["ana", "ben"]

    def agreed(rid: str) -> str | None:
        decisive = {ana[rid], ben[rid]} - {"unsure"}
        return decisive.pop() if len(decisive) == 1 else None

    for arm in sorted({r["arm"] for r in runs.values()}):
        mine = [rid for rid in ordered if runs[rid]["arm"] == arm]
        scored = [rid for rid in mine if agreed(rid) is not None]
        row = next(r for r in operator["rows"] if r["eval"] == "all" and r["arm"] == arm)
        assert row["rollouts"] == len(mine)
        assert row["scored"] == len(scored)
        assert row["unscored"] == len(mine) - len(scored)
        assert row["automatic_solved"] == sum(automatic[rid] == "success" for rid in mine)
        assert row["operator_solved"] == sum(agreed(rid) == "success" for rid in scored)
        expected = hand_kappa([(automatic[r], agreed(r)) for r in scored], ("success", "failure"))
        assert row["kappa"] == (None if expected is None else pytest.approx(expected))
    (pair,) = operator["scorer_pairs"]
    between = hand_kappa([(ana[r], ben[r]) for r in ordered], ("success", "failure", "unsure"))
    assert pair["rollouts"] == len(ordered)
    assert pair["kappa"] == pytest.approx(between)
    disputed = {d["rollout"] for d in operator["disagreements"]}
    assert disputed == {solved[0], unsolved[0], unsolved[1]}

    page = browser.new_page()
    page.goto((run_dir / "index.html").as_uri())
    cells = page.locator("#scorer-pairs td.kappa").all_text_contents()
    assert cells == [f"{between:.3f}"]
    shown = page.locator("#disagreements tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.rollout)"
    )
    assert set(shown) == disputed


def test_blinded_run_shows_no_policy_name_in_the_pages_html_js_or_requests(
    run_dir, served, browser
):
    seen: list[str] = []
    page = browser.new_page()
    page.on("request", lambda r: seen.append(f"{r.method} {r.url} {r.post_data or ''}"))

    def body(response: Any) -> None:
        try:
            seen.append(response.body().decode("latin-1"))
        except Exception as error:  # a response the browser dropped (a video's range)
            seen.append(f"unreadable {response.url}: {error}")

    page.on("response", body)
    page.goto(f"{served.url}?scorer=ana")
    page.click("button[data-verdict=success]")
    page.wait_for_selector("#message:has-text('Recorded')")
    for _ in range(page.locator("#rollout-list tbody tr").count()):
        page.click("#next")  # every rollout shown, every video asked for
    seen.append(page.content())
    arms = page.locator("#rollout-list tbody td:nth-child(4)").all_text_contents()
    page.close()
    assert set(arms) == {"A", "B"}
    assert any("POST" in line and "/verdict" in line for line in seen)
    leaks = {name for name in NAMES for text in seen if name.lower() in text.lower()}
    assert leaks == set()
