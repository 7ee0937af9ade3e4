"""Attended rollouts: `--operator tty|web[:PORT]` sets up the run's operator desk in the
controller (every worker asks it), and `attend` runs an attended Eval's rollout between its
operator's staging and verdict, the watchdog's clock and the sim clock standing still meanwhile.

Workers ask the controller: a terminal prompt would have several workers asking at once on one
terminal, and a web page would need a port per worker; one desk asks one thing at a time."""

from __future__ import annotations

import dataclasses
import functools
import getpass
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from policybench import keys
from policybench.operator.base import Ask, Operator, OperatorError, Request
from policybench.operator.desk import Desk, DeskClient, DeskServer
from policybench.operator.tty import TerminalPrompter, open_terminal
from policybench.pytest_plugin.collection import MARKER, Planned
from policybench.pytest_plugin.rundir import run_dir_of
from policybench.pytest_plugin.watchdog import not_counted
from policybench.pytest_plugin.workers import from_controller, hand_to_workers, is_worker
from policybench.record.episode import Episode
from policybench.run.verdicts import append_verdict
from policybench.spec import Eval

TTY, WEB = "tty", "web"
DESK_URL = "operator_desk"  # what the controller hands its workers: the desk's URL
SETUP = pytest.StashKey["OperatorSetup"]()
Attempts = tuple[Episode, list[str]]  # a rollout's Episode and why its earlier attempts ended


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--operator",
        default=None,
        metavar="tty|web[:PORT]",
        help="who stages (and judges) the rollouts of attended Evals: `tty` prompts on this "
        "terminal, `web` serves a page on 127.0.0.1 (PORT, default any free one) that shows "
        "the scene to stage and takes the verdict; an attended Eval needs one",
    )
    group.addoption(
        "--operator-name",
        default=None,
        metavar="NAME",
        help="the operator's name, recorded with each verdict (default: your login name)",
    )


@dataclass(frozen=True)
class OperatorChoice:
    kind: str  # TTY or WEB
    port: int = 0


def parse_operator(given: str) -> OperatorChoice:
    """`tty`, `web` or `web:PORT`, or a UsageError saying so."""
    kind, _, port = given.partition(":")
    if kind == TTY and not port:
        return OperatorChoice(TTY)
    if kind == WEB and (not port or (port.isdigit() and int(port) < 65536)):
        return OperatorChoice(WEB, int(port or 0))
    raise pytest.UsageError(
        f"--operator takes tty, web or web:PORT (a port number, 0 for any free one), got {given!r}"
    )


@dataclass(frozen=True)
class OperatorSetup:
    """The controller's desk, how it is answered and where: shown in the run's header."""

    choice: OperatorChoice
    name: str
    url: str

    def header(self) -> str:
        if self.choice.kind == TTY:
            return f"operator: {self.name}, asked on this terminal"
        return f"operator: {self.name}, asked on the page {self.url} (open it in a browser)"


def pytest_configure(config: pytest.Config) -> None:
    given = config.getoption("operator", None)
    if is_worker(config) or given is None:
        return
    choice = parse_operator(given)
    name = config.getoption("operator_name") or getpass.getuser()
    try:
        terminal = open_terminal() if choice.kind == TTY else None
        run_dir = run_dir_of(config)
        desk = Desk(name, functools.partial(append_verdict, run_dir))
        server = DeskServer(desk, choice.port, run_dir)
    except OperatorError as error:
        raise pytest.UsageError(str(error)) from None
    config.add_cleanup(server.close)
    if terminal is not None:
        config.add_cleanup(TerminalPrompter(desk, terminal).close)
    config.stash[SETUP] = OperatorSetup(choice, name, server.url)
    hand_to_workers(config, DESK_URL, server.url)


def pytest_report_header(config: pytest.Config) -> list[str]:
    setup = config.stash.get(SETUP, None)
    return [] if setup is None else [setup.header()]


def operator_of(config: pytest.Config) -> Operator | None:
    """The run's operator, as this process asks it; None without --operator."""
    url = from_controller(config, DESK_URL) if is_worker(config) else None
    if url is None and SETUP in config.stash:
        url = config.stash[SETUP].url
    return None if url is None else DeskClient(url)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Refuses attended Evals in a run without an operator, as they are collected (in every
    worker too, whose collection error the controller shows): a run that would wait on nobody."""
    marker = metafunc.definition.get_closest_marker(MARKER)
    attended = [
        repr(e.name) for e in (marker.args if marker else ()) if isinstance(e, Eval) and e.attended
    ]
    if attended and operator_of(metafunc.config) is None:
        pytest.fail(
            f"the Eval {', '.join(attended)} of {metafunc.definition.nodeid} is attended: a person "
            "stages each rollout's scene (and may judge it), and this run has no operator; give "
            "--operator tty (asked on this terminal) or --operator web[:PORT] (a page on "
            "127.0.0.1), or run without this module",
            pytrace=False,
        )


def is_attended(planned: Planned) -> bool:
    return planned.eval.attended is not None


def attend(
    config: pytest.Config, planned: Planned, nodeid: str, run: Callable[[], Attempts]
) -> tuple[Attempts, dict[str, Any]]:
    """`run()` (the rollout's attempts), between the operator's
    staging of its scene and, where the Eval is judged, their verdict on a rollout that did not
    end in error; and what the rollout's record adds: the staged fields, the verdict, the wall
    seconds spent waiting on the operator. A self-driven Eval's rollout just runs."""
    attended = planned.eval.attended
    if attended is None:
        return run(), {}
    operator = operator_of(config)
    if operator is None:  # collection refuses this; a test calling the harness directly may not
        raise OperatorError(f"{planned.eval.name} is attended and the run has no --operator")
    rollout = planned.rollout
    staging = Request(
        Ask.STAGE, planned.eval.name, nodeid, rollout.instruction, attended.staging(rollout.scene)
    )
    waited = time.monotonic()
    with not_counted():
        operator.stage(staging)
    waited_s = time.monotonic() - waited
    done = run()
    added: dict[str, Any] = {keys.STAGED: dict(staging.fields)}
    episode = done[0]
    if attended.judged and not episode.outcome.is_error:
        waited = time.monotonic()
        with not_counted():
            verdict = operator.judge(dataclasses.replace(staging, ask=Ask.JUDGE))
        waited_s += time.monotonic() - waited
        added[keys.OPERATOR_VERDICT] = verdict.as_json()
    added[keys.OPERATOR_WAIT_S] = round(waited_s, 3)
    return done, added
