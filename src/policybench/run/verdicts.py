"""verdicts.jsonl: operators' verdicts on a run's rollouts, given from their recordings, one JSON
line each, appended and fsync'd; read back with a torn line reported and kept, never rewritten."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.record.episode import OutcomeKind
from policybench.run.files import LINE_LIMIT, lines_of, loads, open_append
from policybench.run.records import rollout_id

VERDICTS = "verdicts.jsonl"
SUCCESS, FAILURE, UNSURE = "success", "failure", "unsure"
CHOICES = (SUCCESS, FAILURE, UNSURE)
# What an automatic outcome says, in a verdict's words (an error is no verdict on the policy).
AUTOMATIC = {OutcomeKind.SOLVED.value: SUCCESS, OutcomeKind.UNSOLVED.value: FAILURE}
# Where a record judged by operators keeps its own (automatic) outcome.
AUTOMATIC_OUTCOME = "automatic_outcome"
_APPEND = threading.Lock()  # the page server's threads append one line at a time


class BadVerdict(ValueError):
    """A verdict that cannot be recorded: the message says what was expected."""


@dataclass(frozen=True)
class Verdict:
    """One operator's verdict on one rollout (its item id), with who gave it and when."""

    rollout: str
    verdict: str
    scorer: str
    scored_at: str
    note: str = ""

    @classmethod
    def now(cls, rollout: str, verdict: str, scorer: str, note: str = "") -> Verdict:
        if verdict not in CHOICES:
            raise BadVerdict(f"verdict should be one of {', '.join(CHOICES)}, got {verdict!r}")
        if not scorer.strip():
            raise BadVerdict("a verdict needs the scorer's name (got an empty one)")
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
        return cls(rollout, verdict, scorer.strip(), stamp, note)

    def as_json(self) -> dict[str, str]:
        return {
            keys.VERDICT_ROLLOUT: self.rollout,
            keys.VERDICT: self.verdict,
            keys.SCORER: self.scorer,
            keys.SCORED_AT: self.scored_at,
            keys.VERDICT_NOTE: self.note,
        }

    @classmethod
    def of_json(cls, data: Any) -> Verdict:
        fields = (keys.VERDICT_ROLLOUT, keys.VERDICT, keys.SCORER, keys.SCORED_AT)
        if not isinstance(data, dict) or any(not isinstance(data.get(f), str) for f in fields):
            raise BadVerdict(f"expected an object with text fields {', '.join(fields)}")
        if data[keys.VERDICT] not in CHOICES:
            raise BadVerdict(f"verdict should be one of {', '.join(CHOICES)}")
        note = data.get(keys.VERDICT_NOTE) or ""
        return cls(*(data[f] for f in fields), note=str(note))


def append_verdict(run_dir: Path, verdict: Verdict) -> None:
    """Appends `verdict` to the run's verdicts.jsonl and waits until it is on disk."""
    append_verdicts(run_dir, [verdict])


def append_verdicts(run_dir: Path, verdicts: Sequence[Verdict]) -> None:
    """Appends `verdicts` to the run's verdicts.jsonl, then waits until they are on disk. After a
    torn last line (a writer killed mid-line) it starts a new line: the torn one stays as it was."""
    lines = "".join(json.dumps(v.as_json(), sort_keys=True) + "\n" for v in verdicts).encode()
    with _APPEND, open_append(run_dir / VERDICTS, binary=True, readable=True) as file:
        end = file.tell()
        if end and os.pread(file.fileno(), 1, end - 1) != b"\n":
            lines = b"\n" + lines
        file.write(lines)
        file.flush()
        os.fsync(file.fileno())


def joined(named: Sequence[tuple[str, Verdicts]]) -> Verdicts:
    """Several runs' verdicts (each with its run's name) in order, each given once; a problem
    names its run."""
    given: dict[Verdict, None] = {}
    problems = []
    for name, found in named:
        given.update(dict.fromkeys(found.given))
        problems += [f"{name}: {problem}" for problem in found.problems]
    return Verdicts(tuple(given), tuple(problems))


def carry_verdicts(verdicts: Verdicts, out: Path) -> int:
    """Appends to `out`'s verdicts.jsonl those of `verdicts` it does not hold yet (those given
    on `out` itself stay); returns how many."""
    held = set(read_verdicts(out).given)
    new = [v for v in verdicts.given if v not in held]
    if new:
        append_verdicts(out, new)
    return len(new)


@dataclass(frozen=True)
class Verdicts:
    """Every readable verdict of a run, in the order given; a line that is not one is a
    problem naming its line number (the lines after it still count)."""

    given: tuple[Verdict, ...] = ()
    problems: tuple[str, ...] = ()

    def latest(self) -> dict[str, dict[str, Verdict]]:
        """rollout -> scorer -> that scorer's latest verdict on it (a later one stands; the
        earlier stays in the file)."""
        found: dict[str, dict[str, Verdict]] = {}
        for verdict in self.given:
            found.setdefault(verdict.rollout, {})[verdict.scorer] = verdict
        return found

    @property
    def scorers(self) -> tuple[str, ...]:
        return tuple(sorted({verdict.scorer for verdict in self.given}))


