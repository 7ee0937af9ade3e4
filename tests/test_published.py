"""Published results beside a run: every shipped number names its source and holds to the schema;
a run is tested against its checkpoint's published rate exactly (two binomials where the source
gives its episodes, against the rate otherwise), checked here against independent enumerations of
the same tests; a run far below its published rate is said below, and diagnosed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom, hypergeom

from policybench import keys
from policybench.report.diagnosis import diagnoses
from policybench.report.published import (
    AGAINST_RATE,
    TWO_BINOMIALS,
    PublishedError,
    catalog,
    compare_published,
    entry_named,
    entry_of,
    read_catalog,
)
from policybench.run.results import read_results
from policybench.suites import registered_evals
from tests.test_shards import BENCHMARK, ENVS

RUN = ("--rollouts", "3", "--report-dir", "runs", "-p", "no:randomly")
OWN = """
family = "toy"

[[entry]]
name = "team/reacher-v7"
model = "the team's reacher, release 7"
checkpoint = "team/reacher-v7"
source = "https://example.org/reacher-v7/model-card"
where = "model card, table 1"
protocol = "30 episodes a task"
episodes_per_task = 30
results = [{ eval = "reach", percent = 90.0, tasks = 3 }]
"""


def test_shipped_results_name_their_sources_and_stage_on_registered_evals():
    evals = registered_evals()
    entries = catalog()
    assert len({entry.family.split(" (")[0] for entry in entries}) >= 6
    for entry in entries:
        assert entry.source.startswith("https://") and entry.where and entry.protocol, entry
        for result in entry.results:
            for name in result.evals:
                assert name in evals, f"{entry.name}: {name} is not a registered Eval"
                if result.task is not None:
                    assert result.task in evals[name].tasks, (entry.name, result.task)
            assert 0 <= result.rate <= 1
            if result.episodes is not None:  # a rate the episodes can give, as printed
                made = result.rate * result.episodes
                assert abs(made - round(made)) < 0.01 * result.episodes, (entry.name, made)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ('source = "https://example.org/reacher-v7/model-card"\n', "expected `source`"),
        ('source = "https://example.org/reacher-v7/model-card"', 'source = "example.org/x"'),
        (
            'source = "https://example.org/reacher-v7/model-card"',
            'source = "https://e.org/a) [x](y"',
        ),
        ("percent = 90.0", "percent = 190.0"),
        ('where = "model card, table 1"', 'where = "model card"\nsorce = "typo"'),
        ('eval = "reach"', 'eval = "reach", evals = ["reach"]'),
    ],
)
def test_a_file_that_breaks_the_schema_is_refused_naming_it(tmp_path, change, said):
    broken = OWN.replace(change, "") if said.startswith("expected") else OWN.replace(change, said)
    (tmp_path / "team.toml").write_text(broken)
    with pytest.raises(PublishedError, match=r"team\.toml: entry 'team/reacher-v7'"):
        read_catalog(tmp_path)


def _fisher_by_enumeration(a: int, n1: int, b: int, n2: int) -> float:
    """Two-sided Fisher's exact p-value: every table with the margins that is no more likely
    than the one seen (the hypergeometric law of the first row's successes)."""
    law = hypergeom(n1 + n2, a + b, n1)
    support = np.arange(max(0, a + b - n2), min(n1, a + b) + 1)
    seen = law.pmf(a)
    return float(sum(law.pmf(k) for k in support if law.pmf(k) <= seen * (1 + 1e-7)))


def _binomial_by_enumeration(k: int, n: int, p: float) -> float:
    seen = binom.pmf(k, n, p)
    return float(
        min(
            1.0,
            sum(
                binom.pmf(i, n, p) for i in range(n + 1) if binom.pmf(i, n, p) <= seen * (1 + 1e-7)
            ),
        )
    )


def _records(eval: str, task: str, solved: int, rollouts: int) -> list[dict]:
    return [
        {keys.EVAL: eval, keys.TASK: task, keys.OUTCOME: "solved" if i < solved else "unsolved"}
        for i in range(rollouts)
    ]


@pytest.mark.parametrize(
    ("solved", "rollouts", "verdict"),
    [(319, 500, "consistent"), (32, 50, "consistent"), (20, 50, "below"), (200, 500, "below")],
)
def test_a_run_at_and_far_below_the_published_rate_against_two_binomials(solved, rollouts, verdict):
    entry = entry_named("lerobot/diffusion_pusht")  # 63.8% of 500 episodes: 319 solved
    (found,) = compare_published(_records("pusht", "push-t", solved, rollouts), entry)
    assert found.test == TWO_BINOMIALS and found.published_solved == 319
    reference = _fisher_by_enumeration(solved, rollouts, 319, 500)
    assert found.p_value == pytest.approx(reference, rel=1e-9, abs=1e-15)
    assert found.verdict == verdict
    assert found.differs == (
        () if rollouts == 500 else (f"episodes a task: {rollouts} here, 500 published",)
    )


@pytest.mark.parametrize(
    ("solved", "rollouts", "verdict"), [(8, 10, "consistent"), (2, 10, "below")]
)
def test_a_source_without_episodes_is_tested_against_its_rate(solved, rollouts, verdict):
    entry = entry_named("robomimic-v0.1/bc_rnn_ph_low_dim")  # Square: about 84%, no episodes
    (found,) = compare_published(_records("robomimic-square", "square", solved, rollouts), entry)
    assert found.test == AGAINST_RATE and found.published_solved is None
    assert found.p_value == pytest.approx(
        _binomial_by_enumeration(solved, rollouts, 0.84), rel=1e-9
    )
    assert found.verdict == verdict


def test_a_policy_names_its_entry_by_its_checkpoint_but_not_by_a_lookalike_folder():
    def run(**policy):
        return [
            {keys.EVAL: "pusht", keys.TASK: "push-t", keys.OUTCOME: "solved", keys.POLICY: policy}
        ]

    cached = "lerobot:/home/u/.cache/huggingface/hub/models--lerobot--diffusion_pusht/snapshots/3f"
    assert entry_of(run(name=cached)).name == "lerobot/diffusion_pusht"
    assert entry_of(run(name="lerobot:/data/lerobot/diffusion_pusht/pretrained_model")).name == (
        "lerobot/diffusion_pusht"
    )
    assert entry_of(run(name="lerobot:outputs/train/diffusion_pusht")) is None
    assert entry_of(run(name="mine", published="pi05_libero")).name == "pi05_libero"
    ab = [{**r, keys.ARM: "A"} for r in run(name=cached)]
    assert entry_of(ab) is None  # an A/B run's arms are compared with each other
    with pytest.raises(ValueError, match="no published results named 'nope'; known: "):
        entry_of(run(name=cached), "nope")


@pytest.fixture
def bench(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The point benchmark, with the team's own published entry (OWN) in $POLICYBENCH_PUBLISHED."""
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    own = pytester.path / "published"
    own.mkdir()
    (own / "team.toml").write_text(textwrap.dedent(OWN))
    monkeypatch.setenv("POLICYBENCH_PUBLISHED", str(own))
    return pytester


def test_a_run_below_its_published_rate_is_said_so_everywhere_and_diagnosed(bench):
    result = bench.runpytest(
        *RUN, "--policy=random", "-k", "not far", "--published", "team/reacher-v7"
    )
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    assert "published results of team/reacher-v7 (model card, table 1):" in out
    assert (
        "reach: 0.0% (0/9) against 90.0% of 90 published for team/reacher-v7 (-90.0 pts), BELOW it"
        in out
    )
    assert "differs: episodes a task: 3 here, 30 published" in out
    run = (bench.path / "runs" / "latest").resolve()
    summary = json.loads((run / "summary.json").read_text())
    (said,) = summary[keys.PUBLISHED]
    assert said["verdict"] == "below" and said["published_solved"] == 81
    assert said["p_value"] == pytest.approx(_fisher_by_enumeration(0, 9, 81, 90), rel=1e-9)
    assert 'id="published"' in (run / "index.html").read_text()
    assert "Beside the published results of team/reacher-v7" in (run / "summary.md").read_text()
    assert any(d["eval"] == "reach" for d in summary["diagnoses"])
    records = read_results(run / "results.jsonl").records
    solved = [{**r, keys.OUTCOME: "solved"} if i < 3 else r for i, r in enumerate(records)]
    assert not diagnoses(solved, run)  # at 33% and no expert: nothing to say ...
    assert [d.eval for d in diagnoses(solved, run, {"reach"})] == ["reach"]  # ... unless far below
    from policybench.cli import main

    assert main(["history", str(bench.path / "runs")]) == 0
    page = (bench.path / "runs" / "index.html").read_text()
    assert (
        '<line class="published"' in page and "dashed: 90.0% published for team/reacher-v7" in page
    )
    assert "reach: 0.0% against 90.0% published for team/reacher-v7 (below)" in page
    assert main(["leaderboard", str(bench.path / "runs")]) == 0  # marked beside, not ranked
    board = (bench.path / "runs" / "leaderboard.md").read_text()
    assert (
        "| [team/reacher-v7](https://example.org/reacher-v7/model-card) (published) | 90.0% |"
        in board
    )
    refused = bench.runpytest(*RUN, "--published", "nope")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "--published: no published results named 'nope'" in refused.stderr.str()


def test_policybench_published_lists_entries_with_sources(capsys):
    from policybench.cli import main

    assert main(["published", "pusht"]) == 0
    out = capsys.readouterr().out
    assert "lerobot/diffusion_pusht [PushT]" in out and "pusht: 63.8% of 500 episodes" in out
    assert "source: https://huggingface.co/lerobot/diffusion_pusht/" in out
    assert main(["published", "no-such-eval"]) == 2


def test_report_html_compares_a_past_run_with_an_entry_named_later(bench):
    from policybench.cli import main

    assert bench.runpytest(*RUN, "-k", "not far").ret == 0  # the expert, no entry named
    run = Path(bench.path / "runs" / "latest").resolve()
    assert keys.PUBLISHED not in json.loads((run / "summary.json").read_text())
    assert main(["report", "html", str(run), "--published", "team/reacher-v7"]) == 0
    (said,) = json.loads((run / "summary.json").read_text())[keys.PUBLISHED]
    assert said["solved"] == said["rollouts"] == 9 and said["verdict"] == "consistent"
