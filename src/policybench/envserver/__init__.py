"""Envs in an interpreter of their own: a suite whose dependencies clash with ours declares its
env as `Isolated(entry, interpreter)`, an ordinary `make_env` whose envs are `gymnasium.Env`
proxies to an env server (envserver/server.py, one small module needing only the standard
library, numpy and msgpack) running in that interpreter. The World, harness, codecs and records
cannot tell the difference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Interpreter:
    """Where an isolated env runs: an interpreter built from `requirements` into a cache
    directory keyed by their hash (see envserver.interpreters), or the user's own `python`.
    `name` names it in `policybench list` and in its cache directory."""

    name: str
    requirements: tuple[str, ...] = ()
    python: str | None = None


@dataclass(frozen=True)
class Isolated:
    """A `make_env` that builds each env in `interpreter`: `entry` ("module:callable") is called
    there as `callable(task, **kwargs)` and returns a gymnasium env."""

    entry: str
    interpreter: Interpreter
    kwargs: Mapping[str, Any] = field(default_factory=dict)
