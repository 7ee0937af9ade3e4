"""Published results beside a run: the numbers papers and model cards report for the protocols we
stage (data files, each number with its source), which of them a run's policy is, and its
measured success against the published one with an exact test.

The data lie in `policybench/suites/data/published/*.toml`, one file per family, and in the
folder $POLICYBENCH_PUBLISHED names (a team's own entries, in the same schema); `read_catalog`
holds every file to its schema, so a number without its source cannot be loaded."""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from policybench import keys

OWN = "POLICYBENCH_PUBLISHED"  # a folder of the user's own published-results files
ALPHA = 0.05  # below this p-value a run's rate is said to differ from the published one
NAME = "name"  # an entry's own name, the field --published matches (not a policy's name)
ENTRY_FIELDS = {NAME, "model", "checkpoint", "source", "where", "protocol", "results",
                "episodes_per_task", "approximate"}  # fmt: skip
RESULT_FIELDS = {keys.EVAL, "evals", keys.TASK, "percent", "tasks", "episodes_per_task", "per_task"}
TWO_BINOMIALS = "two binomials, Fisher's exact test (the source gives its episodes)"
AGAINST_RATE = "against the published rate, exact binomial test (the source gives no episode count)"


class PublishedError(ValueError):
    """A published-results file that does not hold to the schema: which file, which entry, what."""


@dataclass(frozen=True)
class PublishedResult:
    """One published rate: of an Eval (or several pooled, or one task of one), in [0, 1]."""

    evals: tuple[str, ...]
    rate: float
    task: str | None = None
    tasks: int | None = None
    episodes_per_task: int | None = None
    per_task: Mapping[str, float] = field(default_factory=dict)

    @property
    def episodes(self) -> int | None:
        """The episodes behind the rate, where the source gives them."""
        if self.tasks is None or self.episodes_per_task is None:
            return None
        return self.tasks * self.episodes_per_task

    @property
    def label(self) -> str:
        where = " + ".join(self.evals)
        return where if self.task is None else f"{where} / {self.task}"

    def as_json(self) -> dict[str, Any]:
        return {
            "evals": list(self.evals),
            **({keys.TASK: self.task} if self.task else {}),
            "rate": self.rate,
            "tasks": self.tasks,
            "episodes_per_task": self.episodes_per_task,
            "episodes": self.episodes,
            **({"per_task": dict(self.per_task)} if self.per_task else {}),
        }


@dataclass(frozen=True)
class Published:
    """A checkpoint's published results for one family's protocol, with where they were printed."""

    name: str  # what --published NAME says
    family: str
    model: str
    checkpoint: str  # as published: a hub id, a bucket path, a config's name
    source: str  # the address of the page that prints the numbers
    where: str  # the table or figure on it
    protocol: str  # how the source ran it, and what differs from what we stage
    results: tuple[PublishedResult, ...]
    approximate: bool = False  # the source calls its rates approximate

    def as_json(self) -> dict[str, Any]:
        return {
            NAME: self.name,
            "family": self.family,
            "model": self.model,
            "checkpoint": self.checkpoint,
            "source": self.source,
            "where": self.where,
            "protocol": self.protocol,
            "approximate": self.approximate,
        }


