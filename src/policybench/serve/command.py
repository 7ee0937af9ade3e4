"""`policybench serve`: serves a local policy (scripted, random, lerobot:PATH, module:attr, an
installed name) over openpi's protocol, for the Evals its clients name, batching requests
across connections."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from policybench import envserver
from policybench.envserver import remote
from policybench.lifetime import die_with_starter
from policybench.options import (
    API_KEY_VARIABLE,
    POLICY_DEVICE,
    SEED,
    declare_env_url,
    key_refusal,
)
from policybench.registry import (
    OPENPI,
    PolicySettings,
    check_policy_name,
    known_policies,
    served_model,
)
from policybench.serve import event_loop
from policybench.serve.server import PolicyServer, ServedModel, ServerConfig
from policybench.serve.wire import DEFAULT_MAX_FRAME_BYTES
from policybench.spec import Eval
from policybench.suites import eval_in, eval_named, registered_evals, suite_modules
from policybench.tls import add_tls_options, server_context

READY = "policybench serve: serving"  # the line a starter waits for; the URL follows
MODEL_HUNG = 75  # the exit status once a model call ran past --call-timeout (EX_TEMPFAIL)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve a policy over openpi's websocket protocol, batching requests"
    )
    parser.add_argument("--policy", default="scripted", help="policy to serve (default scripted)")
    parser.add_argument(
        "--eval",
        action="append",
        default=[],
        metavar="EVAL",
        help="an Eval to serve: a registered name (see `policybench list`) or module:attribute; "
        "repeatable. policybench clients name their Eval; openpi clients get the only one given. "
        "Default: any registered Eval a client names",
    )
    parser.add_argument(
        "--evals-from-clients",
        action="store_true",
        help="also serve Evals that clients name as module:attribute, from registered suites' "
        "modules and the folders given with --eval-path (needs an API key)",
    )
    parser.add_argument(
        "--eval-path",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="a folder whose modules clients may name Evals from, with --evals-from-clients; "
        "repeatable (nothing else is imported for a client, the working directory neither)",
    )
    _serving_options(parser)
    SEED.declare(parser.add_argument)
    POLICY_DEVICE.declare(parser.add_argument)
    declare_env_url(parser.add_argument)  # where a policy that needs an action space reads it
    parser.set_defaults(func=run)


def _serving_options(parser: argparse.ArgumentParser) -> None:
    """Where `serve` listens, how it batches, and what it allows its clients."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    parser.add_argument("--max-batch", type=int, default=8, help="largest batch (default 8)")
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=2.0,
        help="how long a batch waits for more requests after its first, at most (default 2 ms; "
        "never longer than the fixed part of a model call, fitted to the calls seen)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_VARIABLE),
        help=f"require 'Authorization: Api-Key <key>' (default: ${API_KEY_VARIABLE}, else none)",
    )
    parser.add_argument(
        "--max-frame-mb",
        type=float,
        default=DEFAULT_MAX_FRAME_BYTES / 2**20,
        help="largest frame accepted, in MiB (default 64)",
    )
    parser.add_argument(
        "--call-timeout",
        type=float,
        default=0.0,
        metavar="S",
        help="answer the requests of a model call still running after S seconds with an error "
        f"naming their task, then exit with status {MODEL_HUNG} (the model's thread is stuck), "
        "for whoever started the server to restart it (default 0: no limit)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=256,
        help="connections served at once; more are answered 503, which policybench's clients "
        "wait out (default 256)",
    )
    add_tls_options(parser, "wss")


def run(args: argparse.Namespace) -> int:
    die_with_starter()  # a server a run started ends with the run, before it loads anything
    servable = [name for name in known_policies() if name != OPENPI]
    servable += ["lerobot:PATH", "module:attr"]
    try:
        check_policy_name(args.policy, Path.cwd())
    except ValueError as error:
        raise SystemExit(f"cannot serve policy {args.policy!r} ({error})") from None
    if args.policy == OPENPI:
        raise SystemExit(f"cannot serve policy {args.policy!r}; servable: {', '.join(servable)}")
    if args.max_batch < 1 or args.max_wait_ms < 0 or args.call_timeout < 0:
        raise SystemExit("--max-batch must be >= 1, --max-wait-ms and --call-timeout >= 0")
    if args.max_connections < 1:
        raise SystemExit(f"--max-connections must be >= 1, got {args.max_connections}")
    refusal = key_refusal(args.api_key, args.host, "could ask its model for anything")
    if refusal is None and args.evals_from_clients and not args.api_key:
        refusal = (
            "--evals-from-clients imports modules that clients name: it needs an API key "
            f"(--api-key or ${API_KEY_VARIABLE})"
        )
    if refusal is not None:
        raise SystemExit(f"policybench serve: {refusal}")
    try:
        tls = server_context(args.tls_cert, args.tls_key)
    except ValueError as error:
        raise SystemExit(f"policybench serve: {error}") from None
    try:
        evals = [eval_named(name) for name in args.eval]
    except LookupError as error:
        raise SystemExit(f"policybench serve: --eval: {error}") from None
    models = EvalModels(
        args.policy,
        PolicySettings(seed=args.seed, device=args.policy_device),
        evals,
        args.eval_path if args.evals_from_clients else None,
    )
    config = ServerConfig(
        host=args.host,
        port=args.port,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        api_key=args.api_key or None,
        max_frame_bytes=round(args.max_frame_mb * 2**20),
        call_timeout_s=args.call_timeout or None,
        max_connections=args.max_connections,
        tls=tls,
    )
    envserver.say_builds_nothing("serve", args.env_url, evals)
    with (
        remote.given(args.env_url, args.env_api_key),
        contextlib.suppress(KeyboardInterrupt),  # Ctrl-C is how a user stops a server
    ):
        status = event_loop.run(_serve(PolicyServer(models, config, args.policy)))
        if status == MODEL_HUNG:  # its model's thread is stuck in a call: no orderly exit
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(MODEL_HUNG)
        return status
    return 0


