"""Envs in an interpreter of their own: a suite whose dependencies clash with ours declares its
env as `Isolated(entry, interpreter)`, an ordinary `make_env` whose envs are `gymnasium.Env`
proxies to an env server (envserver/server.py, one small module needing only the standard
library, numpy and msgpack) running in that interpreter. The World, harness, codecs and records
cannot tell the difference."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from policybench.envserver.interpreters import Interpreter  # where suites import it from

if TYPE_CHECKING:
    import gymnasium as gym

    from policybench.spec import Eval


@dataclass(frozen=True)
class Isolated:
    """A `make_env` that builds each env in `interpreter`: `entry` ("module:callable") is called
    there as `callable(task, **kwargs)` and returns a gymnasium env. `modules` names modules of
    ours (dotted, importable here, needing nothing of policybench) that the launcher puts beside
    the server as top-level modules under their last name: an entry that interpreter cannot
    import otherwise, and the leaf modules it imports. `data` names data files of ours
    ("package:file") put beside them. `renders`: see the field."""

    entry: str
    interpreter: Interpreter
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    modules: tuple[str, ...] = ()
    data: tuple[str, ...] = ()
    # Whether an env renders through a GL context of its own, which must stay on the thread
    # that made it: in a server of several envs (--envs-per-worker), each such env then lives on
    # a thread of its own; envs that render nothing so share the server's (a thread's hand-off
    # costs more than a state-only step's round trip saves).
    renders: bool = True

    def __call__(self, task: str) -> gym.Env:
        from policybench.envserver import proxy, remote
        from policybench.envserver.interpreters import python_of
        from policybench.envserver.proxy import EnvProxy, EnvServerError

        served = remote.endpoint_in_use()  # --env-url: served by `policybench env serve`
        try:
            if served is not None:
                server = remote.RemoteEnvServer(served)
                return EnvProxy(None, self.entry, task, self.kwargs, server=server)
            script = proxy.server_script(self.modules, self.data)
            python = python_of(self.interpreter)
            pool = proxy.pool_in_use()  # a lockstep slot's: its K envs share a server
            shared = None if pool is None else pool.server_for(python, self.entry, script)
            return EnvProxy(
                python, self.entry, task, self.kwargs, script, server=shared, thread=self.renders
            )
        except EnvServerError as error:
            hint = self._import_hint(str(error), remote_side=served is not None)
            if hint is None:
                raise
            raise type(error)(f"{error}; {hint}") from error

    def _import_hint(self, message: str, remote_side: bool) -> str | None:
        """What to do when the env server's interpreter could not import the entry's module:
        it imports from its own site-packages and $PYTHONPATH alone, not from where pytest
        runs."""
        module = self.entry.partition(":")[0]
        parts = module.split(".")
        prefixes = {".".join(parts[: i + 1]) for i in range(len(parts))}
        if "ModuleNotFoundError" not in message or not any(
            f"No module named '{prefix}'" in message for prefix in prefixes
        ):
            return None
        runner = "`policybench env serve`" if remote_side else "pytest"
        where = f"{runner}'s $PYTHONPATH" if remote_side else "$PYTHONPATH"
        return (
            f"the env's interpreter imports {module} from its own site-packages and {where} "
            f"alone, not from the directory {runner} runs in: install it there, put its folder "
            f"on {where}, or name it in Isolated(modules=...)"
        )

    def render_problem(self, renderer: str | None) -> str | None:
        """rendering.render_problem asked in the interpreter the env renders in: None under
        --env-url (it renders on the serving machine) or while the interpreter is not installed
        (building the env says so)."""
        from policybench import rendering
        from policybench.envserver import remote
        from policybench.envserver.interpreters import InterpreterMissing, python_of

        if remote.endpoint_in_use() is not None:
            return None
        try:
            python = python_of(self.interpreter)
        except InterpreterMissing:
            return None
        return rendering.render_problem(renderer, python=str(python))

    def versions(self) -> dict[str, str]:
        """The distributions installed in the interpreter (normalized name -> version), the
        serving machine's under --env-url."""
        from policybench.envserver import remote
        from policybench.envserver.interpreters import installed_versions, python_of

        served = remote.endpoint_in_use()
        if served is not None:
            return remote.served_versions(served, self.entry, dict(self.kwargs))
        return installed_versions(python_of(self.interpreter))

    def packages(self, named: Sequence[str]) -> dict[str, str]:
        """For the record: the installed versions of `named` (an Eval's packages) and of the
        interpreter's declared requirements, as the interpreter has them ("not installed" for
        one it lacks, and for all while the interpreter itself is not installed or, under
        --env-url, not reached: the env's own connection then says why)."""
        from policybench.envserver.interpreters import InterpreterMissing, distribution
        from policybench.envserver.proxy import EnvServerError

        wanted = dict.fromkeys([*named, *map(distribution, self.interpreter.requirements)])
        try:
            installed = self.versions()
        except (InterpreterMissing, EnvServerError):  # not here, or --env-url's server refused
            installed = {}
        return {name: installed.get(distribution(name), NOT_INSTALLED) for name in wanted}


ENV_PYTHON_VARIABLE = "POLICYBENCH_ENV_PYTHON"
NOT_INSTALLED = "not installed"  # a package's version where it is not installed


def isolable(
    make: Callable[..., gym.Env], renders: bool = True, **kwargs: Any
) -> Callable[[str], gym.Env]:
    """A suite's `make_env`, `make(task, **kwargs)`: in this process, or, when
    $POLICYBENCH_ENV_PYTHON names a Python, in that interpreter behind an env server (`make`'s
    module, the suite's own, must import there; `renders`: Isolated's)."""
    python = os.environ.get(ENV_PYTHON_VARIABLE)
    if not python:
        return functools.partial(make, **kwargs)
    entry = f"{make.__module__}:{make.__qualname__}"
    return Isolated(entry, Interpreter("env-python", python=python), kwargs, renders=renders)


def builds_nothing(url: str | None, evals: Iterable[Eval]) -> str | None:
    """What to say when none of `evals` is isolated: --env-url `url` builds none of their envs,
    whatever listens there. None: one of them is, there is none, or no `url`."""
    named = {e.name: e for e in evals}
    if url is None or not named or any(isinstance(e.make_env, Isolated) for e in named.values()):
        return None
    return (
        f"--env-url {url} builds no env of this run: none of its Evals "
        f"({', '.join(sorted(named))}) runs its env in an interpreter of its own, so each runs "
        "here (MetaWorld and PushT run isolated with $POLICYBENCH_ENV_PYTHON set)"
    )


def say_builds_nothing(command: str, url: str | None, evals: Iterable[Eval]) -> None:
    """`builds_nothing`'s line on stderr, for `policybench command`."""
    said = builds_nothing(url, evals)
    if said is not None:
        print(f"policybench {command}: {said}", file=sys.stderr, flush=True)
