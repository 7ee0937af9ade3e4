"""Merging runs: one run dir (results, summary, run.json listing its parts, HTML) from shards or
resumed parts of one run; parts of different protocols are refused, duplicates and gaps named."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.record.episode import OutcomeKind
from policybench.record.protocol import OVERRIDE, Protocol
from policybench.report.failures import failure_clusters
from policybench.report.html import INDEX, ROLLOUTS, Findings, of_loop, write_html
from policybench.report.summary import Summary
from policybench.run.arms import ARMS, BLINDING, BLINDING_FILE, SEALED_FILE, Blinding
from policybench.run.files import make_folders, read_text, write_file
from policybench.run.info import RUN_INFO, RunInfo
from policybench.run.layout import KEPT, SUMMARY, OutsideRun, inside, video_name
from policybench.run.records import rollout_id
from policybench.run.results import RESULTS, read_results
from policybench.run.verdicts import Verdicts, carry_verdicts, joined, read_verdicts
from policybench.text import listed

Record = Mapping[str, Any]
PART_RUN_FIELDS = ("started", "host", "command")  # what the list of parts shows of a run.json
SHARD_IN_ID = re.compile(r"-shard(\d+)of(\d+)(?:-\d+)?$")
SHARD_SETTING = re.compile(r"^(\d+)/(\d+)\b")


class MergeRefused(ValueError):
    """The parts cannot make one run; the message says why and what to do."""


@dataclass(frozen=True)
class Part:
    """One run being merged: its rollout records and its run.json (None if it wrote none, as
    when its controller was killed)."""

    run_dir: Path
    records: tuple[Record, ...]
    problems: tuple[str, ...]
    run: RunInfo | None
    # A loop run of the same run id as another part's, a different run: the id its episodes'
    # ids named (None: not renamed), the one they name in the merge, and the new name of each
    # video and trace (the merged run's name -> the part's own).
    renamed: tuple[str, str] | None = None
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.run_dir.name

    def verdicts(self) -> Verdicts:
        """The part's verdicts, on its rollouts as the merge names them."""
        found = read_verdicts(self.run_dir)
        if self.renamed is None:
            return found
        given = tuple(replace(v, rollout=_renamed(v.rollout, *self.renamed)) for v in found.given)
        return Verdicts(given, found.problems)

    @property
    def shard(self) -> tuple[int, int] | None:
        """(K, N) when this part is shard K of N: from run.json, else from its run id."""
        setting = (self.run.settings if self.run else {}).get(keys.SHARD)
        found = SHARD_SETTING.match(setting) if isinstance(setting, str) else None
        found = found or SHARD_IN_ID.search(self.name)
        return None if found is None else (int(found[1]), int(found[2]))


def read_part(run_dir: Path) -> Part:
    results = read_results(run_dir / RESULTS)
    return Part(run_dir, results.records, results.problems, RunInfo.load(run_dir))


@dataclass(frozen=True)
class MergeResult:
    parts: tuple[Part, ...]
    merged: Merged
    summary: Summary
    changes: tuple[str, ...]  # protocol differences the merge was allowed to ignore
    index: Path


def merge_runs(
    run_dirs: Sequence[Path], out: Path, allow_protocol_change: bool, command: str
) -> MergeResult:
    """Merges the runs in `run_dirs` (in that order) into `out`; raises MergeRefused when
    their protocols or policies differ (unless allowed) or `out` is not free for it."""
    parts = tell_loop_runs_apart([read_part(run_dir) for run_dir in dict.fromkeys(run_dirs)])
    changes = protocol_changes(parts)
    if changes and not allow_protocol_change:
        lines = "\n".join(f"  {line}" for line in changes)
        raise MergeRefused(
            f"the parts ran different protocols, so together they measure nothing:\n{lines}\n"
            f"Merge only parts of one run (same command, settings and versions), or pass "
            f"{OVERRIDE} to merge anyway (the report then lists the differences)."
        )
    blinding = one_blinding(parts)
    merged = merge_records(parts)
    problems = [f"{part.name}: {problem}" for part in parts for problem in part.problems]
    listed = next((part.run.settings.get(ARMS) for part in parts if part.run), None)
    # Operators' verdicts: the parts' (on their rollouts as the merge names them), and those
    # given on an earlier merge into `out`.
    named = [(part.name, part.verdicts()) for part in parts]
    carried = joined(named)
    verdicts = joined([*named, (out.name, read_verdicts(out))])
    summary = Summary.of(merged.records, problems, listed or (), verdicts)
    index = write_merged(out, parts, merged, summary, changes, command, carried)
    if blinding is not None:
        write_blinding(out, parts, blinding, command)
    return MergeResult(parts, merged, summary, changes, index)


