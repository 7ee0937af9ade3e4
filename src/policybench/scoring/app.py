"""The scoring page: walks a scorer through a run's rollouts (video, instruction, the scene it was
staged from) in an order shuffled per scorer, and appends each verdict to verdicts.jsonl."""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.pages.server import (
    FILES,
    HttpError,
    PageServer,
    Request,
    Response,
    Routes,
    page_templates,
)
from policybench.run.info import RunInfo
from policybench.run.records import latest_by_rollout, rollout_id
from policybench.run.results import RESULTS, read_results
from policybench.run.verdicts import (
    CHOICES,
    BadVerdict,
    Verdict,
    append_verdict,
    read_verdicts,
)

PAGE, VERDICT_PATH = "/", "/verdict"


def shown(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the page shows of a rollout, and no more: no outcome (the scorer judges unprimed)
    and nothing of the policy but its arm (a letter in a blinded run)."""
    video = record.get(keys.VIDEO)
    return {
        "id": rollout_id(record),
        keys.EVAL: record[keys.EVAL],
        keys.TASK: record[keys.TASK],
        keys.INSTRUCTION: record.get(keys.INSTRUCTION) or "",
        keys.SCENE: record.get(keys.SCENE) or {},
        keys.ARM: record.get(keys.ARM),
        keys.VIDEO: None if not isinstance(video, str) else FILES + video,
        keys.VIDEO_MISSING: video_missing(record),
    }


def video_missing(record: Mapping[str, Any]) -> str | None:
    """Why a rollout has no video (None: it has one)."""
    if isinstance(record.get(keys.VIDEO), str):
        return None
    return (
        record.get(keys.VIDEO_MISSING) or "the run recorded no video (run it with --record-video)"
    )


def unfilmed_line(records: Sequence[Mapping[str, Any]]) -> str | None:
    """What `policybench score` says first of the rollouts that have no video (None when each
    has one): how many, why, and what the page shows of them instead."""
    unfilmed = [why for why in map(video_missing, records) if why is not None]
    if not unfilmed:
        return None
    why = sorted(set(unfilmed))
    return (
        f"{len(unfilmed)} of {len(records)} rollouts have no video: {'; '.join(why)}. The page "
        "shows their instruction and scene only: score them from those, or skip them"
    )


def _stamp(path: Path) -> tuple[int, ...] | None:
    """What changes when a file is appended to, rewritten or replaced (None: no file)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def scorer_order(ids: Sequence[str], run_id: str, scorer: str) -> list[str]:
    """The rollouts in the order one scorer sees them: shuffled, seeded by the run and the
    scorer (the same scorer gets the same order again; arms and seeds are interleaved)."""
    seed = hashlib.sha256(f"{run_id}\0{scorer}".encode()).digest()
    order = list(ids)
    random.Random(seed).shuffle(order)
    return order


class ScoringApp:
    """The page's routes over one run directory; `scorer` fixes the scorer's name (else the page
    asks for it)."""

    def __init__(self, run_dir: Path, scorer: str | None = None) -> None:
        self.run_dir, self.scorer = run_dir, scorer
        run = RunInfo.load(run_dir)
        self.run_id = run.run_id if run is not None else run_dir.name
        self.templates = page_templates("policybench.scoring")
        # results.jsonl as last read, and what its stat said then: a video's every range request
        # asks which files the page shows, and reading a long run's results for each is slow
        self._read: tuple[tuple[int, ...] | None, dict[str, dict[str, Any]]] = (None, {})
        self._reading = threading.Lock()  # the server answers on several threads

    def routes(self) -> Routes:
        return {("GET", PAGE): self.page, ("POST", VERDICT_PATH): self.verdict}

    def server(self, host: str, port: int) -> PageServer:
        return PageServer(self.routes(), self.run_dir, host, port, shown=self.videos)

    def videos(self) -> set[str]:
        """The files the page links to: its rollouts' videos (no other file of the run, such as
        a blinded run's key or its automatic outcomes, is served)."""
        videos = (record.get(keys.VIDEO) for record in self.rollouts().values())
        return {video for video in videos if isinstance(video, str)}

    def rollouts(self) -> dict[str, dict[str, Any]]:
        """The run's rollouts by id (a rollout recorded twice, as a resumed run's retried one:
        its last record), read again only when results.jsonl changed (a rollout appended by the
        run still going, a rewrite) since it was last read."""
        path = self.run_dir / RESULTS
        with self._reading:
            stamp = _stamp(path)
            if stamp is None or stamp != self._read[0]:
                records = read_results(path).records
                self._read = (stamp, latest_by_rollout(records))
            return self._read[1]

    def page(self, request: Request) -> Response:
        scorer = self.scorer or request.query.get(keys.SCORER, "").strip()
        template = self.templates.get_template("score.html.j2")
        if not scorer:
            return Response.of_html(template.render(heading="Score rollouts", run_id=self.run_id))
        rollouts = self.rollouts()
        latest = read_verdicts(self.run_dir).latest()
        given = {
            rollout: {keys.VERDICT: by[scorer].verdict, keys.VERDICT_NOTE: by[scorer].note}
            for rollout, by in latest.items()
            if scorer in by
        }
        ordered = [shown(rollouts[i]) for i in scorer_order(sorted(rollouts), self.run_id, scorer)]
        data = {keys.SCORER: scorer, "rollouts": ordered, "given": given, "choices": list(CHOICES)}
        return Response.of_html(
            template.render(
                heading="Score rollouts",
                run_id=self.run_id,
                scorer=scorer,
                data=json.dumps(data, sort_keys=True).replace("</", "<\\/"),  # in <script>
            )
        )

    def verdict(self, request: Request) -> Response:
        body = request.json()
        named = str(body.get(keys.SCORER) or "").strip()
        if self.scorer and named and named != self.scorer:
            raise HttpError(
                HTTPStatus.CONFLICT,
                f"this page records verdicts as {self.scorer!r} (policybench score --scorer "
                f"{self.scorer}), and this verdict names {named!r}; nothing was recorded: a "
                "scorer of their own scores on a page started with their name",
            )
        scorer = self.scorer or named
        rollout = body.get(keys.VERDICT_ROLLOUT)
        if not isinstance(rollout, str):
            raise HttpError(
                HTTPStatus.BAD_REQUEST,
                f"a verdict names its rollout by item id, a string; got "
                f"{type(rollout).__name__}; nothing was recorded",
            )
        rollouts = self.rollouts()
        if rollout not in rollouts:
            raise HttpError(
                HTTPStatus.NOT_FOUND,
                f"no rollout {rollout!r} in run {self.run_id}: a verdict names one of its "
                f"{len(rollouts)} rollouts by item id; nothing was recorded",
            )
        try:
            verdict = Verdict.now(
                rollout, str(body.get(keys.VERDICT)), scorer, str(body.get(keys.VERDICT_NOTE) or "")
            )
        except BadVerdict as error:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"{error}; nothing was recorded") from None
        earlier = read_verdicts(self.run_dir).latest().get(rollout, {}).get(verdict.scorer)
        append_verdict(self.run_dir, verdict)
        return Response.of_json(
            {
                "recorded": verdict.as_json(),
                "replaces": None if earlier is None else earlier.as_json(),
            }
        )
