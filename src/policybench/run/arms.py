"""An A/B run's arms in its records and reports: their names in run settings and item ids, and
blinding (`--blind`): records sealed to letters, the names kept aside until `report unblind`."""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from policybench import keys
from policybench.run.files import LINES_LIMIT, open_append, read_json, read_text, write_file

ARM_IN_ID = "policy"  # an A/B run's item ids end with the arm: `task/seed=3/policy=B`
# Run settings of an A/B run: the arms' labels in run order, how scenes were assigned, and a
# digest of the blinding (letters and key) that tells two blinded runs apart without names.
ARMS, ASSIGN, BLINDING = "arms", "assign", "blinding"
BLINDED = "(blinded)"
UNBLINDED = "unblinded"  # the run setting `report unblind` adds
# The run directory's files the report never reads: the letters' names, the sealed descriptions.
BLINDING_FILE, SEALED_FILE = "blinding.json", "blinding-policies.jsonl"
COMMAND_LINE = "command_line"  # in blinding.json: the command as typed
ORDER = "order"  # in blinding.json: the arms' labels in the run's order
WITHHELD = "withheld"  # in blinding-policies.jsonl: the record's fields a blinded one lacks
# What a blinded latency sweep's records lack until unblinded: what a rollout's latency made of
# its calls (each setting's delay, latency and stale share would tell its letter).
REALTIME_FIELDS = (
    keys.CALL_LATENCY_MS,
    keys.DELAY_STEPS_MEAN,
    keys.LATENCY_MS_P50,
    keys.LATENCY_MS_P95,
    keys.LATENCY_MS_P99,
    keys.STALE_ACTION_SHARE,
    keys.FRESH_ACTION_HZ,
    keys.CALLS_PAST_HORIZON,
    keys.MODEL_CALLS,
)
# What a blinded record keeps of its policy's description: run-wide settings, the same per arm.
KEPT = (
    keys.INFERENCE_LATENCY,
    keys.LATENCY_PROFILE,
    keys.CHUNK_ANCHOR,
    keys.EXECUTE_STEPS,
    keys.WARM_START,
)
# An arm label: letters, digits, _ . - and, in a latency sweep's (`steps:2`), a colon; at the
# end of a pytest item's id (`...]`) or of a wrapped loop's episode id.
_ARM_AT_END = re.compile(rf"/{ARM_IN_ID}=([A-Za-z0-9_.:-]+)(\]?)$")


def arm_order(records: Iterable[Mapping[str, Any]], listed: Sequence[str] = ()) -> tuple[str, ...]:
    """The arms the records ran under: those `listed` (the run's order) first, then the rest
    sorted; empty for a one-policy run."""
    seen = {str(record[keys.ARM]) for record in records if keys.ARM in record}
    return tuple([arm for arm in listed if arm in seen] + sorted(seen - set(listed)))


