"""The `policybench` command. Each subcommand lives beside what it drives and registers itself
here with an `add_parser(subparsers)` function that sets `func` on its parser."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from policybench import latency_command
from policybench import probe as probe_command
from policybench.envserver import command as env_command
from policybench.perturbation import NOISE_AXES, axes_of
from policybench.registry import known_policies
from policybench.report import cli as report_command
from policybench.report import history_command, leaderboard_command
from policybench.report import plan as plan_command
from policybench.run.files import Refused
from policybench.scoring import command as score_command
from policybench.serve import command as serve_command
from policybench.suites import eval_named, registered_evals, suite_modules
from policybench.text import listed


def add_list_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list", help="list the registered suites' Evals and the policies"
    )
    parser.add_argument(
        "--eval",
        action="append",
        default=[],
        metavar="EVAL",
        help="show this Eval's tasks with their instructions (a registered name or "
        "module:attribute; repeatable), as `-k` selects them",
    )
    parser.set_defaults(func=run_list)


def run_list(args: argparse.Namespace) -> int:
    from policybench.perturbation import axes_of

    if args.eval:
        return list_tasks(args.eval)
    print("policies:", ", ".join(known_policies()), "(and lerobot:PATH, module:attr)")
    print("suites:", ", ".join(f"{name} ({module})" for name, module in suite_modules().items()))
    print("evals:")
    interpreters: dict[str, list[str]] = {}  # an interpreter's name -> the Evals it runs
    statuses: dict[str, str] = {}
    evals = registered_evals().values()
    width = max((len(value.name) for value in evals), default=0)
    for value in evals:
        extra = f"  ([{value.extra}])" if value.extra else ""  # an isolated Eval needs none
        count = len(value.tasks)
        beyond = [name for name in axes_of(value) if name not in NOISE_AXES]  # every Eval's
        own = f"  axes +{','.join(beyond)}" if beyond else ""
        expert = "  expert" if value.scripted is not None else ""
        print(f"  {value.name:<{width}} {count:>3} task{'s' * (count != 1)}{expert}{extra}{own}")
        interpreter = env_command.isolated_interpreter(value)
        if interpreter is not None:
            interpreters.setdefault(interpreter.name, []).append(value.name)
            statuses[interpreter.name] = env_command.status(interpreter)
    if interpreters:
        print("interpreters (the isolated Evals' own):")
    for name, evals in interpreters.items():
        print(f"  interpreter {name} (for {listed(evals)}): {statuses[name]}")
    noise = ", ".join(map(str, NOISE_AXES.values()))
    print(f"perturbation axes of every Eval (--perturb AXIS=LEVELS): {noise}")
    print(
        "expert: the Eval has a built-in expert, --policy=scripted (the default); in Python, "
        "`eval.scripted()` is its Model (e.g. policybench.suites.metaworld.MT10_STATE.scripted())"
    )
    print("an Eval's tasks and perturbation axes: policybench list --eval NAME")
    return 0


def list_tasks(names: Sequence[str]) -> int:
    """Each named Eval's tasks and instructions, one a line."""
    for name in names:
        try:
            value = eval_named(name)
        except LookupError as error:
            print(f"policybench list: {error}", file=sys.stderr)
            return 1
        tasks = value.tasks
        expert = "a built-in expert (--policy=scripted; eval.scripted() in Python)"
        has = expert if value.scripted is not None else "no built-in expert"
        print(f"{value.name}: {len(tasks)} task{'s' * (len(tasks) != 1)}; {has}")
        width = max(map(len, tasks), default=0)
        for task, instruction in tasks.items():
            print(f"  {task:<{width}}  {instruction}")
        print("perturbation axes (--perturb AXIS=LEVELS, levels in these ranges):")
        for axis in axes_of(value).values():
            print(f"  {axis}: {axis.doc}")
        interpreter = env_command.isolated_interpreter(value)
        if interpreter is not None:
            print(f"  interpreter {interpreter.name}: {env_command.status(interpreter)}")
    return 0


def add_published_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "published", help="list the results papers and model cards published for our Evals"
    )
    parser.add_argument(
        "evals", nargs="*", metavar="EVAL", help="only those published for these Evals"
    )
    parser.set_defaults(func=run_published)


def run_published(args: argparse.Namespace) -> int:
    from policybench.report.published import listing

    unknown = [name for name in args.evals if name not in registered_evals()]
    if unknown:
        print(f"policybench published: no Eval named {listed(unknown)}; `policybench list` "
              "names them", file=sys.stderr)  # fmt: skip
        return 2
    lines = listing(args.evals)
    if not lines:
        print(f"no published results are known for {listed(args.evals)}")
        return 0
    print("\n".join(lines))
    print("compare a run with one: pytest ... --published NAME (a checkpoint that names its "
          "entry is compared without it)")  # fmt: skip
    return 0


COMMANDS = {  # each command's name, and what adds its parser
    "list": add_list_parser,
    "published": add_published_parser,
    "env": env_command.add_parser,
    "serve": serve_command.add_parser,
    "report": report_command.add_parser,
    "history": history_command.add_parser,
    "leaderboard": leaderboard_command.add_parser,
    "plan": plan_command.add_parser,
    "probe": probe_command.add_parser,
    "latency": latency_command.add_parser,
    "score": score_command.add_parser,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="policybench", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    # A command named: only its parser is made (making all eleven costs a history call a
    # tenth of its time); anything else (no command, --help, a typo) gets them all.
    named = argv[0] if argv and argv[0] in COMMANDS else None
    for name, add_parser in COMMANDS.items():
        if named in (None, name):
            add_parser(subparsers)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Refused as refused:  # a link or a special file where a file is written or read
        print(f"policybench {args.command}: {refused}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
