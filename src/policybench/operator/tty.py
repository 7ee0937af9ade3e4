"""The terminal operator: asks each open request of the run's desk on the controlling terminal
(/dev/tty, not pytest's captured stdin), one at a time, from a thread of the run's controller."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import IO

from policybench import keys
from policybench.operator.base import Ask, OperatorError, Request
from policybench.operator.desk import Desk
from policybench.run.verdicts import FAILURE, SUCCESS, UNSURE

TERMINAL = "/dev/tty"
CHOICES = {"s": SUCCESS, "f": FAILURE, "u": UNSURE}


@dataclass(frozen=True)
class Terminal:
    """The controlling terminal: a descriptor read a line at a time (the terminal's own line
    editing, no buffer whose lock a read in progress holds), and a file written to."""

    reader: int
    writer: IO[str]

    def readline(self) -> str:
        return os.read(self.reader, 4096).decode(errors="replace")


def open_terminal() -> Terminal:
    """The controlling terminal; OperatorError when the run has none."""
    try:
        return Terminal(os.open(TERMINAL, os.O_RDONLY), open(TERMINAL, "w", buffering=1))
    except OSError as error:
        raise OperatorError(
            f"--operator tty asks on the controlling terminal, and this run has none ({error}); "
            "run pytest from a terminal, or use --operator web to answer in a browser"
        ) from None


class TerminalPrompter:
    """Answers the desk's requests on `terminal` until closed."""

    def __init__(self, desk: Desk, terminal: Terminal) -> None:
        self._desk, self._terminal = desk, terminal
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="operator-tty", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Asks nothing more; the terminal stays open for a prompt's read in progress (a run
        interrupted while asking), and the process's end closes it."""
        self._closed.set()

    def _serve(self) -> None:
        seen = 0
        while not self._closed.is_set():
            found = self._desk.next_pending(seen, timeout_s=0.5)
            if found is None:
                continue
            seen, request = found
            try:
                self._desk.answer(seen, self._ask(request))
            except (OSError, ValueError):  # the terminal closed as the run ended
                return

    def _ask(self, request: Request) -> dict[str, str]:
        say = self._say
        say(f"\n[operator] {request.eval} {request.rollout}")
        say(f"[operator] instruction: {request.instruction}")
        if request.ask is Ask.STAGE:
            for name, value in request.fields.items():
                say(f"[operator]   stage {name} = {value}")
            self._read("[operator] press Enter once the scene is staged: ")
            return {}
        while True:
            choice = self._read("[operator] verdict: (s)uccess, (f)ailure, (u)nsure? ").lower()
            if choice[:1] in CHOICES:
                break
            say(f"[operator] answer s, f or u (got {choice!r})")
        note = self._read("[operator] note (Enter for none): ")
        return {keys.VERDICT: CHOICES[choice[:1]], keys.VERDICT_NOTE: note}

    def _say(self, line: str) -> None:
        self._terminal.writer.write(line + "\n")
        self._terminal.writer.flush()

    def _read(self, prompt: str) -> str:
        self._terminal.writer.write(prompt)
        self._terminal.writer.flush()
        line = self._terminal.readline()
        if not line:
            raise OSError("the terminal closed")
        return line.strip()