@dataclass(frozen=True)
class Blinding:
    """Which policy each letter stands for; `key` shuffled the letters (same key, same
    letters: give every shard of one blinded run the same `--blind KEY`)."""

    key: str
    letters: Mapping[str, Mapping[str, str]]  # letter -> its arm's label and policy
    # A latency sweep's arms' labels in the run's order (the command's), which unblinding
    # restores; not part of the digest. Without it arms unblind in letter order.
    order: Sequence[str] = field(default=(), compare=False)

    @property
    def digest(self) -> str:
        """Tells blindings apart (for resume and merge) without telling what they hide."""
        text = json.dumps([self.key, self.letters], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def write(self, run_dir: Path, command: str, joined: bool = False) -> None:
        """Writes blinding.json, unless the run (being resumed) has one; `joined`: an arm joined
        the run (a wrapped loop's), so its letters are written anew, with the command it has."""
        path = run_dir / BLINDING_FILE
        if path.exists():
            if not joined:
                return
            command = read_json(path)[COMMAND_LINE]
        run_dir.mkdir(parents=True, exist_ok=True)
        data: dict[str, Any] = {"key": self.key, "letters": self.letters, COMMAND_LINE: command}
        if self.order:
            data[ORDER] = list(self.order)
        write_file(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def joined(self, label: str, policy: str) -> tuple[Blinding, str]:
        """The blinding with the arm `label` lettered, and its letter: an arm that joins a run
        one loop at a time (policybench.wrap's). Letters are dealt in pairs (A and B, C and D,
        ...); which of a pair the earlier arm gets is shuffled by the key, so the letters of two
        arms say nothing of which loop started first."""
        for letter, named in self.letters.items():
            if named["label"] == label:
                return self, letter
        taken = len(self.letters)
        if taken == len(string.ascii_uppercase):
            raise ValueError(f"a blinded run letters at most {taken} arms; {label!r} is one more")
        pair, second = divmod(taken, 2)
        flipped = random.Random(f"blind/{self.key}/{pair}").random() < 0.5
        letter = string.ascii_uppercase[2 * pair + (second != flipped)]
        named = {**self.letters, letter: {"label": label, keys.POLICY: policy}}
        return Blinding(self.key, dict(sorted(named.items()))), letter

    @classmethod
    def load(cls, run_dir: Path) -> Blinding | None:
        path = run_dir / BLINDING_FILE
        if not path.is_file():
            return None
        data = read_json(path)
        return cls(data["key"], data["letters"], tuple(data.get(ORDER, ())))


def blinded_command(args: Sequence[str]) -> list[str]:
    """Command-line arguments with every `--policy` value hidden."""
    shown, hide = [], False
    for arg in args:
        if hide:
            shown.append(BLINDED)
        elif arg.startswith("--policy="):
            shown.append(f"--policy={BLINDED}")
        else:
            shown.append(arg)
        hide = arg == "--policy"
    return shown


def sealed_description(
    described: Mapping[str, Any], letter: Any, kept_fields: Sequence[str] = KEPT
) -> dict[str, Any]:
    """What a blinded run's files show of a policy's description: its letter and the run-wide
    settings (`kept_fields`: `KEPT` but those that tell the arms apart), nothing more."""
    kept = {name: described[name] for name in kept_fields if name in described}
    return {keys.POLICY_NAME: letter, **kept}


def telling_texts(arm: Any, described: Any, kept_fields: Sequence[str] = KEPT) -> list[str]:
    """What tells an arm apart in a message: its name and every text of its policy's
    description (of three characters or more), but the run-wide fields a blinded record
    keeps."""
    texts: list[str] = []

    def gather(value: Any) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, Mapping):
            for inner in value.values():
                gather(inner)
        elif isinstance(value, list | tuple):
            for inner in value:
                gather(inner)

    gather(arm)
    if isinstance(described, Mapping):
        gather({name: value for name, value in described.items() if name not in kept_fields})
    return [text for text in texts if len(text.strip()) >= 3]  # "A", "0", "on" name nothing


def whole_words(names: Sequence[str]) -> re.Pattern[str] | None:
    """Each of `names` where it stands as a whole (not inside a longer word), the longest first
    so that a name that begins another is not replaced inside it; None for none."""
    if not names:
        return None
    alternatives = []
    for name in sorted(set(names), key=len, reverse=True):
        before = r"(?<!\w)" if re.match(r"\w", name) else ""
        after = r"(?!\w)" if re.search(r"\w$", name) else ""
        alternatives.append(before + re.escape(name) + after)
    return re.compile("|".join(alternatives))


class Sealer:
    """Blinds records on their way to results.jsonl: the policy's description (its name,
    checkpoint, codec) goes to the sealed file, the record keeps its letter."""

    def __init__(
        self,
        run_dir: Path,
        servers: Iterable[tuple[str, str]] = (),
        kept_fields: Sequence[str] = KEPT,
    ) -> None:
        """`servers`: (URL as messages show it, letter) of each arm served at its own URL;
        `kept_fields`: what a record keeps of its policy's description (see sealed_description)."""
        self.path = run_dir / SEALED_FILE
        self.kept_fields = tuple(kept_fields)
        # Where the latency tells the arms apart (a latency sweep), so do the real-time figures.
        self.withheld = () if keys.INFERENCE_LATENCY in self.kept_fields else REALTIME_FIELDS
        self._file: IO[str] | None = None
        letters: dict[str, set[str]] = {}
        for url, letter in servers:
            letters.setdefault(url, set()).add(letter)
        # A URL that serves several arms tells none apart; the longest first, so that a URL
        # that begins another is not replaced inside it.
        self._servers = {
            url: f"<arm {next(iter(ls))}'s server>" for url, ls in letters.items() if len(ls) == 1
        }
        urls = sorted(self._servers, key=len, reverse=True)
        self._url = re.compile("|".join(map(re.escape, urls))) if urls else None

    def _without_urls(self, text: Any) -> Any:
        """`text` with each arm's URL replaced by its letter's placeholder (the URL tells the
        arms apart)."""
        if self._url is None or not isinstance(text, str):
            return text
        return self._url.sub(lambda match: self._servers[match.group(0)], text)

    def seal(self, record: Mapping[str, Any]) -> dict[str, Any]:
        described = record.get(keys.POLICY)
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open_append(self.path)
        withheld = {name: record[name] for name in self.withheld if name in record}
        sealed = {keys.NODEID: record.get(keys.NODEID), keys.POLICY: described}
        if withheld:
            sealed[WITHHELD] = withheld
        self._file.write(json.dumps(sealed, sort_keys=True) + "\n")
        self._file.flush()
        sealed_record = {name: value for name, value in record.items() if name not in withheld}
        # a message (an error's reason, a retry's) names neither the arm's server nor its policy
        names = whole_words(telling_texts(None, described, self.kept_fields))
        hidden = f"<arm {record.get(keys.ARM)}>"

        def blinded(text: Any) -> Any:
            text = self._without_urls(text)
            return names.sub(hidden, text) if names and isinstance(text, str) else text

        if keys.REASON in record:
            sealed_record[keys.REASON] = blinded(record[keys.REASON])
        if isinstance(record.get(keys.RETRIED), list):
            sealed_record[keys.RETRIED] = list(map(blinded, record[keys.RETRIED]))
        if not isinstance(described, Mapping):
            return sealed_record
        sealed_policy = sealed_description(described, record.get(keys.ARM), self.kept_fields)
        return {**sealed_record, keys.POLICY: sealed_policy}

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass(frozen=True)
class Unsealed:
    """What a blinded run's directory keeps aside: the letters, the command, the descriptions."""

    letters: Mapping[str, Mapping[str, str]]
    command: str
    described: Mapping[str, Any]  # node id -> the policy's description, the last one sealed
    withheld: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # node id -> fields
    order: Sequence[str] = ()  # a sweep's arms' labels in the run's order (empty: letters')

    @classmethod
    def read(cls, run_dir: Path) -> Unsealed:
        path = run_dir / BLINDING_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{run_dir} holds no {BLINDING_FILE}: it is not a blinded run (or its key was "
                "moved); only a run started with --blind can be unblinded"
            )
        data = read_json(path)
        described: dict[str, Any] = {}
        withheld: dict[str, Mapping[str, Any]] = {}
        sealed = run_dir / SEALED_FILE
        for line in read_text(sealed, LINES_LIMIT).splitlines() if sealed.is_file() else ():
            entry = json.loads(line)
            described[entry[keys.NODEID]] = entry[keys.POLICY]
            withheld[entry[keys.NODEID]] = entry.get(WITHHELD) or {}
        order = tuple(data.get(ORDER, ()))
        return cls(data["letters"], data[COMMAND_LINE], described, withheld, order)

    def label(self, letter: str) -> str:
        return str(self.letters[letter]["label"]) if letter in self.letters else letter

    def record(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """A blinded record with its arm's name, its item id and its policy's description."""
        letter = record.get(keys.ARM)
        if letter is None:
            return dict(record)
        nodeid = record.get(keys.NODEID)
        unblinded = {**record, keys.ARM: self.label(str(letter))}
        if isinstance(nodeid, str):
            unblinded[keys.NODEID] = self.nodeid(nodeid, str(letter))
            if nodeid in self.described:
                unblinded[keys.POLICY] = self.described[nodeid]
            unblinded.update(self.withheld.get(nodeid, {}))
        return unblinded

    def nodeid(self, nodeid: str, letter: str | None = None) -> str:
        """A blinded item id with its arm's name in place of the letter it ends with (`letter`
        where given, else the one the id names)."""
        return _ARM_AT_END.sub(
            lambda end: f"/{ARM_IN_ID}={self.label(letter or end.group(1))}{end.group(2)}", nodeid
        )

    def verdict(self, verdict: Mapping[str, Any]) -> dict[str, Any]:
        """A verdict given on a blinded rollout, naming the rollout by its unblinded id."""
        rollout = verdict.get(keys.VERDICT_ROLLOUT)
        if not isinstance(rollout, str):
            return dict(verdict)
        return {**verdict, keys.VERDICT_ROLLOUT: self.nodeid(rollout)}

    def settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """A blinded run's settings with the arms named, in the run's order (the command's,
        where blinding.json keeps it)."""
        letters = [str(letter) for letter in settings.get(ARMS) or ()]
        rank = {label: i for i, label in enumerate(self.order)}
        letters.sort(key=lambda letter: rank.get(self.label(letter), len(rank)))
        return {
            **settings,
            keys.POLICY: [str(self.letters[letter][keys.POLICY]) for letter in letters],
            ARMS: [self.label(letter) for letter in letters],
            UNBLINDED: True,
        }


def unblind_lines(path: Path, unsealed: Unsealed, verdicts: bool = False) -> None:
    """Rewrites results.jsonl with every record unblinded (with `verdicts`, verdicts.jsonl with
    every verdict naming its rollout's unblinded id, so the verdicts still meet their rollouts),
    atomically (a crash meanwhile leaves the old file); a line that is not a record or a verdict
    (cut off by a killed run) stays as it was. A file that is not there is left so."""
    if not path.is_file():
        return
    unblind = unsealed.verdict if verdicts else unsealed.record
    lines = []
    for line in read_text(path, LINES_LIMIT).splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            line = json.dumps(unblind(record), sort_keys=True)
        lines.append(line + "\n")
    write_file(path, "".join(lines))
