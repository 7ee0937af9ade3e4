"""One protocol: `--resume`, `report merge` and `report compare` give the same verdict on the same
pair of runs, field by field, and accept the same override; comparing runs that share no task
fails; merge counts only the rollouts a run selected as missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policybench.cli import main
from policybench.record.protocol import OVERRIDE
from tests.test_plugin import ENVS

BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

EVAL = point_eval("point", tasks={"alpha": "reach alpha", "beta": "reach beta"},
                  timeout_s=TIMEOUT, scripted=GreedyPointModel)


@policybench.parametrize(EVAL)
def test_point(rollout, harness):
    harness(rollout)
"""
REFUSED = "the protocol differs"  # resume's words; merge and compare say "different protocols"


def benchmark(pytester: pytest.Pytester, timeout_s: float = 2.0) -> None:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK.replace("TIMEOUT", str(timeout_s)))


def run(pytester: pytest.Pytester, *args: str) -> Path:
    """A real run; its run directory."""
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    return (pytester.path / "reports" / "latest").resolve()


def refused_by(command: list[str]) -> str | None:
    """Why `policybench COMMAND` refused to run, or None when it ran."""
    try:
        main(command)
    except SystemExit as refused:
        return str(refused)
    return None


# (what the second run changes, whether resume and merge refuse, whether compare refuses)
CHANGES = [
    pytest.param(["--rollouts", "2"], False, False, id="rollouts-per-task"),
    pytest.param(["--seed", "5"], True, True, id="base-seed"),
    pytest.param(["--inference-latency", "0.1"], True, True, id="inference-latency"),
    pytest.param(["--chunk-anchor", "arrival"], True, True, id="chunk-anchor"),
    pytest.param(["--execute-steps", "1"], True, True, id="execute-steps"),
    pytest.param(["timeout_s=3.0"], True, True, id="timeout"),
    pytest.param(["--policy", "random"], True, False, id="policy"),
]


@pytest.mark.parametrize(("change", "one_run_refuses", "compare_refuses"), CHANGES)
def test_resume_merge_and_compare_judge_a_change_alike(
    pytester, change, one_run_refuses, compare_refuses
):
    benchmark(pytester)
    first = run(pytester, "--rollouts", "1")
    if change[0].startswith("timeout_s="):
        benchmark(pytester, timeout_s=3.0)
        change = []
    second = run(pytester, "--rollouts", "1", *change)

    merged = pytester.path / "merged"
    merge = refused_by(["report", "merge", str(first), str(second), "--out", str(merged)])
    compare = refused_by(["report", "compare", str(first), str(second)])
    resume = pytester.runpytest("-p", "no:cacheprovider", "--rollouts", "1", *change,
                                "--resume", str(first))  # fmt: skip

    resume_refused = resume.ret == pytest.ExitCode.USAGE_ERROR
    assert resume_refused == (REFUSED in resume.stderr.str()), resume.stderr.str()
    if not resume_refused:
        assert resume.ret == pytest.ExitCode.OK, resume.stdout.str()[-2000:]
    assert (resume_refused, merge is not None) == (one_run_refuses, one_run_refuses)
    assert (compare is not None) == compare_refuses
    for message in (resume.stderr.str() if resume_refused else None, merge, compare):
        assert message is None or OVERRIDE in message  # each names the one override

    # The one override, accepted by each.
    assert refused_by(["report", "merge", str(first), str(second), "--out", str(merged),
                       OVERRIDE]) is None  # fmt: skip
    assert refused_by(["report", "compare", str(first), str(second), OVERRIDE]) is None
    resumed = pytester.runpytest("-p", "no:cacheprovider", "--rollouts", "1", *change,
                                 "--resume", str(first), OVERRIDE)  # fmt: skip
    assert resumed.ret == pytest.ExitCode.OK, resumed.stdout.str()[-2000:]


def test_comparing_runs_with_no_task_in_common_fails_naming_why(pytester, capsys):
    benchmark(pytester)
    alpha = run(pytester, "--rollouts", "1", "-k", "alpha")
    beta = run(pytester, "--rollouts", "1", "-k", "beta")

    why = refused_by(["report", "compare", str(alpha), str(beta), "--fail-on-regression"])

    assert why is not None
    assert (
        f"{alpha.name} and {beta.name} share no task, so nothing was compared ({alpha.name} "
        f"ran point/alpha; {beta.name} ran point/beta)" in why
    )
    assert refused_by(["report", "compare", str(alpha), str(beta)]) == why

    gated = pytester.runpytest(
        "-p", "no:cacheprovider", "--rollouts", "1", "-k", "beta", "--baseline", str(alpha),
        "--fail-on-regression",
    )  # fmt: skip
    assert gated.ret == pytest.ExitCode.TESTS_FAILED
    gated.stdout.fnmatch_lines([f"FAIL --fail-on-regression: {alpha.name} and * share no task*"])


def selected(run_dir: Path) -> list[str]:
    return json.loads((run_dir / "run.json").read_text())["settings"]["selected"]


def missing(run_dir: Path) -> list[str]:
    return json.loads((run_dir / "run.json").read_text())["settings"]["merge"]["missing"]


def test_merge_counts_only_the_rollouts_a_run_selected_as_missing(pytester):
    benchmark(pytester)
    alpha = run(pytester, "--rollouts", "2", "-k", "alpha", "-n", "2")
    beta = run(pytester, "--rollouts", "2", "-k", "beta")
    assert selected(alpha) == [
        "test_point.py::test_point[alpha/seed=0]",
        "test_point.py::test_point[alpha/seed=1]",
    ]
    out = pytester.path / "merged"

    assert main(["report", "merge", str(alpha), "--out", str(out)]) == 0
    assert missing(out) == []  # beta's rollouts were not selected, so none is missing
    assert main(["report", "merge", str(alpha), str(beta), "--out", str(out)]) == 0
    assert missing(out) == []

    # A selected rollout that no part recorded (its controller was killed) is missing.
    results = alpha / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(line for line in lines if "alpha/seed=1" not in line))
    assert main(["report", "merge", str(alpha), str(beta), "--out", str(out)]) == 1
    assert missing(out) == [
        "test_point.py::test_point: 1 of 4 selected rollouts ran in no part ([alpha/seed=1])"
    ]


def test_runs_on_another_simulator_version_are_refused_with_both_versions_named(pytester):
    """A simulator's version is part of an Eval's protocol: two runs alike but for MuJoCo's
    version (recorded per rollout under `packages`; the point env imports none, so the second
    run's records are given another one, as a run on another MuJoCo would record) are not
    compared, merged or resumed unless overridden."""
    benchmark(pytester)
    first = run(pytester, "--rollouts", "1")
    second = run(pytester, "--rollouts", "1")
    for run_dir, version in ((first, "3.3.0"), (second, "3.17.0")):
        results = run_dir / "results.jsonl"
        records = [json.loads(line) for line in results.read_text().splitlines()]
        for record in records:
            record["packages"] = {**(record.get("packages") or {}), "mujoco": version}
        results.write_text("".join(json.dumps(record) + "\n" for record in records))

    why = refused_by(["report", "compare", str(first), str(second)])
    assert why is not None and OVERRIDE in why
    assert 'eval point: packages.mujoco is "3.3.0" in' in why and 'but "3.17.0" in' in why
    merged = pytester.path / "merged"
    assert refused_by(["report", "merge", str(first), str(second), "--out", str(merged)])
    assert refused_by(["report", "compare", str(first), str(second), OVERRIDE]) is None