def one_blinding(parts: Sequence[Part]) -> Blinding | None:
    """The blinding every part shares (None: no part is blinded, or none kept its key); raises
    MergeRefused when they were blinded differently, even with the protocol change allowed: a
    letter stands for another policy in each, so merging would pool different policies."""
    found = {part.name: _blinding_of(part) for part in parts}
    digests = {name: digest for name, (digest, _) in found.items()}
    if len(set(digests.values())) > 1:
        named = ", ".join(
            f"{digest or 'not blinded'} in {name}" for name, digest in digests.items()
        )
        raise MergeRefused(
            f"the parts were not blinded alike (blinding {named}): a letter stands for another "
            "policy in each, so merged arms would pool different policies. Give every shard of "
            "one blinded run the same --blind KEY; parts blinded apart can be merged once each "
            "is unblinded (policybench report unblind)"
        )
    return next((blinding for _, blinding in found.values() if blinding is not None), None)


def _blinding_of(part: Part) -> tuple[str | None, Blinding | None]:
    """A part's blinding digest (its blinding.json's, else its run.json's) and its blinding."""
    blinding = Blinding.load(part.run_dir)
    if blinding is not None:
        return blinding.digest, blinding
    setting = (part.run.settings if part.run else {}).get(BLINDING)
    return (None if setting is None else str(setting)), None


def write_blinding(out: Path, parts: Sequence[Part], blinding: Blinding, command: str) -> None:
    """The parts' shared blinding.json (naming the merge's command) and their sealed policy
    descriptions, so that `report unblind` unblinds the merged run."""
    (out / BLINDING_FILE).unlink(missing_ok=True)  # an earlier merge's
    blinding.write(out, command)
    lines = []
    for part in parts:
        sealed = part.run_dir / SEALED_FILE
        for line in read_text(sealed).splitlines() if sealed.is_file() else ():
            if part.renamed is not None and line.strip():
                entry = json.loads(line)
                entry[keys.NODEID] = _renamed(str(entry[keys.NODEID]), *part.renamed)
                line = _json(entry)
            lines.append(line)
    write_file(out / SEALED_FILE, "".join(f"{line}\n" for line in lines if line.strip()))


def tell_loop_runs_apart(parts: Sequence[Part]) -> tuple[Part, ...]:
    """The parts, with the episodes of a loop run that shares its run id with an earlier part's
    but is another run (its run.json says so: another token, or another start or host) renamed:
    `episode=<run id>~2:<index>` for the second run of that id, and so on. Copies of one run
    keep one name, so their episodes stay one episode each."""
    runs: dict[str, list[tuple[Any, ...]]] = {}  # run id -> its distinct runs, in order
    told = []
    for part in parts:
        if part.run is None or not any(of_loop(record) for record in part.records):
            told.append(part)
            continue
        run_id = part.run.run_id
        seen = runs.setdefault(run_id, [])
        identity = _identity(part.run)
        if identity not in seen:
            seen.append(identity)
        number = seen.index(identity) + 1
        told.append(part if number == 1 else _rename(part, run_id, f"{run_id}~{number}"))
    return tuple(told)


def _identity(run: RunInfo) -> tuple[Any, ...]:
    """What tells a loop run from another of its name: its token, or (a run recorded before
    loops wrote one) when and where it started."""
    uid = run.settings.get(keys.RUN_UID)
    return (uid,) if uid else (run.started, run.host)


