"""Which Python an isolated env runs in, and how it is built: the user's own interpreter, or
one built from the Interpreter's requirements into a cache keyed by their hash.

Precedence: the environment variable `POLICYBENCH_PYTHON_<NAME>` (NAME upper-cased, every
character other than a letter or digit as `_`), then `Interpreter.python`, then the cache
(`$XDG_CACHE_HOME/policybench/interpreters/<name>-<hash12>/`, built by
`policybench env install NAME`). What is installed in one is read by running it once
(`installed_versions`), and kept beside a built interpreter's marker.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from policybench.cache import cache_home

# What the env server needs in every interpreter, added to requirements that do not name them.
SERVER_REQUIREMENTS = ("msgpack", "numpy")
MARKER = "policybench-interpreter.json"  # written last: a directory without it is unfinished
OUTPUT_TAIL_LINES = 30
# Beside the marker: the distributions installed, as last read, with what they were read for.
VERSIONS = "policybench-versions.json"
VERSIONS_SCRIPT = (
    "import importlib.metadata as m, json, sys; "
    "found = ((d.metadata['Name'], d.version) for d in m.distributions()); "
    "json.dump({name: version for name, version in found if name}, sys.stdout)"
)


class InterpreterMissing(LookupError):
    """An isolated env's interpreter is neither the user's own nor built."""


class InterpreterBuildFailed(RuntimeError):
    """A step of building an interpreter failed; the message holds the tail of its output."""


class InterpreterUnreadable(RuntimeError):
    """An interpreter could not say which distributions it has installed."""


@dataclass(frozen=True)
class Interpreter:
    """Where an isolated env runs: an interpreter built from `requirements` into a cache
    directory keyed by their hash (see envserver.interpreters), or the user's own `python`.
    `name` names it in `policybench list` and in its cache directory."""

    name: str
    requirements: tuple[str, ...] = ()
    python: str | None = None
    # Installed after `requirements`, in place of the versions they brought (removed first), with
    # what they need themselves: a candidate pin set that overrides an exact pin of theirs
    # (MetaWorld's mujoco==3.3.0, say).
    overrides: tuple[str, ...] = ()
    # Packages of this interpreter copied in as they are (policybench itself, for an env whose
    # factory is in a suite module of ours): refreshed each time a process first uses it.
    copied: tuple[str, ...] = ()


def python_of(interpreter: Interpreter) -> Path:
    """The Python executable an env isolated in `interpreter` runs in."""
    variable = override_variable(interpreter)
    own = os.environ.get(variable) or interpreter.python
    if own:
        path = Path(own).expanduser()
        if not path.is_file():
            source = f"${variable}" if os.environ.get(variable) else "Interpreter.python"
            raise InterpreterMissing(
                f"interpreter {interpreter.name!r}: {source} names {own}, which is not a file; "
                "give the path of a Python executable"
            )
        return path
    built = built_dir(interpreter)
    if not (built / MARKER).is_file():
        raise InterpreterMissing(
            f"interpreter {interpreter.name!r} is not installed (expected it in {built}); "
            f"build it with `{install_command(interpreter)}`, or point ${variable} at a Python "
            "that has its requirements"
        )
    if interpreter.copied:
        _copy_in(str(built), interpreter.copied)
    return _python_in(built)


@functools.cache
def _copy_in(built: str, packages: tuple[str, ...]) -> None:
    """This interpreter's `packages` copied into the built one's site-packages, as they are now
    (once a process: a rollout's env server starts from the code the run imported)."""
    python = _python_in(Path(built))
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    for name in packages:
        source = Path(importlib.import_module(name).__file__ or "").parent
        target = Path(site) / name
        staging = Path(site) / f".{name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)


def override_variable(interpreter: Interpreter) -> str:
    """The environment variable that points `interpreter` at a Python of the user's own."""
    return "POLICYBENCH_PYTHON_" + re.sub(r"[^A-Za-z0-9]", "_", interpreter.name).upper()


def install_command(interpreter: Interpreter) -> str:
    return f"policybench env install {interpreter.name}"


def cache_root() -> Path:
    return cache_home() / "interpreters"


def built_dir(interpreter: Interpreter) -> Path:
    """Where `interpreter` is built: keyed by its name, its full requirements and this Python's
    version, so that changing any of them builds a new one beside the old."""
    key = [interpreter.name, list(full_requirements(interpreter)), platform.python_version()]
    if interpreter.overrides or interpreter.copied:  # (an interpreter without keeps its key)
        key += [list(interpreter.overrides), list(interpreter.copied)]
    key = json.dumps(key)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_root() / f"{interpreter.name}-{digest}"


def full_requirements(interpreter: Interpreter) -> tuple[str, ...]:
    """The declared requirements, plus what the env server needs where they do not name it."""
    named = {distribution(requirement) for requirement in interpreter.requirements}
    missing = tuple(name for name in SERVER_REQUIREMENTS if name not in named)
    return (*interpreter.requirements, *missing)


def install(
    interpreter: Interpreter, building: Callable[[Interpreter, Path], None] | None = None
) -> tuple[Path, bool]:
    """Builds `interpreter` into its cache directory unless it is there: (its Python, whether
    this call built it). Concurrent installs wait for each other on a lock file; a directory an
    interrupted build left behind (no marker) is removed and built again. `building` is called
    with the interpreter and its directory when this call starts to build it."""
    built = built_dir(interpreter)
    built.parent.mkdir(parents=True, exist_ok=True)
    with _locked(built.with_name(built.name + ".lock")):
        if (built / MARKER).is_file():
            return _python_in(built), False
        if building is not None:
            building(interpreter, built)
        shutil.rmtree(built, ignore_errors=True)
        try:
            _build(interpreter, built)
        except BaseException:
            shutil.rmtree(built, ignore_errors=True)
            raise
    return _python_in(built), True


def _build(interpreter: Interpreter, built: Path) -> None:
    """A venv from this Python at `built` (not in a temporary directory renamed afterwards: a
    venv's scripts hold its absolute path), published by writing the marker last, atomically."""
    requirements = full_requirements(interpreter)
    python = _python_in(built)
    uv = shutil.which("uv")
    overrides = list(interpreter.overrides)
    if uv:
        _run(interpreter, [uv, "venv", "--python", sys.executable, str(built)])
        _run(interpreter, [uv, "pip", "install", "--python", str(python), *requirements])
        if overrides:
            _run(
                interpreter,
                [uv, "pip", "install", "--python", str(python), "--no-deps", *overrides],
            )
        freeze = _run(interpreter, [uv, "pip", "freeze", "--python", str(python)])
    else:
        _run(interpreter, [sys.executable, "-m", "venv", str(built)])
        pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
        _run(interpreter, [*pip, "install", *requirements])
        if overrides:  # pip then warns that a requirement's pin is broken: that is the point
            # Removed first: a package whose layout changed (mujoco 4 split its bindings into
            # mujoco-core) breaks when upgraded in place.
            _run(interpreter, [*pip, "uninstall", "-y", *(distribution(p) for p in overrides)])
            _run(interpreter, [*pip, "install", *overrides])
        freeze = _run(interpreter, [*pip, "freeze", "--all"])
    marker = {
        "interpreter": interpreter.name,
        "requirements": list(requirements),
        "overrides": overrides,
        "python": platform.python_version(),
        "built_with": sys.executable,
        "freeze": freeze.splitlines(),
    }
    unfinished = built / (MARKER + ".tmp")
    unfinished.write_text(json.dumps(marker, indent=1) + "\n")
    os.replace(unfinished, built / MARKER)


def installed_versions(python: Path) -> dict[str, str]:
    """The distributions installed where `python` runs, normalized name -> version. `python` is
    run once to read them; they are kept in this process, and beside a built interpreter's
    marker (VERSIONS, keyed by `python`'s path and the marker's mtime: a rebuild reads anew)."""
    marker = python.parent.parent / MARKER
    built_at = marker.stat().st_mtime_ns if marker.is_file() else None
    return dict(_installed(str(python), built_at))


@functools.cache
def _installed(python: str, built_at: int | None) -> dict[str, str]:
    key = {"python": python, "marker_mtime_ns": built_at}
    kept = Path(python).parent.parent / VERSIONS
    if built_at is not None and kept.is_file():
        found = json.loads(kept.read_text())
        if {name: found.get(name) for name in key} == key:
            return found["versions"]
    command = [python, "-c", VERSIONS_SCRIPT]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-OUTPUT_TAIL_LINES:])
        raise InterpreterUnreadable(
            f"{python} could not list its installed distributions (exit status "
            f"{done.returncode}); check that it runs Python 3.8 or later. The end of its "
            f"output:\n{tail}"
        )
    versions = {distribution(name): version for name, version in json.loads(done.stdout).items()}
    if built_at is not None:
        unfinished = kept.with_name(f".{VERSIONS}.{os.getpid()}")
        unfinished.write_text(json.dumps({**key, "versions": versions}, indent=1) + "\n")
        os.replace(unfinished, kept)
    return versions