async def _serve(server: PolicyServer) -> int:
    """Serves until stopped (0) or until a model call hangs (MODEL_HUNG)."""
    listening = await server.start()
    host, port = listening.sockets[0].getsockname()[:2]
    config = server.config
    web = "s" if config.tls else ""
    print(
        f"{READY} policy {server.name!r} on ws{web}://{host}:{port} (health: "
        f"http{web}://{host}:{port}"
        f"/healthz; batches of up to {config.max_batch}, {config.max_wait_ms:g} ms window)",
        flush=True,
    )
    serving = asyncio.ensure_future(listening.serve_forever())
    try:
        await asyncio.wait((serving, server.hung()), return_when=asyncio.FIRST_COMPLETED)
        if not server.hung().done():
            return 0
        print(
            f"policybench serve: {server.hung().result()}; exiting with status {MODEL_HUNG}, as "
            "its model's thread cannot be stopped",
            flush=True,
        )
        return MODEL_HUNG
    finally:
        serving.cancel()
        await server.close()


class EvalModels:
    """The served model of each Eval a client names, built on first use and kept warm."""

    def __init__(
        self,
        policy: str,
        settings: PolicySettings,
        evals: Sequence[Eval],
        client_paths: Sequence[Path] | None = None,
    ) -> None:
        self.policy = policy
        self.settings = settings
        self.evals = {eval.name: eval for eval in evals}
        self.client_paths = client_paths  # None: no Eval is imported for a client
        self._served: dict[str, ServedModel] = {}

    def __call__(self, name: str | None, ref: str | None) -> ServedModel:
        eval = self.resolve(name, ref)
        served = self._served.get(eval.name)
        if served is None:
            space = lambda: action_space_of(eval)  # noqa: E731
            model, codec = served_model(self.policy, eval, self.settings, space)
            served = ServedModel(model, eval.control_hz, eval.codecs, codec)
            self._served[eval.name] = served
        return served

    def resolve(self, name: str | None, ref: str | None) -> Eval:
        if name is None and ref is None:
            if len(self.evals) == 1:
                return next(iter(self.evals.values()))
            raise LookupError(
                f"the client named no Eval and this server serves {len(self.evals)} "
                "(start it with one --eval for openpi clients, or send the X-Policybench-Eval "
                "header)"
            )
        if name in self.evals:
            return self.evals[name]
        if not self.evals and name in registered_evals():
            return registered_evals()[name]
        if ref is not None and self.client_paths is not None:
            return client_eval(ref, self.client_paths)
        served = sorted(self.evals) or sorted(registered_evals())
        asked = repr(name) if ref is None else f"{name!r} ({ref})"
        raise LookupError(
            f"this server does not serve eval {asked}; it serves {served}: "
            f"start a server with --eval {ref or name} for it (or, in a pytest run, run the "
            "policy in each worker with --policy-sharing=per-worker)"
        )


def client_eval(ref: str, paths: Sequence[Path]) -> Eval:
    """The Eval a client names as `module:attribute`, imported only from a registered suite's
    module or a module found in one of `paths`: nothing else is imported for a client."""
    module_name, _, attribute = ref.partition(":")
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise LookupError(f"{ref!r:.200} names no module:attribute")
    if module_name in set(suite_modules().values()):
        return eval_in(importlib.import_module(module_name), attribute, ref)
    _load_from(module_name.split(".")[0], paths)
    module = importlib.import_module(module_name)  # a submodule: from its package's folder
    if not _within(getattr(module, "__file__", None), paths):
        raise LookupError(f"{module_name!r} resolves to {module.__file__}, outside --eval-path")
    return eval_in(module, attribute, ref)


def _load_from(top: str, paths: Sequence[Path]) -> None:
    """Imports the top-level module `top` from its file in one of `paths` (by location, not
    from sys.path, where the working directory may be); LookupError when no such file is there,
    or a module of that name from elsewhere is imported already."""
    spec = importlib.machinery.PathFinder.find_spec(top, [str(path) for path in paths])
    if spec is None or spec.loader is None or not _within(spec.origin, paths):
        folders = ", ".join(map(str, paths)) or "none given"
        raise LookupError(
            f"this server imports Evals for clients from registered suites and the folders of "
            f"--eval-path ({folders}); {top!r} is in none of them"
        )
    loaded = sys.modules.get(top)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", None) or "").resolve() != Path(spec.origin).resolve():
            raise LookupError(
                f"a module {top!r} from {getattr(loaded, '__file__', 'elsewhere')} is imported "
                "already; rename the one in --eval-path"
            )
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(top, None)
        raise


def _within(origin: str | None, paths: Sequence[Path]) -> bool:
    """Whether a module's file lies in one of `paths` (a namespace package has none: no)."""
    if origin is None or not Path(origin).is_file():
        return False
    found = Path(origin).resolve()
    return any(found.is_relative_to(path.resolve()) for path in paths)


def action_space_of(eval: Eval):
    """The action space of `eval`'s env, read from one env of its first task (then closed)."""
    task = eval.rollouts(1, 0)[0].scene.task
    env = eval.make_env(task)
    try:
        return env.action_space
    finally:
        env.close()