def read_verdicts(run_dir: Path) -> Verdicts:
    """The run's verdicts (none when it has no verdicts.jsonl)."""
    path = run_dir / VERDICTS
    if not path.is_file():
        return Verdicts()
    given, problems = [], []
    for number, raw in lines_of(path):
        if raw is None:
            problems.append(f"{VERDICTS} line {number}: over {LINE_LIMIT:,} bytes, skipped")
            continue
        line = raw.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        try:
            given.append(Verdict.of_json(loads(line)))
        except json.JSONDecodeError as error:
            problems.append(
                f"{VERDICTS} line {number}: not valid JSON ({error.msg} at column "
                f"{error.colno}), kept in the file and skipped; it was probably cut off "
                "while being written (the lines after it are read)"
            )
        except (BadVerdict, ValueError) as error:
            problems.append(f"{VERDICTS} line {number}: {error}, skipped")
    return Verdicts(tuple(given), tuple(problems))


def consensus(verdicts: Iterable[str]) -> str | None:
    """The operators' outcome of a rollout from their latest verdicts: success or failure when
    every decisive verdict says so; None when none is decisive (unscored, unsure) or they differ."""
    decisive = {verdict for verdict in verdicts if verdict != UNSURE}
    return next(iter(decisive)) if len(decisive) == 1 else None


def unscored_reason(verdicts: Sequence[str]) -> str:
    if not verdicts:
        return "not scored yet"
    if all(verdict == UNSURE for verdict in verdicts):
        return "scored unsure"
    return "scorers disagree"


@dataclass(frozen=True)
class OperatorOutcomes:
    """A run's records judged by operators (`--outcome-source operator`): each scored record's
    outcome is the operators' (its own kept as `automatic_outcome`; an error stays an error),
    and the rollouts without one, each with why, counted apart rather than dropped."""

    records: tuple[dict[str, Any], ...]
    unscored: tuple[tuple[Mapping[str, Any], str], ...]  # (record, why it has no verdict)

    def lines(self, run: str = "") -> list[str]:
        """What a report says of the rollouts left out (nothing when every one was judged)."""
        if not self.unscored:
            return []
        where = f" of {run}" if run else ""
        named = ", ".join(f"{rollout_id(record)} ({why})" for record, why in self.unscored[:5])
        more = f" and {len(self.unscored) - 5} more" if len(self.unscored) > 5 else ""
        return [
            f"outcome source operator: {len(self.unscored)} rollout(s){where} have no operator "
            f"verdict and are not counted in the rates: {named}{more}; score them with "
            "`policybench score RUN`"
        ]


def operator_outcomes(
    records: Sequence[Mapping[str, Any]], verdicts: Verdicts, scorer: str | None = None
) -> OperatorOutcomes:
    """The records judged by every scorer together (see `consensus`) or by `scorer` alone."""
    latest = verdicts.latest()
    judged, unscored = [], []
    for record in records:
        if record[keys.OUTCOME] == OutcomeKind.ERROR.value:
            judged.append({**record, AUTOMATIC_OUTCOME: record[keys.OUTCOME]})
            continue
        given = latest.get(rollout_id(record), {})
        said = [v.verdict for s, v in sorted(given.items()) if scorer is None or s == scorer]
        outcome = consensus(said)
        if outcome is None:
            unscored.append((record, unscored_reason(said)))
            continue
        kind = OutcomeKind.SOLVED if outcome == SUCCESS else OutcomeKind.UNSOLVED
        judged.append({**record, keys.OUTCOME: kind.value, AUTOMATIC_OUTCOME: record[keys.OUTCOME]})
    return OperatorOutcomes(tuple(judged), tuple(unscored))


AUTOMATIC_SOURCE, OPERATOR_SOURCE = "automatic", "operator"
SOURCE_HELP = (
    "whose outcomes count: automatic (the env's success check, the default), operator (the "
    "scorers' verdicts from `policybench score`, where they agree) or operator:NAME (one "
    "scorer's); rollouts without a verdict are counted and listed, not in the rates"
)


def parse_outcome_source(value: str) -> tuple[str, str | None]:
    """`--outcome-source`'s value as (source, scorer or None); a ValueError says what to give."""
    source, colon, scorer = value.partition(":")
    if source == AUTOMATIC_SOURCE and not scorer:
        return source, None
    if source == OPERATOR_SOURCE and (scorer or not colon):
        return source, scorer or None
    raise ValueError(
        f"--outcome-source {value!r}: expected automatic, operator or operator:NAME (a scorer "
        "of the run's verdicts.jsonl)"
    )


def judged_records(
    records: Sequence[Mapping[str, Any]], run_dir: Path, source: str, run: str = ""
) -> tuple[tuple[Mapping[str, Any], ...], list[str]]:
    """The records whose outcomes count under `source` (see parse_outcome_source), and what the
    report must say of them: the rollouts left unscored, the verdicts file's problems."""
    kind, scorer = parse_outcome_source(source)
    if kind == AUTOMATIC_SOURCE:
        return tuple(records), []
    verdicts = read_verdicts(run_dir)
    if scorer is not None and scorer not in verdicts.scorers:
        raise ValueError(
            f"--outcome-source {source}: {run or run_dir.name} has no verdict by {scorer!r} "
            f"(its scorers: {', '.join(verdicts.scorers) or 'none yet'})"
        )
    judged = operator_outcomes(records, verdicts, scorer)
    where = f"{run}: " if run else ""
    return judged.records, [*judged.lines(run), *(where + p for p in verdicts.problems)]