def _run(interpreter: Interpreter, command: list[str]) -> str:
    """`command`'s standard output; its failure raised with the end of what it printed."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        printed = (done.stdout + done.stderr).splitlines()
        tail = "\n".join(printed[-OUTPUT_TAIL_LINES:])
        failed = failed_package(printed)
        which = "" if failed is None else f" ({failed} failed)"
        raise InterpreterBuildFailed(
            f"building interpreter {interpreter.name!r}{which}: `{' '.join(command)}` exited "
            f"with {done.returncode}; the end of its output:\n{tail}"
        )
    return done.stdout


# How pip names the package it stopped at: none to be found, or one that did not build.
FAILED_PATTERNS = (
    re.compile(r"No matching distribution found for (\S+)"),
    re.compile(r"Failed (?:to build|building wheel for) (\S+)"),
    re.compile(r"Could not build wheels for (\S+)"),
)


def failed_package(printed: list[str]) -> str | None:
    """The package a failed pip install names as the one it stopped at (None: it names none)."""
    for line in reversed(printed):
        for pattern in FAILED_PATTERNS:
            match = pattern.search(line)
            if match:
                return match.group(1).rstrip(",")
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _python_in(venv: Path) -> Path:
    return venv / "bin" / "python"


def distribution(requirement: str) -> str:
    """The normalized distribution name a requirement line starts with."""
    match = re.match(r"\s*([A-Za-z0-9._-]+)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else requirement
