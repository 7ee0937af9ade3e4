"""The interpreters isolated envs run in: the user's own, or one `policybench env install NAME`
builds from the Interpreter's requirements into a cache keyed by their hash. The builds here are
real (a venv, pip from the package index): numpy < 2 beside the tests' numpy 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from policybench.envserver import Interpreter, Isolated
from policybench.envserver.interpreters import (
    MARKER,
    InterpreterBuildFailed,
    InterpreterMissing,
    built_dir,
    install,
    python_of,
)
from tests.isolated_envs.evals import NUMPY1_INTERPRETER
from tests.test_own_policy import installed_distribution

REPO = Path(__file__).resolve().parents[1]
VARIABLE = "POLICYBENCH_PYTHON_NUMPY1"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty interpreter cache, and no override of numpy1's interpreter."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(VARIABLE, raising=False)
    return tmp_path / "cache" / "policybench" / "interpreters"


def test_the_cache_directory_is_keyed_by_name_and_requirements(cache):
    built = built_dir(NUMPY1_INTERPRETER)
    assert built.parent == cache
    assert built.name.startswith("numpy1-") and len(built.name) == len("numpy1-") + 12
    assert built_dir(Interpreter("numpy1", ("numpy<2", "msgpack"))) == built
    assert built_dir(Interpreter("numpy1", ("numpy<1.26", "msgpack"))) != built
    assert built_dir(Interpreter("other", ("numpy<2", "msgpack"))) != built


def test_a_missing_interpreter_names_the_one_command_that_builds_it(cache):
    with pytest.raises(InterpreterMissing) as missing:
        python_of(NUMPY1_INTERPRETER)
    message = str(missing.value)
    assert "`policybench env install numpy1`" in message
    assert str(built_dir(NUMPY1_INTERPRETER)) in message and VARIABLE in message


def test_the_users_own_interpreter_is_used_and_the_variable_overrides_the_declaration(
    cache, monkeypatch, tmp_path
):
    declared = Interpreter("numpy1", ("numpy<2",), python=sys.executable)
    assert python_of(declared) == Path(sys.executable)
    other = tmp_path / "python"
    other.symlink_to(sys.executable)
    monkeypatch.setenv(VARIABLE, str(other))
    assert python_of(declared) == other
    assert python_of(NUMPY1_INTERPRETER) == other
    monkeypatch.setenv(VARIABLE, str(tmp_path / "nowhere"))
    with pytest.raises(InterpreterMissing, match=rf"\${VARIABLE} names .*nowhere, which is not"):
        python_of(NUMPY1_INTERPRETER)


def test_concurrent_installs_build_once_and_list_shows_where_it_is(cache, tmp_path):
    site = tmp_path / "site"
    installed_distribution(site, "[policybench.suites]\nisolated = tests.isolated_envs.evals\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    cli = [sys.executable, "-m", "policybench.cli"]

    def listed_line() -> str:
        listed = subprocess.run([*cli, "list"], env=env, capture_output=True, text=True)
        assert listed.returncode == 0, listed.stderr
        assert "[None]" not in listed.stdout  # an isolated Eval names no extra
        return next(line for line in listed.stdout.splitlines() if "interpreter numpy1" in line)

    assert listed_line().split(": ", 1)[1] == "not installed: policybench env install numpy1"

    built = built_dir(NUMPY1_INTERPRETER)
    built.mkdir(parents=True)
    (built / "left-by-an-interrupted-build").touch()  # no marker: built again
    installs = [  # by its registered name, and as module:attr of its Eval
        subprocess.Popen(
            [*cli, "env", "install", name],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("numpy1", "tests.isolated_envs.evals:NUMPY1")
    ]
    said = [install.communicate(timeout=600) for install in installs]
    assert [install.returncode for install in installs] == [0, 0], said
    python = built / "bin" / "python"
    assert sorted(out for out, _ in said) == [
        f"already installed: numpy1 at {python}\n",
        f"built: numpy1 at {python}\n",
    ]
    building = f"building numpy1 in {built}: numpy<2 msgpack\n"  # the one that builds says so
    assert sorted(err for _, err in said) == ["", building], said
    assert not (built / "left-by-an-interrupted-build").exists()

    assert listed_line().split(": ", 1)[1] == f"installed: {python}"
    assert python_of(NUMPY1_INTERPRETER) == python
    assert install(NUMPY1_INTERPRETER) == (python, False)  # a cache hit
    versions = subprocess.run(
        [python, "-c", "import msgpack, numpy; print(numpy.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert versions.stdout.startswith("1."), versions.stdout
    marker = json.loads((built / MARKER).read_text())
    assert marker["requirements"] == ["numpy<2", "msgpack"]
    assert f"numpy=={versions.stdout.strip()}" in marker["freeze"]


REQUIREMENT = "policybench-no-such-distribution==0"


def test_a_failed_build_names_the_step_with_the_end_of_pips_output_and_leaves_nothing(cache):
    broken = Interpreter("broken", (REQUIREMENT,))
    with pytest.raises(InterpreterBuildFailed) as failed:
        install(broken)
    command, _, output = str(failed.value).partition("; the end of its output:\n")
    # The package pip stopped at, then pip's (or uv's) command.
    assert command.startswith(f"building interpreter 'broken' ({REQUIREMENT} failed): `")
    assert " pip " in command and "install" in command and REQUIREMENT in command
    assert "exited with 1" in command
    assert "policybench-no-such-distribution" in output  # pip: "No matching distribution ..."
    assert not built_dir(broken).exists()
    with pytest.raises(InterpreterMissing, match="policybench env install broken"):
        python_of(broken)


def test_an_isolated_envs_packages_are_read_in_its_interpreter_or_not_installed_without_one(
    cache,
):
    from importlib import metadata

    own = Isolated("tests.isolated_envs.numpy1_env:make", Interpreter("own", python=sys.executable))
    assert own.packages(["NumPy", "no-such-dist"]) == {
        "NumPy": metadata.version("numpy"),
        "no-such-dist": "not installed",
    }
    unbuilt = Isolated("tests.isolated_envs.numpy1_env:make", NUMPY1_INTERPRETER)
    missing = dict.fromkeys(("mujoco", "numpy", "msgpack"), "not installed")
    assert unbuilt.packages(["mujoco"]) == missing


def test_list_names_a_given_python_that_is_missing_and_install_says_the_given_one_wins(
    cache, monkeypatch, tmp_path, capsys
):
    from policybench import cli
    from policybench.envserver.command import status

    monkeypatch.setenv(VARIABLE, str(tmp_path / "nowhere"))
    line = status(NUMPY1_INTERPRETER)  # installing would not help: the variable wins
    assert line.startswith(f"missing: interpreter 'numpy1': ${VARIABLE} names ")
    assert "nowhere, which is not a file" in line
    monkeypatch.delenv(VARIABLE)
    assert status(NUMPY1_INTERPRETER) == "not installed: policybench env install numpy1"

    built = built_dir(NUMPY1_INTERPRETER)  # as a build leaves it, without building
    (built / "bin").mkdir(parents=True)
    (built / "bin" / "python").symlink_to(sys.executable)
    (built / MARKER).write_text("{}")
    monkeypatch.setenv(VARIABLE, sys.executable)
    assert cli.main(["env", "install", "tests.isolated_envs.evals:NUMPY1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"already installed: numpy1 at {built / 'bin' / 'python'}",
        f"note: ${VARIABLE} gives {sys.executable}, which runs numpy1's envs instead",
    ]


def test_an_entry_module_the_interpreter_cannot_import_says_how_to_make_it_importable(
    tmp_path, monkeypatch
):
    from policybench.envserver.proxy import EnvServerError

    (tmp_path / "beside_user_env.py").write_text(
        "from tests.isolated_envs.numpy1_env import make\n"
    )
    (tmp_path / "needs_missing_env.py").write_text("import no_such_module_anywhere\n")
    monkeypatch.chdir(tmp_path)  # beside the user, as pytest finds a test's own modules
    monkeypatch.delenv("PYTHONPATH", raising=False)
    own = Interpreter("own", python=sys.executable)
    with pytest.raises(EnvServerError) as failed:
        Isolated("beside_user_env:make", own)("drift")
    said = str(failed.value)
    assert "No module named 'beside_user_env'" in said
    assert "imports beside_user_env from its own site-packages and $PYTHONPATH alone" in said
    assert "Isolated(modules=...)" in said

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(REPO)]))  # the advice
    env = Isolated("beside_user_env:make", own)("drift")
    try:
        assert env.action_space.shape == (2,)
    finally:
        env.close()
    with pytest.raises(EnvServerError) as failed:  # what the entry's module imports: no advice
        Isolated("needs_missing_env:make", own)("drift")
    assert "No module named 'no_such_module_anywhere'" in str(failed.value)
    assert "site-packages" not in str(failed.value)


def test_an_interrupted_install_says_so_in_one_line_and_keeps_nothing(cache, tmp_path):
    (tmp_path / "interrupted_interpreter.py").write_text(
        "from policybench.envserver import Interpreter\n"
        "INTERPRETER = Interpreter('interrupted', ('numpy<2', 'msgpack'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "policybench.cli", "env", "install"]
    install = subprocess.Popen(
        [*command, "interrupted_interpreter:INTERPRETER"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's foreground job
        # and with Ctrl-C not ignored, as a terminal starts it (a background CI job ignores it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    first = install.stderr.readline()  # said before the venv is made: nothing fetched yet
    assert first.startswith("building interrupted in "), first
    os.killpg(install.pid, signal.SIGINT)  # Ctrl-C: to the command and what it started
    rest = install.stderr.read()
    assert install.wait(timeout=60) == 130
    said = "policybench env install: interrupted; what it had built of interrupted is removed\n"
    assert rest == said
    left = [path.name for path in cache.iterdir()]
    assert len(left) == 1 and left[0].endswith(".lock"), left  # no directory, half built or not


def test_the_package_a_failed_install_stopped_at_is_read_from_pips_words():
    from policybench.envserver.interpreters import failed_package

    assert failed_package(["ERROR: No matching distribution found for mplib==0.1.1"]) == (
        "mplib==0.1.1"
    )
    built = [
        "  Building wheel for robomimic (setup.py) ... error",
        "ERROR: Failed building wheel for robomimic",
    ]
    assert failed_package(built) == "robomimic"
    assert (
        failed_package(
            ["Failed to build egl_probe", "ERROR: Could not build wheels for egl_probe,"]
        )
        == "egl_probe"
    )
    assert failed_package(["Killed"]) is None


def test_a_failed_install_command_says_what_failed_and_how_to_retry(cache, tmp_path):
    (tmp_path / "broken_interpreter.py").write_text(
        "from policybench.envserver import Interpreter\n"
        f"INTERPRETER = Interpreter('broken', ({REQUIREMENT!r},))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "policybench.cli", "env", "install"]
    done = subprocess.run(
        [*command, "broken_interpreter:INTERPRETER"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    said = [line for line in done.stderr.splitlines() if line.startswith("policybench env install")]
    assert said[0].startswith(
        f"policybench env install: building interpreter 'broken' ({REQUIREMENT} failed)"
    )
    retry = "retry with `policybench env install broken_interpreter:INTERPRETER`"
    assert said[-1].startswith(f"policybench env install: {retry}")


def test_isolated_suites_without_their_interpreter_are_skipped_with_one_line_not_errors(tmp_path):
    """`pytest benchmarks/` on a machine where no isolated suite's interpreter is built: each
    such Eval is skipped with one line saying the command that builds it (as a missing extra
    is), nothing errors, and the run passes."""
    repo = Path(__file__).resolve().parents[1]
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("POLICYBENCH_PYTHON_", "PYTEST_ADDOPTS"))
    }
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), MUJOCO_GL="disable")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/", "-p", "no:cacheprovider",
         "--report-dir", str(tmp_path / "reports"),
         "-k", "maniskill-pick-cube or robomimic-lift or test_robosuite or kinetix"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert "error" not in done.stdout.splitlines()[-1]
    assert (
        "kinetix: 36 items not run: its interpreter 'kinetix' not installed; build it with "
        "`policybench env install kinetix`" in done.stdout
    )
    assert "kinetix-wheel: 24 items not run: its interpreter 'kinetix' not installed" in done.stdout
    assert (  # one line for the Evals of one interpreter
        "33 items not run (robosuite-door, robosuite-lift, robosuite-nut-assembly and 8 more): its "
        "interpreter 'robosuite' not installed; build it with `policybench env install robosuite`"
        in done.stdout
    )