def _rename(part: Part, before: str, after: str) -> Part:
    records, files = [], {}
    for record in part.records:
        nodeid = record.get(keys.NODEID)
        if not (of_loop(record) and isinstance(nodeid, str)):
            records.append(record)
            continue
        renamed = {**record, keys.NODEID: _renamed(nodeid, before, after)}
        for name in (keys.VIDEO, keys.ROLLOUT_TRACE):
            old = record.get(name)
            if isinstance(old, str) and Path(old).stem == video_name(nodeid):
                new = Path(old).with_stem(video_name(renamed[keys.NODEID])).as_posix()
                renamed[name], files[new] = new, old
        records.append(renamed)
    return replace(part, records=tuple(records), renamed=(before, after), files=files)


def _renamed(nodeid: str, before: str, after: str) -> str:
    """A loop episode's id naming run `after` where it named `before` (any other id as it is)."""
    head, found, tail = nodeid.rpartition(f"/episode={before}:")
    return f"{head}/episode={after}:{tail}" if found else nodeid


def _one_run_twice(label: str, first: Part, second: Part) -> str:
    """Why two different records of one loop episode id cannot be merged."""
    said = f"{label} is in {first.run_dir} and in {second.run_dir} as two different episodes"
    if first.run is None or second.run is None:
        return (
            f"{said}, and not both say which run they are (a run.json is missing), so they may "
            "be one run recorded into in two places: merge would keep one and drop the other; "
            "restore the missing run.json, or merge runs recorded into directories of "
            "different names"
        )
    return (
        f"{said} of one run (run {first.run.run_id}, started {first.run.started} on "
        f"{first.run.host}, as both run.json say): its directory was copied and both copies "
        "were recorded into again, so their episodes took the same ids and merge would keep "
        "one and drop the other. Record further episodes into a new run_dir; merging such "
        "copies is not possible"
    )


def protocol_changes(parts: Sequence[Part]) -> tuple[str, ...]:
    """Why the parts did not run one protocol under one policy: per pair, what differs."""
    protocols = [
        Protocol.of(part.records, None if part.run is None else part.run.settings) for part in parts
    ]
    lines: dict[str, None] = {}  # in order, once each
    for i, one in enumerate(parts):
        for j, other in enumerate(parts[i + 1 :], start=i + 1):
            for difference in protocols[i].differences(protocols[j]):
                lines[difference.line(one.name, other.name)] = None
    return tuple(lines)


@dataclass(frozen=True)
class Merged:
    """The merged rollouts (one record per rollout, from the part named beside it) and what
    merging found on the way."""

    records: tuple[Record, ...]
    sources: tuple[Path, ...]  # the run dir of the part each record was taken from
    exact_duplicates: int
    repeats: int  # rollouts that ran in two parts with the same outcome: the first was kept
    superseded: tuple[str, ...]  # an error in one part, a final outcome in another
    conflicts: tuple[str, ...]  # two different final outcomes of one rollout
    missing: tuple[str, ...]  # planned rollouts that no part ran
    renamed: tuple[str, ...] = ()  # loop runs of one name, told apart

    def notes(self) -> list[str]:
        notes = list(self.renamed)
        if self.exact_duplicates:
            notes.append(f"{self.exact_duplicates} exact duplicate records dropped")
        if self.repeats:
            notes.append(
                f"{self.repeats} rollouts ran in more than one part with the same outcome; the "
                "record of the part listed first was kept"
            )
        notes += self.superseded
        notes += [f"conflict: {line}" for line in self.conflicts]
        notes += [f"missing: {line}" for line in self.missing]
        return notes


