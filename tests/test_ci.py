"""CI runs what the README says: `.ci/run` runs the README's test command, the envs it names
exist in tox.ini, and the README's benchmark command without tox selects what `tox -e bench`
selects."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def readme() -> str:
    return (REPO / "README.md").read_text()


def tox_ini() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "tox.ini")
    return parser


def readme_commands() -> list[str]:
    """The README's two commands: the one that sets up and runs the default benchmark, then the
    one that sets up and runs the tests."""
    block = readme().split("## Two commands", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2, commands
    return commands


def readme_test_command() -> str:
    return readme_commands()[1]


def test_ci_runs_the_readme_commands_verbatim_and_in_order():
    """Both, one after the other, as a new user runs them: a file the first leaves behind (tox's
    `.venv` redirect) cannot break the second unseen."""
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    for command in readme_commands():
        assert command in lines, f"{command!r} is not a line of .ci/run"
    bench, test = readme_commands()
    assert lines.index(bench) < lines.index(test)


def test_tox_writes_no_venv_redirect_where_ci_setup_makes_its_venv():
    assert tox_ini()["tox"]["venv_redirect"] == "false"
    assert "rm .venv" in (REPO / ".ci" / "setup").read_text()


def test_every_tox_env_of_the_test_command_is_defined():
    envs = re.search(r"tox -e (\S+)", readme_test_command()).group(1).split(",")
    assert {"test", "lerobot"} <= set(envs)
    assert [env for env in envs if f"testenv:{env}" not in tox_ini()] == []


def test_the_test_env_ends_with_bench_smokes_run():
    """CI runs bench-smoke's selection in the test env, which holds its extras."""
    ini = tox_ini()
    smoke = "pytest {[bench-smoke]select}"
    assert ini["testenv:test"]["commands"].strip().splitlines()[-1].strip() == smoke
    assert ini["testenv:bench-smoke"]["commands"].strip() == smoke + " {posargs}"
    bench_extras = {e.strip() for e in ini["testenv:bench"]["extras"].split(",")}
    assert bench_extras <= {e.strip() for e in ini["testenv:test"]["extras"].split(",")}


def test_the_readme_benchmark_command_without_tox_is_tox_benchs():
    selection = tox_ini()["bench"]["select"]
    assert "{[bench]select}" in tox_ini()["testenv:bench"]["commands"]
    without_tox = re.search(r"Without tox: .*?then\s+`(pytest [^`]+)`", readme(), re.S)
    assert without_tox, "the README's 'Without tox' sentence names no pytest command"
    assert shlex.split(without_tox.group(1)) == ["pytest", *shlex.split(selection)]


def test_the_lerobot_env_runs_lerobots_libero_staging_test_and_may_not_skip_it():
    lerobot = tox_ini()["testenv:lerobot"]
    assert {"lerobot", "libero"} <= {extra.strip() for extra in lerobot["extras"].split(",")}
    staging = [line for line in lerobot["commands"].splitlines() if "test_libero_staging" in line]
    assert staging and all("--no-skips" in line for line in staging), staging


def test_the_readme_benchmark_needs_no_gl_library_so_it_runs_before_ci_setup():
    """The README's first command runs on a machine .ci/setup has not touched: MuJoCo imports
    its GL backend (EGL's library) at import unless told there is none."""
    setenv = tox_ini()["testenv:bench"]["setenv"]
    assert "MUJOCO_GL = {env:MUJOCO_GL:disable}" in setenv
