"""The run's operator desk: one small HTTP service on loopback, in the run's controller, where
every process's rollouts post what they ask a person (`DeskClient`, an Operator) and wait for the
answer; the web page it serves, or the terminal prompt (`tty`), answers them one at a time."""

from __future__ import annotations

import itertools
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.operator.base import Ask, OperatorError, Request
from policybench.pages.server import HttpError, Response
from policybench.pages.server import Request as PageRequest
from policybench.run.verdicts import BadVerdict, Verdict

PAGE = "operator.html.j2"
POLL_S = 20.0  # how long one long poll for an answer waits before asking again
MAX_OPEN = 1024  # open requests at once: each of a run's processes has at most one


class Desk:
    """The open requests, in the order they came, and their answers (thread-safe); each verdict
    given is passed to `keep` (appended to the run's verdicts.jsonl) before it is answered."""

    def __init__(self, operator_name: str, keep: Callable[[Verdict], None]) -> None:
        self.operator_name = operator_name
        self._keep = keep
        self._changed = threading.Condition()
        self._ids = itertools.count(1)
        self._open: dict[int, Request] = {}
        self._answers: dict[int, dict[str, Any]] = {}

    def post(self, request: Request) -> int:
        with self._changed:
            if len(self._open) >= MAX_OPEN:
                raise OperatorError(
                    f"the desk holds {MAX_OPEN} open requests, its most: answer some first"
                )
            number = next(self._ids)
            self._open[number] = request
            self._changed.notify_all()
            return number

    def pending(self) -> list[tuple[int, Request]]:
        with self._changed:
            return list(self._open.items())

    def next_pending(self, after: int, timeout_s: float) -> tuple[int, Request] | None:
        """The oldest open request numbered above `after`, waiting up to `timeout_s` for one."""
        with self._changed:
            self._changed.wait_for(lambda: any(n > after for n in self._open), timeout_s)
            return next(((n, r) for n, r in self._open.items() if n > after), None)

    def answer(self, number: int, answer: Mapping[str, Any]) -> None:
        """Closes request `number` with `answer` (checked against what it asked)."""
        with self._changed:
            request = self._open.get(number)
            if request is None:
                raise OperatorError(
                    f"no open request {number}: it was answered already, or never asked "
                    f"(open: {sorted(self._open)})"
                )
            if request.ask is Ask.STAGE:
                checked: dict[str, Any] = {keys.STAGED: True}
            else:
                try:
                    verdict = Verdict.now(
                        request.rollout,
                        str(answer.get(keys.VERDICT, "")).strip().lower(),
                        str(answer.get(keys.SCORER) or self.operator_name),
                        str(answer.get(keys.VERDICT_NOTE, "")).strip(),
                    )
                except BadVerdict as error:
                    raise OperatorError(str(error)) from None
                self._keep(verdict)
                checked = verdict.as_json()
            del self._open[number]
            self._answers[number] = checked
            self._changed.notify_all()

    def wait(self, number: int, timeout_s: float) -> dict[str, Any] | None:
        """The answer to request `number` (taken: asked once), or None if none came in time."""
        with self._changed:
            if number not in self._open and number not in self._answers:
                raise OperatorError(f"no request {number} was asked at this desk")
            self._changed.wait_for(lambda: number in self._answers, timeout_s)
            return self._answers.pop(number, None)


class DeskServer:
    """Serves a Desk on loopback with the page where a person answers it (on the pages' server
    and shell, as `policybench score`'s), and its JSON API for the run's processes."""

    def __init__(self, desk: Desk, port: int, run_dir: Path) -> None:
        from policybench.pages.server import PageServer, page_templates

        self.desk = desk
        page = (
            page_templates("policybench.operator")
            .get_template(PAGE)
            .render(
                heading="Attended rollouts",
                run_id=run_dir.name,
                operator=desk.operator_name,
                fields={
                    name: getattr(keys, name)
                    for name in ("VERDICT", "VERDICT_NOTE", "SCORER", "VERDICT_ROLLOUT")
                },
            )
        )
        routes = {
            ("GET", "/"): lambda request: Response.of_html(page),
            ("GET", "/api/pending"): self._pending,
            ("POST", "/api/requests"): self._post,
            ("GET", "/api/answer"): self._answer_of,
            ("POST", "/api/answer"): self._answer,
        }
        try:
            self._server = PageServer(routes, run_dir, port=port).start()
        except OSError as error:
            raise OperatorError(
                f"the operator page cannot listen on port {port} ({error}); choose another "
                "port with --operator web:PORT, or web:0 for any free one"
            ) from None

    @property
    def url(self) -> str:
        return self._server.url

    def close(self) -> None:
        self._server.stop()

    def _pending(self, request: PageRequest) -> Response:
        shown = [{"id": n, **r.as_json()} for n, r in self.desk.pending()]
        return Response.of_json({"operator": self.desk.operator_name, "pending": shown})

    def _post(self, request: PageRequest) -> Response:
        try:
            return Response.of_json({"id": self.desk.post(Request.from_json(request.json()))})
        except OperatorError as error:
            raise HttpError(HTTPStatus.BAD_REQUEST, str(error)) from None

    def _answer_of(self, request: PageRequest) -> Response:
        try:
            answer = self.desk.wait(_number(request), POLL_S if "wait" in request.query else 0.0)
        except OperatorError as error:
            raise HttpError(HTTPStatus.NOT_FOUND, str(error)) from None
        return (
            Response(b"", status=HTTPStatus.NO_CONTENT)
            if answer is None
            else (Response.of_json(answer))
        )

    def _answer(self, request: PageRequest) -> Response:
        try:
            self.desk.answer(_number(request), request.json())
        except OperatorError as error:
            raise HttpError(HTTPStatus.BAD_REQUEST, str(error)) from None
        return Response.of_json({"answered": True})


def _number(request: PageRequest) -> int:
    given = request.query.get("id", "")
    if not given.isdigit():
        raise HttpError(
            HTTPStatus.BAD_REQUEST, f"expected ?id=N (a request's number), got {given!r}"
        )
    return int(given)


class DeskClient:
    """An Operator reached through the run's desk at `url`: what every process's harness asks."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def stage(self, request: Request) -> None:
        self._ask(request)

    def judge(self, request: Request) -> Verdict:
        return Verdict.of_json(self._ask(request))

    def _ask(self, request: Request) -> dict[str, Any]:
        number = self._call("POST", "/api/requests", request.as_json())["id"]
        while True:
            answer = self._call("GET", f"/api/answer?id={number}&wait=1")
            if answer is not None:
                return answer

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        call = urllib.request.Request(self.url + path, data, method=method)
        call.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(call, timeout=POLL_S + 30) as reply:
                text = reply.read()
        except (urllib.error.URLError, OSError) as error:
            raise OperatorError(
                f"the operator desk at {self.url} did not answer {method} {path}: {error}; it "
                "runs in the run's controller process, which may have ended"
            ) from None
        return json.loads(text) if text else None