def merge_records(parts: Sequence[Part]) -> Merged:
    """One record per rollout (its node id and scene) from `parts`, read in order."""
    kept: dict[str, tuple[Record, Part]] = {}
    exact = repeats = 0
    superseded, conflicts = [], []
    for part in parts:
        for record in part.records:
            key = _json([record.get(keys.NODEID), record[keys.EVAL], record.get(keys.SCENE)])
            if key not in kept:
                kept[key] = (record, part)
                continue
            first, source = kept[key][0], kept[key][1].name
            before, after = first[keys.OUTCOME], record[keys.OUTCOME]
            label = record.get(keys.NODEID) or f"{record[keys.EVAL]} {record.get(keys.SCENE)}"
            if _json(first) == _json(record):
                exact += 1
            elif of_loop(record):  # its id names its run: one run, recorded into twice
                raise MergeRefused(_one_run_twice(label, kept[key][1], part))
            elif before == after:
                repeats += 1
            elif before == OutcomeKind.ERROR:
                kept[key] = (record, part)
                superseded.append(
                    f"{label}: an error in {source} ({first.get(keys.REASON)}) and {after} in "
                    f"{part.name}: kept {after}"
                )
            elif after == OutcomeKind.ERROR:
                superseded.append(
                    f"{label}: {before} in {source} and an error in {part.name} "
                    f"({record.get(keys.REASON)}): kept {before}"
                )
            else:
                conflicts.append(
                    f"{label}: {before} in {source} but {after} in {part.name}; kept {source}'s"
                )
    ordered = sorted(kept.values(), key=_plan_order([r for r, _ in kept.values()]))
    records = tuple(record for record, _ in ordered)
    return Merged(
        records,
        tuple(source.run_dir for _, source in ordered),
        exact,
        repeats,
        tuple(superseded),
        tuple(conflicts),
        missing_rollouts(records, parts) + absent_shards(parts),
        tuple(
            f"{part.run_dir} is another loop run named {part.renamed[0]} (started "
            f"{part.run.started if part.run else '?'} on {part.run.host if part.run else '?'}): "
            f"its episodes' ids name it {part.renamed[1]}"
            for part in parts
            if part.renamed is not None
        ),
    )


def _plan_order(records: Sequence[Record]) -> Callable[[tuple[Record, Part]], tuple]:
    """Sorts (record, part) pairs by Eval (in order of first appearance), then plan index."""
    rank = {eval: i for i, eval in enumerate(dict.fromkeys(r[keys.EVAL] for r in records))}

    def key(kept: tuple[Record, Part]) -> tuple[int, str, int, str]:
        record = kept[0]
        index = record.get(keys.ROLLOUT_INDEX)
        return (
            rank[record[keys.EVAL]],
            _function(record),
            index if isinstance(index, int) else -1,
            str(record.get(keys.NODEID)),
        )

    return key


def _function(record: Record) -> str:
    """The test function a rollout's item belongs to (its node id without the rollout's id)."""
    return str(record.get(keys.NODEID) or "").split("[", 1)[0]


def missing_rollouts(records: Sequence[Record], parts: Sequence[Part] = ()) -> tuple[str, ...]:
    """The rollouts the parts selected that no record ran (a rollout `-k` left out is not
    missing), of the test functions that recorded rollouts (a selection may hold other tests);
    without parts, or for parts that did not record their selection, the plan's."""
    selections = [(part.run.settings if part.run else {}).get(keys.SELECTED) for part in parts]
    if not parts or not all(isinstance(selection, list) for selection in selections):
        return unplanned_rollouts(records)
    selected = {nodeid for selection in selections for nodeid in selection}
    ran = {record.get(keys.NODEID) for record in records}
    per_function: dict[str, list[str]] = {_function(record): [] for record in records}
    for nodeid in sorted(selected):
        per_function.get(nodeid.split("[", 1)[0], []).append(nodeid)
    lines = []
    for function, nodeids in per_function.items():
        absent = [nodeid[len(function) :] for nodeid in nodeids if nodeid not in ran]
        if absent:
            named = listed(absent, 6)
            lines.append(
                f"{function}: {len(absent)} of {len(nodeids)} selected rollouts ran in no part "
                f"({named})"
            )
    return tuple(lines)


def unplanned_rollouts(records: Sequence[Record]) -> tuple[str, ...]:
    """Per Eval (and test function declaring it): the plan indices that no record ran, from
    the plan size (rollout_count) each record carries."""
    planned: dict[tuple[str, str, str], int] = {}
    ran: dict[tuple[str, str, str], set[int]] = {}
    for record in records:
        index, count = record.get(keys.ROLLOUT_INDEX), record.get(keys.ROLLOUT_COUNT)
        if isinstance(index, int) and isinstance(count, int):
            group = (record[keys.EVAL], _function(record), _arm(record))
            planned[group] = max(planned.get(group, 0), count)
            ran.setdefault(group, set()).add(index)
    lines = []
    for (eval, function, arm), count in planned.items():
        absent = sorted(set(range(count)) - ran[(eval, function, arm)])
        if absent:
            lines.append(
                f"eval {eval} ({function}{arm}): {len(absent)} of {count} planned rollouts ran "
                f"in no part (plan indices {_ranges(absent)})"
            )
    return tuple(lines)


