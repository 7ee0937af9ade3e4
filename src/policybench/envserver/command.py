"""`policybench env install NAME` and `policybench env serve EVAL --port P`, and the line
`policybench list` shows for an isolated Eval: where its interpreter is, or the command that
builds it."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from policybench.envserver import Interpreter, Isolated
from policybench.envserver.interpreters import (
    InterpreterBuildFailed,
    InterpreterMissing,
    full_requirements,
    install,
    install_command,
    override_variable,
    python_of,
)
from policybench.lifetime import die_with_starter
from policybench.options import API_KEY_VARIABLE, ENV_TLS_SCHEME, key_refusal
from policybench.spec import Eval
from policybench.tls import add_tls_options, server_context

if TYPE_CHECKING:
    from policybench.envserver.relay import Served

MAX_CONNECTIONS = 64  # connections `env serve` serves at once, by default


def isolated_interpreter(eval: Eval) -> Interpreter | None:
    """The interpreter an Eval's env runs in, if it is isolated."""
    return eval.make_env.interpreter if isinstance(eval.make_env, Isolated) else None


def status(interpreter: Interpreter) -> str:
    """One line for `policybench list`: where it is, or the one command that installs it; for a
    Python given by its variable or `Interpreter.python`, that one, or why it cannot be used
    (installing would not help: the given one wins)."""
    try:
        return f"installed: {python_of(interpreter)}"
    except InterpreterMissing as missing:
        if given_python(interpreter):
            return f"missing: {missing}"
        return f"not installed: {install_command(interpreter)}"


def given_python(interpreter: Interpreter) -> str | None:
    """The Python the user gave for `interpreter` ($POLICYBENCH_PYTHON_<NAME>, then
    `Interpreter.python`), which runs its envs instead of a built one."""
    return os.environ.get(override_variable(interpreter)) or interpreter.python


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("env", help="the interpreters isolated envs run in")
    commands = parser.add_subparsers(dest="env_command", required=True)
    install_parser = commands.add_parser(
        "install", help="build an isolated suite's interpreter from its declared requirements"
    )
    install_parser.add_argument(
        "name",
        help="the interpreter's name as `policybench list` shows it, or module:attr naming an "
        "Eval or Interpreter",
    )
    install_parser.set_defaults(func=run_install)
    add_serve_parser(commands)


