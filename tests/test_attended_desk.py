"""The operator desk's bad input, over its real HTTP API on loopback: an answer to a request
never asked or answered already, a verdict that is not one, a staged field the scene lacks."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from policybench import keys
from policybench.operator.base import Ask, OperatorError, Request
from policybench.operator.desk import Desk, DeskClient, DeskServer
from policybench.run.verdicts import Verdict, read_verdicts
from policybench.spec import Attended, Scene

JUDGE = Request(Ask.JUDGE, "point", "test_point.py::test_point[reach/seed=0]", "reach", {})


@pytest.fixture
def served(tmp_path: Path):
    kept: list[Verdict] = []
    desk = Desk("ann", kept.append)
    server = DeskServer(desk, 0, tmp_path)
    yield desk, server.url, kept
    server.close()


def post(url: str, body: dict) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}  # as the page sends it
    call = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(call, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_answer_to_a_request_never_asked_is_refused_with_the_open_ones(served):
    desk, url, kept = served
    asked = desk.post(JUDGE)
    status, body = post(f"{url}api/answer?id=99", {keys.VERDICT: "success"})
    assert status == 400 and "no open request 99" in body["error"]
    assert f"open: [{asked}]" in body["error"] and kept == []


def test_a_verdict_that_is_not_one_is_refused_and_the_request_stays_open(served):
    desk, url, kept = served
    asked = desk.post(JUDGE)
    status, body = post(f"{url}api/answer?id={asked}", {keys.VERDICT: "maybe"})
    assert status == 400 and "success, failure, unsure" in body["error"]
    assert [number for number, _ in desk.pending()] == [asked]
    status, _ = post(f"{url}api/answer?id={asked}", {keys.VERDICT: "failure"})
    assert status == 200 and [v.verdict for v in kept] == ["failure"]
    status, body = post(f"{url}api/answer?id={asked}", {keys.VERDICT: "success"})
    assert status == 400 and "answered already" in body["error"]
    assert [v.verdict for v in kept] == ["failure"]  # the second answer changed nothing


def test_client_gets_the_verdict_the_page_gave_with_the_operator_name(served, tmp_path):
    desk, url, kept = served

    def answer() -> None:
        found = desk.next_pending(0, timeout_s=10)
        assert found is not None
        post(f"{url}api/answer?id={found[0]}", {keys.VERDICT: "unsure", keys.VERDICT_NOTE: "hm"})

    threading.Thread(target=answer).start()
    verdict = DeskClient(url).judge(JUDGE)
    assert (verdict.rollout, verdict.verdict, verdict.note) == (JUDGE.rollout, "unsure", "hm")
    assert verdict.scorer == "ann" and kept == [verdict]


def test_client_of_a_desk_that_is_gone_says_where_it_looked(tmp_path):
    desk = Desk("ann", lambda verdict: None)
    server = DeskServer(desk, 0, tmp_path)
    url = server.url
    server.close()
    with pytest.raises(OperatorError, match=f"the operator desk at {url.rstrip('/')} did not"):
        DeskClient(url).stage(JUDGE)


def test_a_staged_field_the_scene_lacks_names_the_fields_it_has():
    with pytest.raises(ValueError, match=r"\['cup'\] are not in the scene.*\['seed', 'task'\]"):
        Attended(staged=("cup",)).staging(Scene("reach", 0))


def test_desk_verdicts_reach_verdicts_jsonl_through_the_report_module(tmp_path):
    from policybench.run.verdicts import append_verdict

    desk = Desk("ann", lambda verdict: append_verdict(tmp_path, verdict))
    asked = desk.post(JUDGE)
    desk.answer(asked, {keys.VERDICT: "success", keys.SCORER: "bo"})
    given = read_verdicts(tmp_path).given
    assert [(v.rollout, v.verdict, v.scorer) for v in given] == [(JUDGE.rollout, "success", "bo")]


def test_a_local_process_posting_requests_without_end_is_refused_past_the_desks_bound(served):
    from policybench.operator.desk import MAX_OPEN

    desk, url, _ = served
    for _ in range(MAX_OPEN):
        desk.post(JUDGE)
    status, body = post(f"{url}api/requests", JUDGE.as_json())
    assert status == 400 and f"holds {MAX_OPEN} open requests" in body["error"]
    assert len(desk.pending()) == MAX_OPEN
