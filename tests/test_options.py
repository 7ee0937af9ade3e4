"""Every policybench option is checked when the run is configured: a bad value is one usage
line naming the option (exit 4) and nothing runs; the options pytest, `policybench probe` and
`policybench serve` share are declared once, with the same checks."""

from __future__ import annotations

import pytest

from policybench.cli import main as policybench_main
from tests.test_plugin import BENCHMARK, ENVS


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    return pytester


@pytest.mark.parametrize(
    ("option", "named"),
    [
        (["--rollouts", "0"], "--rollouts"),
        (["--rollout-wall-timeout", "-1"], "--rollout-wall-timeout"),
        (["--infer-timeout", "0"], "--infer-timeout"),
        (["--server-wait", "-1"], "--server-wait"),
        (["--retry-errors", "-1"], "--retry-errors"),
        (["--max-envs-per-worker", "0"], "--max-envs-per-worker"),
        (["--execute-steps", "0"], "--execute-steps"),
        (["--inference-latency", "steps:3", "--execute-steps", "2"], "--execute-steps 2"),
        (["--inference-latency", "steps:x"], "steps:D"),
        (["--inference-latency", "profile:"], "profile:FILE"),
        (["--envs-per-worker", "0"], "--envs-per-worker"),
        (["--success-fail-under", "1.5"], "--success-fail-under"),
        (["--regression-alpha", "1"], "--regression-alpha"),
        (["--policy-url", "http://127.0.0.1:8000"], "--policy-url"),
        (["--inference-latency", "soon"], "inference latency"),
        (["--shard", "5/4"], "--shard"),
        (["--shard", "auto", "--shard-count", "0"], "--shard-count"),
        (["--resume", "no-such-run"], "--resume"),
    ],
    ids=lambda value: value if isinstance(value, str) else " ".join(value),
)
def test_a_bad_option_value_is_one_usage_line_and_nothing_runs(bench, option, named):
    result = bench.runpytest_subprocess("-p", "no:cacheprovider", *option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and named in errors[0], result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert "passed" not in result.stdout.str(), "rollouts ran"
    reports = bench.path / "reports"
    assert not reports.exists() or not any(reports.iterdir()), "a run directory was left"


def test_good_values_at_the_edges_are_accepted(bench):
    result = bench.runpytest(
        "-k",
        "reach",
        "--rollouts",
        "1",
        "--retry-errors",
        "0",
        "--rollout-wall-timeout",
        "0",
        "--server-wait",
        "0",
        "--success-fail-under",
        "0",
    )
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("command", ["probe", "serve"])
def test_probe_and_serve_check_the_shared_options_as_pytest_does(command, capsys):
    given = ["--eval", "pusht"] if command == "probe" else []
    shared = {"probe": ["--server-wait", "-1"], "serve": ["--seed", "x"]}[command]
    with pytest.raises(SystemExit) as exited:
        policybench_main([command, *given, *shared])
    assert exited.value.code == 2  # argparse's usage error, before anything is started
    error = capsys.readouterr().err
    assert f"argument {shared[0]}:" in error, error


def test_probe_refuses_a_timeout_of_zero_in_the_words_pytest_does(capsys, bench):
    with pytest.raises(SystemExit):
        policybench_main(["probe", "--eval", "pusht", "--infer-timeout", "0"])
    probe_says = capsys.readouterr().err.strip().splitlines()[-1]
    result = bench.runpytest_subprocess("--infer-timeout", "0")
    pytest_says = next(line for line in result.stderr.lines if line.startswith("ERROR:"))
    why = "--infer-timeout: must be > 0 seconds, got 0"
    assert probe_says.endswith(why), probe_says
    assert pytest_says.replace("--infer-timeout", "--infer-timeout:").endswith(why), pytest_says