def _arm(record: Record) -> str:
    """The arm that runs every planned scene of an A/B run (each arm plans them all; with
    assigned arms the scenes are shared out, so the plan is the arms' together)."""
    if keys.ARM not in record or keys.ASSIGNMENT in record:
        return ""
    return f", arm {record[keys.ARM]}"


def absent_shards(parts: Sequence[Part]) -> tuple[str, ...]:
    """The shards of N that no part is, when every part is a shard of the same N."""
    shards = [part.shard for part in parts]
    counts = {shard[1] for shard in shards if shard is not None}
    if None in shards or len(counts) != 1:
        return ()
    count = counts.pop()
    present = {shard[0] for shard in shards if shard is not None}
    absent = [k for k in range(1, count + 1) if k not in present]
    return tuple(f"no part is shard {k}/{count}; run it and merge again" for k in absent)


def _ranges(numbers: Sequence[int]) -> str:
    spans: list[list[int]] = []
    for number in numbers:
        if spans and spans[-1][1] == number - 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def write_merged(
    out: Path,
    parts: Sequence[Part],
    merged: Merged,
    summary: Summary,
    changes: Sequence[str],
    command: str,
    carried: Verdicts,
) -> Path:
    """Writes the merged run into `out` (new, or an earlier merge's), with the parts' verdicts
    (`carried`); returns its index.html."""
    files = {part.run_dir: part.files for part in parts}
    for record, source in zip(merged.records, merged.sources, strict=True):
        _confined(record, source, out, files[source])  # before anything is written or deleted
    _clear(out, parts)
    write_file(out / RESULTS, "".join(_json(record) + "\n" for record in merged.records))
    for record, source in zip(merged.records, merged.sources, strict=True):
        _link_files(record, source, out, files[source])
    carry_verdicts(carried, out)  # those given on an earlier merge into `out` stay
    run = merged_run_info(out, parts, merged, changes, command)
    run.write(out)
    summary = replace(summary, failures=failure_clusters(merged.records, out))  # traces now here
    summary.write(out, run)
    notes = [f"protocol change allowed: {line}" for line in changes] + merged.notes()
    return write_html(out, Findings(summary, merged.records, run, notes=tuple(notes)))


def _clear(out: Path, parts: Sequence[Part]) -> None:
    """Makes `out` ready for a merge: new, empty, or a run dir an earlier merge wrote."""
    if any(out.resolve() == part.run_dir.resolve() for part in parts):
        raise MergeRefused(f"--out {out} is one of the parts; merge into a new directory")
    if (out / RESULTS).exists():
        earlier = RunInfo.load(out)
        if earlier is None or keys.PARTS not in earlier.settings:
            raise MergeRefused(
                f"--out {out} holds a run that merge did not write; choose a new directory"
            )
        if keys.RESUMED in earlier.settings:
            raise MergeRefused(
                f"--out {out} is a merged run that was resumed since: the rollouts its resume "
                "ran are in no part and a merge into it would drop them; merge into a new "
                f"directory (naming {out} as a part if it should count)"
            )
        for name in (RESULTS, SUMMARY, RUN_INFO, INDEX):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / ROLLOUTS, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)


def _confined(
    record: Record, source: Path, out: Path, files: Mapping[str, str]
) -> list[tuple[Path, Path]]:
    """A kept rollout's video and trace (and the observations its trace kept for the Eval's
    expert, named as it is) as (where it is in its part, where it goes under `out`);
    MergeRefused, naming the part and the rollout, for a name that leads outside either."""
    found = []
    trace = record.get(keys.ROLLOUT_TRACE)
    kept = f"{KEPT}/{Path(trace).stem}.npz" if isinstance(trace, str) else None
    for name in (record.get(keys.VIDEO), trace, kept):
        if not isinstance(name, str):
            continue
        try:
            found.append((inside(source, files.get(name, name)), inside(out, name)))
        except OutsideRun as refused:
            raise MergeRefused(
                f"{source / RESULTS}: rollout {rollout_id(record)} names a file {refused}"
            ) from None
    return found