def add_serve_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve isolated Evals' envs over TCP, for runs elsewhere that give --env-url",
    )
    parser.add_argument(
        "evals",
        nargs="+",
        metavar="EVAL",
        help="an isolated Eval (its registered name, or module:attribute), or a registered suite "
        "(its isolated Evals)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True, help="port (0: any free)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_VARIABLE),
        help=f"require this key of each connection (default: ${API_KEY_VARIABLE}, else none; "
        "binding an address other than loopback needs one)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help=f"connections served at once, each with an env server of its own; more are refused "
        f"(default {MAX_CONNECTIONS})",
    )
    add_tls_options(parser, ENV_TLS_SCHEME)
    parser.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """`policybench env serve`: serves the isolated ones of the Evals named, until stopped."""
    die_with_starter()
    from policybench.envserver.relay import READY, Relay, RelayServer, log, served_of
    from policybench.gl import choose_backend

    chosen = choose_backend()  # before any env is built; its servers inherit it
    if chosen is not None:
        print(f"policybench env serve: rendering: {chosen.line}", file=sys.stderr)
    from policybench.options import ENV_SCHEME as SCHEME

    try:
        served = served_of(evals_named(args.evals))
    except (LookupError, ImportError) as error:
        print(f"policybench env serve: {error}", file=sys.stderr)
        return 1
    refusal = key_refusal(args.api_key, args.host, "could run the served envs")
    if refusal is not None:
        print(f"policybench env serve: {refusal}", file=sys.stderr)
        return 1
    if args.max_connections < 1:
        print(
            f"policybench env serve: --max-connections must be >= 1, got {args.max_connections}",
            file=sys.stderr,
        )
        return 1
    try:
        tls = server_context(args.tls_cert, args.tls_key)
    except ValueError as error:
        print(f"policybench env serve: {error}", file=sys.stderr)
        return 1
    api_key = args.api_key or None
    for missing in not_installed(served):  # its connections are refused, saying so
        log(missing)
    try:
        relay_server = RelayServer(
            Relay(served, api_key), args.host, args.port, args.max_connections, tls
        )
    except OSError as error:  # the port taken, an address not this machine's, ...
        print(
            f"policybench env serve: cannot listen on {args.host}:{args.port}: "
            f"{error.strerror or error}",
            file=sys.stderr,
        )
        return 1
    with relay_server as listening:
        host, port = listening.server_address[:2]
        names = ", ".join(s.name for s in served)
        scheme = SCHEME if tls is None else ENV_TLS_SCHEME
        print(f"{READY} {names} on {scheme}://{host}:{port}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a user stops a server
            listening.serve_forever()
    return 0


def evals_named(names: list[str]) -> list[Eval]:
    """The Evals `names` name: each an Eval (registered name or module:attribute) or a
    registered suite (its Evals)."""
    from policybench.suites import eval_named, suite_modules

    if "" not in sys.path:
        sys.path.insert(0, "")  # a module beside the user, as `python -m` finds it
    found: list[Eval] = []
    suites = suite_modules()
    for name in names:
        if name in suites:
            module = importlib.import_module(suites[name])
            found += [value for value in vars(module).values() if isinstance(value, Eval)]
        else:
            found.append(eval_named(name))
    return found


def run_install(args: argparse.Namespace) -> int:
    try:
        interpreter = interpreter_named(args.name)
    except LookupError as error:
        print(f"policybench env install: {error}", file=sys.stderr)
        return 1
    try:
        python, built = install(interpreter, building=said_building)
    except InterpreterBuildFailed as error:
        print(f"policybench env install: {error}", file=sys.stderr)
        print(
            f"policybench env install: retry with `policybench env install {args.name}` once "
            "that is fixed (what was built is removed; nothing half-built is used)",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:  # the build's directory is removed: the next install starts anew
        print(
            f"policybench env install: interrupted; what it had built of {interpreter.name} "
            "is removed",
            file=sys.stderr,
        )
        return 130
    print(f"{'built' if built else 'already installed'}: {interpreter.name} at {python}")
    given = given_python(interpreter)
    if given:  # runs use that one, not the one just installed
        source = override_variable(interpreter)
        source = f"${source}" if os.environ.get(source) else "Interpreter.python"
        print(f"note: {source} gives {given}, which runs {interpreter.name}'s envs instead")
    return 0


def said_building(interpreter: Interpreter, where: Path) -> None:
    """Says on stderr what a build that takes seconds to minutes is doing meanwhile."""
    requirements = " ".join(full_requirements(interpreter))
    print(f"building {interpreter.name} in {where}: {requirements}", file=sys.stderr, flush=True)


def interpreter_named(name: str) -> Interpreter:
    if ":" in name:
        from policybench.suites import module_beside_user

        module_name, _, attribute = name.partition(":")
        value = getattr(module_beside_user(module_name, name), attribute, None)
        value = isolated_interpreter(value) if isinstance(value, Eval) else value
        if not isinstance(value, Interpreter):
            raise LookupError(f"{name} is neither an isolated Eval nor an Interpreter")
        return value
    known = registered_interpreters()
    if name not in known:
        raise LookupError(
            f"no registered isolated suite declares an interpreter named {name!r}; known: "
            f"{sorted(known) or 'none'} (or give module:attr of an Eval or Interpreter)"
        )
    return known[name]


def registered_interpreters() -> dict[str, Interpreter]:
    """The interpreters of the registered suites' isolated Evals, by name."""
    from policybench.suites import registered_evals

    found: dict[str, Interpreter] = {}
    for value in registered_evals().values():
        interpreter = isolated_interpreter(value)
        if interpreter is not None:
            found.setdefault(interpreter.name, interpreter)
    return found


def not_installed(served: list[Served]) -> list[str]:
    """Why the served Evals whose interpreter is missing here cannot be served yet: a line per
    reason, naming the Evals it holds for (a suite's Evals share one interpreter)."""
    missing: dict[str, list[str]] = {}
    for each in served:
        try:
            python_of(each.make_env.interpreter)
        except InterpreterMissing as why:
            missing.setdefault(str(why), []).append(each.name)
    return [f"{', '.join(names)}: {why}" for why, names in missing.items()]
