"""Secrets given on the command line reach no file of the run and no terminal line: a token in
the policy URL's query (shown as `token=***`, like a URL's user:password), and the --blind KEY
(which would tell the letters apart). A URL's user:password together with an API key sends one
Authorization header, the key's; a server sent two answers 401 saying so, never a 500."""

from __future__ import annotations

import json
import shlex

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from policybench.run.command_line import redacted_command
from policybench.serve.client import HIDDEN, without_secrets
from tests.test_arms import AB, bench, run_dir  # noqa: F401 (bench is a fixture)
from tests.test_secrets import BENCHMARK, KEY, assert_solved_and_key_nowhere, run, serving

TOKEN, PASSWORD, BLIND_KEY = "QTOKEN-7c1e", "PASSW0RD-2b9d", "K1-blindkey-5e0a"


@pytest.fixture(scope="module")
def keyed_port():
    yield from serving("--api-key", KEY)


def test_a_url_shows_no_password_and_no_query_value_wherever_it_is_shown():
    url = f"ws://bob:{PASSWORD}@127.0.0.1:8911/?token={TOKEN}&bare&x="
    assert without_secrets(f"recording {url} now") == (
        f"recording ws://{HIDDEN}@127.0.0.1:8911/?token={HIDDEN}&{HIDDEN}&x={HIDDEN} now"
    )
    assert without_secrets(f"'--policy-url=wss://h:1?t={TOKEN}' -k reach") == (
        f"'--policy-url=wss://h:1?t={HIDDEN}' -k reach"
    )
    assert without_secrets("ws://127.0.0.1:8000/path") == "ws://127.0.0.1:8000/path"


def test_a_recorded_command_line_hides_the_blind_key_and_url_query_values():
    args = ["--blind", BLIND_KEY, "-k", "reach", f"--blind={BLIND_KEY}", "--blind", "-n", "2"]
    args += ["--policy-url", f"ws://h:8000?token={TOKEN}", "--blind"]
    assert redacted_command(args) == [
        *("--blind", HIDDEN, "-k", "reach", f"--blind={HIDDEN}", "--blind", "-n", "2"),
        *("--policy-url", f"ws://h:8000?token={HIDDEN}", "--blind"),
    ]


def test_a_url_password_and_query_with_an_api_key_connect_and_reach_no_file(tmp_path, keyed_port):
    (tmp_path / "test_point.py").write_text(BENCHMARK)
    url = f"ws://bob:{PASSWORD}@127.0.0.1:{keyed_port}/?token={TOKEN}"
    done = run(tmp_path, "--policy=openpi", "--policy-url", url, "--policy-api-key", KEY)
    directory = assert_solved_and_key_nowhere(tmp_path, done)
    written = [file for file in tmp_path.rglob("*") if file.is_file()]
    for secret in (TOKEN, PASSWORD):
        assert [str(file) for file in written if secret.encode() in file.read_bytes()] == []
        assert secret not in done.stdout + done.stderr
    command = json.loads((directory / "run.json").read_text())["command"]
    assert f"ws://{HIDDEN}@127.0.0.1:{keyed_port}/?token={HIDDEN}" in command


def test_two_authorization_headers_get_a_401_saying_so_not_a_500(keyed_port):
    headers = [("Authorization", f"Api-Key {KEY}"), ("Authorization", "Basic Ym9iOnB3")]
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{keyed_port}", additional_headers=headers, open_timeout=10)
    response = refused.value.response
    assert response.status_code == 401
    assert "2 Authorization headers: send one" in response.body.decode()


RESUME_HOOK = """
from policybench.pytest_plugin.resume import resume_command


def pytest_sessionfinish(session):
    with open("resume.txt", "w") as file:
        file.write(resume_command(session.config))
"""


def test_a_blinded_runs_files_and_resume_command_keep_no_blind_key(bench):  # noqa: F811
    bench.makeconftest(RESUME_HOOK)
    result = bench.runpytest("--rollouts", "1", *AB, "--blind", BLIND_KEY, "-k", "near")
    assert result.ret == 0
    directory = run_dir(bench)
    files = [path for path in directory.rglob("*") if path.is_file()]
    assert directory / "index.html" in files
    # blinding.json keeps the key aside (report unblind reads it); nothing else holds it
    holding = [p.name for p in files if BLIND_KEY.encode() in p.read_bytes()]
    assert holding == ["blinding.json"]
    command = json.loads((directory / "run.json").read_text())["command"]
    assert f"--blind '{HIDDEN}'" in command, command
    assert BLIND_KEY not in "\n".join(result.outlines)
    # The command that resumes it takes the run's own key (a `--blind` with none), not ***.
    resume = shlex.split((bench.path / "resume.txt").read_text())
    assert resume[-3:] == ["--blind", "--resume", str(directory)], resume
    assert HIDDEN not in resume and BLIND_KEY not in resume
    letters = json.loads((directory / "blinding.json").read_text())["letters"]
    assert bench.runpytest(*resume[1:]).ret == 0
    assert json.loads((directory / "blinding.json").read_text())["letters"] == letters
