"""--env-url and --env-api-key beyond pytest: `policybench serve` (a policy reading its action
space), `policybench probe`, `policybench latency record` and `policybench.evaluate` build an
isolated Eval's env at a real `policybench env serve` on loopback, on a machine whose own
interpreter for it does not exist; a URL that is not tcp:// is refused as pytest refuses it; the
key is written nowhere."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("gym_pusht", reason="needs the pusht extra")
pytest.importorskip("matplotlib", reason="probe plots")

import policybench
from policybench import cli
from policybench.envserver import ENV_PYTHON_VARIABLE
from policybench.options import API_KEY_VARIABLE
from policybench.serve.command import READY as SERVING
from tests.test_env_remote import KEY, clean_env, start_env_server, stop

NOT_TCP = "ws://gpu-box:7000"
WHY = (  # pytest's --env-url
    "takes tcp://HOST:PORT (or tls://HOST:PORT for a server started with --tls-cert), e.g. "
    f"tcp://gpu-box:7000, got '{NOT_TCP}'"
)
MADE = "pusht's env in env server"  # env serve's line for each env it builds


@pytest.fixture(scope="module")
def served_pusht(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """`policybench env serve pusht` (PushT isolated in this interpreter there), asking for
    KEY; its URL and its log."""
    path = tmp_path_factory.mktemp("served")
    env = clean_env(path, **{ENV_PYTHON_VARIABLE: sys.executable, API_KEY_VARIABLE: KEY})
    server, port = start_env_server(path, env, "pusht", "--port", "0")
    yield f"tcp://127.0.0.1:{port}", path / "serve.log"
    stop(server)


def elsewhere(path: Path, **changes: str) -> dict[str, str]:
    """A machine where PushT runs isolated in an interpreter it does not have."""
    return clean_env(path, **{ENV_PYTHON_VARIABLE: str(path / "no-python-here"), **changes})


def made(log: Path) -> int:
    return sum(MADE in line for line in log.read_text().splitlines())


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "policybench.cli", *args]


def test_serve_probe_and_latency_record_build_their_envs_at_env_url(served_pusht, tmp_path):
    url, log = served_pusht
    env = elsewhere(tmp_path, **{API_KEY_VARIABLE: KEY})  # the policy's key, and the env's
    serve = subprocess.Popen(
        command("serve", "--policy=random", "--eval", "pusht", "--port", "0", "--env-url", url),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = serve.stdout.readline()
        assert line.startswith(SERVING), line
        policy_url = re.search(r"ws://\S+", line).group(0)
        before = made(log)
        probe = ["probe", "--eval", "pusht", "--policy=openpi", "--policy-url", policy_url]
        probe += ["--out", str(tmp_path / "probe"), "--env-url", url]
        probed = subprocess.run(
            command(*probe), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert probed.returncode == 0, probed.stdout[-2000:] + probed.stderr[-2000:]
        assert "preflight: passed" in probed.stdout
        # probe's env, and the one serve read the random policy's action space from
        assert made(log) >= before + 2
        before = made(log)
        record = ["latency", "record", "--eval", "pusht", "--policy-url", policy_url]
        record += ["--seconds", "0.2", "--warmup", "0", "--env-url", url]
        record += ["-o", str(tmp_path / "profile.json")]
        recorded = subprocess.run(
            command(*record), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert recorded.returncode == 0, recorded.stdout[-2000:] + recorded.stderr[-2000:]
        assert json.loads((tmp_path / "profile.json").read_text())["recorded"]
        assert made(log) == before + 1
    finally:
        serve.kill()
        serve.wait()
    written = [file for file in tmp_path.rglob("*") if file.is_file()]
    assert [str(file) for file in written if KEY.encode() in file.read_bytes()] == []


def test_without_env_url_the_same_probe_has_no_interpreter_for_the_env(tmp_path):
    """What the test above relies on: the probing machine cannot build PushT's env itself."""
    probe = ["probe", "--eval", "pusht", "--policy=random", "--out", str(tmp_path / "probe")]
    probed = subprocess.run(
        command(*probe), cwd=tmp_path, env=elsewhere(tmp_path), capture_output=True, text=True
    )
    assert probed.returncode != 0
    assert "no-python-here" in probed.stdout + probed.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--eval", "pusht"],
        ["probe", "--eval", "pusht"],
        ["latency", "record", "--eval", "pusht", "-o", "profile.json"],
    ],
    ids=["serve", "probe", "latency-record"],
)
def test_a_command_refuses_an_env_url_that_is_not_tcp_as_pytest_does(args, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([*args, "--env-url", NOT_TCP])
    assert exited.value.code == 2  # argparse's usage error
    assert f"argument --env-url: {WHY}" in capsys.readouterr().err


def test_evaluate_refuses_an_env_url_that_is_not_tcp():
    with pytest.raises(ValueError) as refused:
        policybench.evaluate(object(), evals=["pusht"], env_url=NOT_TCP)
    assert str(refused.value) == f"--env-url {WHY}"  # pytest's usage error's words


EVALUATE = """
import sys
import policybench
from policybench.suites.pusht import PUSHT

found = policybench.evaluate(
    PUSHT.scripted(), evals=["pusht"], rollouts=1, workers=0, report_dir="reports",
    env_url=sys.argv[1], env_api_key=sys.argv[2],
)
print("ERRORS", found.summary.overall.stats.tally.errors, "EXIT", found.returncode)
"""


def test_evaluate_builds_the_runs_envs_at_env_url_and_passes_the_key_by_environment(
    served_pusht, tmp_path
):
    url, log = served_pusht
    (tmp_path / "train.py").write_text(textwrap.dedent(EVALUATE))
    before = made(log)
    # The key on this script's command line stands for a training loop's own variable.
    done = subprocess.run(
        [sys.executable, "train.py", url, KEY],
        cwd=tmp_path,
        env=elsewhere(tmp_path),  # no $POLICYBENCH_API_KEY: the key is evaluate's argument
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ERRORS 0 EXIT 0" in done.stdout, done.stdout[-3000:]
    assert made(log) > before
    written = [file for file in tmp_path.rglob("*") if file.is_file() and file.name != "train.py"]
    assert [str(file) for file in written if KEY.encode() in file.read_bytes()] == []