def read_catalog(*folders: Path | Any) -> tuple[Published, ...]:
    """Every entry of the TOML files in `folders`, checked against the schema (PublishedError
    names the file, the entry and what is wrong)."""
    found: list[Published] = []
    paths = [p for folder in folders for p in sorted(folder.iterdir(), key=lambda p: p.name)]
    for path in (p for p in paths if p.name.endswith(".toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as error:
            raise PublishedError(f"{path.name}: not TOML: {error}") from None
        found += _entries(path.name, data)
    names = [entry.name.lower() for entry in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise PublishedError(f"published entries named twice: {', '.join(twice)}")
    return tuple(found)


def catalog() -> tuple[Published, ...]:
    """The published results shipped with policybench, and those in $POLICYBENCH_PUBLISHED."""
    return _catalog(os.environ.get(OWN) or None)


@functools.cache
def _catalog(own: str | None) -> tuple[Published, ...]:
    shipped = files("policybench.suites") / "data" / "published"
    folders = [shipped, *([] if own is None else [Path(own)])]
    if own is not None and not Path(own).is_dir():
        raise PublishedError(f"${OWN} names {own}, which is not a folder of .toml files")
    return read_catalog(*folders)


def entry_named(name: str, known: Sequence[Published] | None = None) -> Published:
    """The entry `name` names (its name or its checkpoint, in any case); ValueError lists them."""
    known = catalog() if known is None else known
    for entry in known:
        if name.lower() in (entry.name.lower(), entry.checkpoint.lower()):
            return entry
    raise ValueError(
        f"no published results named {name!r}; known: {', '.join(e.name for e in known)} "
        "(`policybench published` lists them with their sources)"
    )


def entry_of(
    records: Sequence[Mapping[str, Any]],
    named: str | None = None,
    known: Sequence[Published] | None = None,
) -> Published | None:
    """The published entry a run is of: the one `named` (--published), else the one its policy
    names: a `published` or `checkpoint` field of its description, or a LeRobot checkpoint path
    that holds the entry's hub id (as the hub's cache lays it out too). None in an A/B run."""
    known = catalog() if known is None else known
    if named:
        return entry_named(named, known)
    if any(record.get(keys.ARM) is not None for record in records):
        return None
    said = {
        str(value)
        for record in records[:1000]
        for name, value in (record.get(keys.POLICY) or {}).items()
        if name in (keys.PUBLISHED, "checkpoint", keys.POLICY_NAME) and value
    }
    matches = {entry.name: entry for entry in known for text in said if _names(text, entry)}
    return next(iter(matches.values())) if len(matches) == 1 else None


@dataclass(frozen=True)
class PublishedComparison:
    """A run's success on a published result's Evals beside the published rate."""

    entry: Published
    result: PublishedResult
    solved: int
    rollouts: int  # errors count as attempts not solved, as the run's own rate does
    published_solved: int | None  # where the source gives its episodes
    p_value: float
    test: str
    differs: tuple[str, ...]  # what the run did that the source did not, as recorded

    @property
    def rate(self) -> float:
        return self.solved / self.rollouts

    @property
    def difference(self) -> float:
        return self.rate - self.result.rate

    @property
    def verdict(self) -> str:
        if self.p_value >= ALPHA:
            return "consistent"
        return "below" if self.difference < 0 else "above"

    def line(self) -> str:
        published = f"{100 * self.result.rate:.1f}%"
        if self.result.episodes is not None:
            published += f" of {self.result.episodes}"
        said = {
            "consistent": f"consistent with it (p = {self.p_value:.3g})",
            "below": f"BELOW it (p = {self.p_value:.3g})",
            "above": f"above it (p = {self.p_value:.3g})",
        }[self.verdict]
        return (
            f"{self.result.label}: {100 * self.rate:.1f}% ({self.solved}/{self.rollouts}) against "
            f"{published} published for {self.entry.name} ({100 * self.difference:+.1f} pts), "
            f"{said}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            keys.PUBLISHED: self.entry.as_json(),
            "published_result": self.result.as_json(),
            "solved": self.solved,
            "rollouts": self.rollouts,
            "rate": self.rate,
            "published_rate": self.result.rate,
            "published_solved": self.published_solved,
            "difference": self.difference,
            "test": self.test,
            "p_value": self.p_value,
            "alpha": ALPHA,
            "verdict": self.verdict,
            "differs": list(self.differs),
        }


def compare_published(
    records: Sequence[Mapping[str, Any]], entry: Published
) -> tuple[PublishedComparison, ...]:
    """Each of the entry's results that the run played, beside the run's own rate."""
    found = []
    for result in entry.results:
        members = [
            r
            for r in records
            if r.get(keys.EVAL) in result.evals
            and (result.task is None or r.get(keys.TASK) == result.task)
        ]
        if not members:
            continue
        solved = sum(r.get(keys.OUTCOME) == "solved" for r in members)
        published_solved, p_value, test = _tested(solved, len(members), result)
        found.append(
            PublishedComparison(
                entry, result, solved, len(members), published_solved, p_value, test,
                _differs(members, result),
            )
        )  # fmt: skip
    return tuple(found)


def _tested(solved: int, rollouts: int, result: PublishedResult) -> tuple[int | None, float, str]:
    """The published successes (where known), the two-sided p-value and the test that made it."""
    from scipy.stats import binomtest, fisher_exact

    episodes = result.episodes
    if episodes is None:
        return None, float(binomtest(solved, rollouts, result.rate).pvalue), AGAINST_RATE
    theirs = round(result.rate * episodes)
    table = [[solved, rollouts - solved], [theirs, episodes - theirs]]
    return theirs, float(fisher_exact(table).pvalue), TWO_BINOMIALS


def _differs(members: Sequence[Mapping[str, Any]], result: PublishedResult) -> tuple[str, ...]:
    """Where the run's protocol, as its records show it, parts from the source's."""
    per_task: dict[str, int] = {}
    for record in members:
        task = str(record.get(keys.TASK))
        per_task[task] = per_task.get(task, 0) + 1
    found = []
    if result.tasks is not None and result.task is None and len(per_task) != result.tasks:
        found.append(f"tasks: {len(per_task)} here, {result.tasks} published")
    counts = sorted(set(per_task.values()))
    if result.episodes_per_task is not None and counts != [result.episodes_per_task]:
        here = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
        found.append(f"episodes a task: {here} here, {result.episodes_per_task} published")
    return tuple(found)


def _names(text: str, entry: Published) -> bool:
    """Whether a policy's description `text` names `entry`: its name or checkpoint, or a path
    holding the checkpoint's last two parts in order (`models--org--name` read as `org/name`)."""
    text = text.removeprefix("lerobot:").strip()
    if text.lower() in (entry.name.lower(), entry.checkpoint.lower()):
        return True
    parts = [p for p in _parts(text) if p]
    wanted = [p for p in _parts(entry.checkpoint.split("://", 1)[-1]) if p][-2:]
    if len(wanted) < 2:
        return False
    return any(parts[i : i + 2] == wanted for i in range(len(parts) - 1))


def _parts(path: str) -> list[str]:
    parts = []
    for part in path.replace("\\", "/").split("/"):
        if part.startswith("models--"):  # the hub's cache: models--org--name
            parts += part.removeprefix("models--").split("--", 1)
        else:
            parts.append(part)
    return parts


def _entries(file: str, data: Mapping[str, Any]) -> list[Published]:
    family = data.get("family")
    if not isinstance(family, str) or not family:
        raise PublishedError(f"{file}: expected a `family` name at the top, got {family!r}")
    entries = data.get("entry")
    if not isinstance(entries, list) or not entries:
        raise PublishedError(f"{file}: expected one or more [[entry]] tables")
    return [_entry(file, family, entry) for entry in entries]


def _entry(file: str, family: str, entry: Any) -> Published:
    where = f"{file}: entry {entry.get(NAME, '(unnamed)')!r}" if isinstance(entry, dict) else file
    if not isinstance(entry, dict):
        raise PublishedError(f"{where}: expected a table, got {entry!r}")
    unknown = sorted(set(entry) - ENTRY_FIELDS)
    if unknown:
        raise PublishedError(f"{where}: unknown fields {unknown}; known: {sorted(ENTRY_FIELDS)}")
    text = {name: entry.get(name) for name in (NAME, "model", "checkpoint", "where", "protocol")}
    for name, value in text.items():
        if not isinstance(value, str) or not value.strip():
            raise PublishedError(f"{where}: expected `{name}` as text, got {value!r}")
    source = entry.get("source")
    if not isinstance(source, str) or not source.startswith("https://") or _unsafe(source):
        raise PublishedError(f"{where}: expected `source` as an https:// address (no spaces, "
                             f"quotes, brackets or angle brackets), got {source!r}")  # fmt: skip
    results = entry.get("results")
    if not isinstance(results, list) or not results:
        raise PublishedError(f"{where}: expected `results`, a list of one or more tables")
    default = _count(where, "episodes_per_task", entry.get("episodes_per_task"))
    return Published(
        name=text[NAME], family=family, model=text["model"], checkpoint=text["checkpoint"],
        source=source, where=text["where"], protocol=text["protocol"],
        results=tuple(_result(where, result, default) for result in results),
        approximate=bool(entry.get("approximate", False)),
    )  # fmt: skip


def _result(where: str, result: Any, default: int | None) -> PublishedResult:
    if not isinstance(result, dict):
        raise PublishedError(f"{where}: expected each result as a table, got {result!r}")
    unknown = sorted(set(result) - RESULT_FIELDS)
    if unknown:
        raise PublishedError(f"{where}: unknown result fields {unknown}; known: "
                             f"{sorted(RESULT_FIELDS)}")  # fmt: skip
    evals = result.get("evals", [result.get(keys.EVAL)])
    if not _texts(evals) or (keys.EVAL in result) == ("evals" in result):
        given = result.get(keys.EVAL, result.get("evals"))
        raise PublishedError(f"{where}: expected a result's Eval as `eval` (or `evals`, a list "
                             f"pooled), got {given!r}")  # fmt: skip
    percent = _percent(where, result.get("percent"))
    per_task = result.get("per_task") or {}
    if not isinstance(per_task, dict):
        raise PublishedError(f"{where}: expected `per_task` as a table of task = percent")
    task = result.get(keys.TASK)
    if task is not None and not isinstance(task, str):
        raise PublishedError(f"{where}: expected `task` as text, got {task!r}")
    episodes = _count(where, "episodes_per_task", result.get("episodes_per_task", default))
    return PublishedResult(
        evals=tuple(evals), rate=percent / 100, task=task,
        tasks=_count(where, "tasks", result.get("tasks")), episodes_per_task=episodes,
        per_task={str(t): _percent(where, p) / 100 for t, p in per_task.items()},
    )  # fmt: skip


def _unsafe(address: str) -> bool:
    """Whether an address holds what would end a link in Markdown or HTML."""
    return any(c.isspace() or c in "()<>[]\"'`" for c in address)


def _texts(values: Any) -> bool:
    return (
        isinstance(values, list) and bool(values) and all(isinstance(v, str) and v for v in values)
    )


def _percent(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
        raise PublishedError(f"{where}: expected `percent` in [0, 100] as published, got {value!r}")
    return float(value)


def _count(where: str, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PublishedError(f"{where}: expected `{name}` as a whole number >= 1, got {value!r}")
    return value


def listing(evals: Iterable[str] | None = None) -> list[str]:
    """`policybench published [EVAL]`: every entry (of those Evals), with its source."""
    wanted = set(evals or ())
    lines = []
    for entry in catalog():
        results = [r for r in entry.results if not wanted or wanted & set(r.evals)]
        if not results:
            continue
        approximate = " (approximate, as its source says)" if entry.approximate else ""
        lines += [
            f"{entry.name} [{entry.family}]{approximate}",
            f"  {entry.model}; checkpoint: {entry.checkpoint}",
            f"  source: {entry.source} ({entry.where})",
            f"  protocol: {entry.protocol}",
        ]
        for result in results:
            episodes = "" if result.episodes is None else f" of {result.episodes} episodes"
            lines.append(f"  {result.label}: {100 * result.rate:.1f}%{episodes}")
    return lines


def published_lines(found: Sequence[PublishedComparison]) -> list[str]:
    """The terminal's section: the run beside its checkpoint's published results."""
    if not found:
        return []
    entry = found[0].entry
    approximate = "; the source calls its rates approximate" if entry.approximate else ""
    lines = ["", f"published results of {entry.name} ({entry.where}{approximate}):"]
    for comparison in found:
        lines.append(f"  {comparison.line()}")
        lines += [f"    differs: {said}" for said in comparison.differs]
    tests = sorted({comparison.test for comparison in found})
    lines += [f"  test: {test}, two-sided, at {ALPHA}" for test in tests]
    lines += [f"  their protocol: {entry.protocol}", f"  source: {entry.source}"]
    return lines
