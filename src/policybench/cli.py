"""The `policybench` command. Each subcommand lives beside what it drives and registers itself
here with an `add_parser(subparsers)` function that sets `func` on its parser."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from policybench.policy import serve_command
from policybench.policy.registry import known_policies
from policybench.report import cli as report_command

SUITE_MODULES = (
    "policybench.suites.metaworld",
    "policybench.suites.pusht",
    "policybench.suites.aloha",
    "policybench.suites.libero",
)


def add_list_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("list", help="list the built-in suites' Evals and the policies")
    parser.set_defaults(func=run_list)


def run_list(args: argparse.Namespace) -> int:
    import importlib

    from policybench.spec import Eval

    print("policies:", ", ".join(known_policies()))
    print("evals:")
    for module_name in SUITE_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, Eval):
                tasks = {rollout.scene.task for rollout in value.rollouts(1, 0)}
                print(f"  {value.name:<24} {len(tasks):>3} tasks  ({module_name}, [{value.extra}])")
    return 0


COMMANDS = (add_list_parser, serve_command.add_parser, report_command.add_parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="policybench", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add_parser in COMMANDS:
        add_parser(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