def _link_files(record: Record, source: Path, out: Path, files: Mapping[str, str]) -> None:
    """A kept rollout's video and trace (and what it kept for the expert), hard-linked (or
    copied) to the same place under `out` (or, renamed with its episode, from its part's own
    name: `files`); a file its part lacks is left out."""
    for origin, target in _confined(record, source, out, files):
        if not origin.is_file() or origin.is_symlink():
            continue
        make_folders(out, *target.relative_to(out).parent.parts)
        target.unlink(missing_ok=True)
        try:
            os.link(origin, target)
        except OSError:  # another filesystem, or one without hard links
            shutil.copy2(origin, target)


def merged_run_info(
    out: Path, parts: Sequence[Part], merged: Merged, changes: Sequence[str], command: str
) -> RunInfo:
    """The first part's run.json (the shared settings, versions and revision) naming the merged
    run, with its parts and what merging found."""
    runs = [part.run for part in parts if part.run is not None]
    base = runs[0] if runs else RunInfo.now(out.name, [], Path.cwd(), _policy_of(merged.records))
    listed = [
        {
            "run_id": part.name,
            "path": str(part.run_dir),
            "rollouts": len(part.records),
            keys.SHARD: None if part.shard is None else f"{part.shard[0]}/{part.shard[1]}",
            **{name: getattr(part.run, name, None) for name in PART_RUN_FIELDS},
            **_loop_fields(part),
        }
        for part in parts
    ]
    commands = [
        c for part in parts for c in (part.run.settings if part.run else {}).get(keys.COMMANDS, ())
    ]
    found = {
        "exact_duplicates_dropped": merged.exact_duplicates,
        "repeats": merged.repeats,
        "errors_superseded": list(merged.superseded),
        "conflicts": list(merged.conflicts),
        "missing": list(merged.missing),
        "protocol_changes_allowed": list(changes),
    }
    return replace(
        base,
        run_id=out.name,
        started=min((run.started for run in runs), default=base.started),
        command=command,
        settings={
            **_shared(base.settings),
            **({keys.COMMANDS: list(dict.fromkeys(commands))} if commands else {}),
            keys.PARTS: listed,
            keys.MERGE: found,
        },
    )


def resumed_run_info(before: RunInfo | None, now: RunInfo) -> RunInfo:
    """run.json of a resumed run: the run as it started (its command, host and start, a merged
    run's parts and what merging found, a loop run's commands) with this session's settings,
    and every resume, this one last, listed under `resumed` (its command, host and start)."""
    if before is None:
        return now
    kept: Mapping[str, Any] = {
        name: before.settings[name]
        for name in (keys.PARTS, keys.MERGE, keys.COMMANDS)
        if name in before.settings
    }
    this = {keys.COMMAND: now.command, "host": now.host, "started": now.started}
    history = [*before.settings.get(keys.RESUMED, ()), this]
    return replace(
        now,
        started=before.started,
        command=before.command,
        host=before.host,
        settings={**now.settings, **kept, keys.RESUMED: history},
    )


def _loop_fields(part: Part) -> dict[str, Any]:
    """What the list of parts shows of a loop run: every command that recorded into it, and the
    run id its episodes' ids name in the merge when another part's run had its id."""
    shown: dict[str, Any] = {}
    commands = (part.run.settings if part.run else {}).get(keys.COMMANDS)
    if commands:
        shown[keys.COMMANDS] = commands
    if part.renamed is not None:
        shown["episodes_named"] = part.renamed[1]
    return shown


def _shared(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A part's run settings without what only that part was (its shard, its merge)."""
    only = (keys.SHARD, keys.PARTS, keys.MERGE, keys.COMMANDS, keys.RUN_UID, keys.RESUMED)
    return {name: value for name, value in settings.items() if name not in only}


def _policy_of(records: Sequence[Record]) -> dict[str, str]:
    """The run setting naming the policy, for parts that wrote no run.json: from the records."""
    names = {str((r.get(keys.POLICY) or {}).get(keys.POLICY_NAME)) for r in records}
    return {keys.POLICY: ", ".join(sorted(names)) or "unknown"}
