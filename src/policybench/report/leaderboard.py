"""A leaderboard of your own runs: policies x Evals, each cell the newest run of that policy on the
Eval's current protocol, with its success and interval; a policy's rank on an Eval is one plus the
number of policies significantly better there (each pair compared as `report compare` compares
two runs, paired by scene where the scenes match; every pair of every Eval adjusted together by
Holm), so policies the data cannot separate share a rank. Published results stand beside it."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.report.compare import ALPHA, compare_runs
from policybench.report.history import RecordsOf, listed_runs, open_store, update
from policybench.report.jinja import environment
from policybench.report.markdown import escaped
from policybench.report.paired import Adjustment, adjust
from policybench.report.published import Published, PublishedResult, catalog
from policybench.run.files import write_file
from policybench.run.records import Tally, tally_of

Records = Sequence[Mapping[str, Any]]
LEADERBOARD_HTML, LEADERBOARD_MD = "leaderboard.html", "leaderboard.md"


@dataclass(frozen=True)
class Cell:
    """A policy's standing on one Eval: its newest comparable run's rollouts there."""

    policy: str
    eval: str
    run_id: str
    tally: Tally
    rank: int = 1
    better_than: tuple[str, ...] = ()  # the policies it beats significantly here

    @property
    def interval(self) -> tuple[float, float] | None:
        return self.tally.interval()


@dataclass(frozen=True)
class Pair:
    """Two policies compared on one Eval (`after` minus `before`), its p-value adjusted."""

    eval: str
    before: str
    after: str
    design: str
    difference: float
    p_value: float
    adjusted_p: float

    @property
    def significant(self) -> bool:
        return self.adjusted_p < ALPHA


@dataclass(frozen=True)
class Board:
    evals: tuple[str, ...]
    policies: tuple[str, ...]
    cells: Mapping[tuple[str, str], Cell]  # (policy, eval) -> its cell
    pairs: tuple[Pair, ...]
    published: Mapping[str, tuple[tuple[Published, PublishedResult], ...]]  # per Eval
    not_comparable: tuple[str, ...]  # runs left out, and why

    def markdown(self) -> str:
        head = "| policy | " + " | ".join(self.evals) + " |"
        lines = ["## policybench leaderboard", "", head, "|" + "---|" * (len(self.evals) + 1)]
        for policy in self.policies:
            cells = [self._shown(self.cells.get((policy, e))) for e in self.evals]
            lines.append(f"| {escaped(policy)} | " + " | ".join(cells) + " |")
        for eval, entries in self.published.items():
            for entry, result in entries:
                cells = [f"{100 * result.rate:.1f}%" if e == eval else "" for e in self.evals]
                named = f"[{escaped(entry.name)}]({entry.source}) (published)"
                lines.append(f"| {named} | " + " | ".join(cells) + " |")
        lines += ["", f"Rank: 1 + the policies significantly better on that Eval ({_method()})."]
        lines += [f"- {escaped(said)}" for said in self.not_comparable]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _shown(cell: Cell | None) -> str:
        if cell is None:
            return "-"
        low, high = cell.interval or (0.0, 0.0)
        return (
            f"#{cell.rank} {100 * (cell.tally.rate or 0):.1f}% [{100 * low:.0f}, {100 * high:.0f}] "
            f"({cell.tally.solved}/{cell.tally.rollouts})"
        )


def _method() -> str:
    return (
        f"each pair of policies compared as `report compare` does, paired by scene where the "
        f"scenes match (McNemar), else stratified by task (Fisher); every pair of every Eval "
        f"adjusted together by Holm, at {ALPHA}"
    )


Row = tuple[str, str, str, str, str, RecordsOf]  # started, run, policy, Eval, protocol, store


def leaderboard(roots: Sequence[Path]) -> Board:
    """The board of every run under `roots` (folders of runs, as `policybench history` reads):
    their rollouts as the history's store keeps them, brought up to date first."""
    with ExitStack() as stores:
        rows: list[Row] = []
        for root in roots:
            store = stores.enter_context(closing(open_store(root)))
            update(store, root)
            store.commit()  # the runs read, kept for the next call
            runs = {run["run_id"]: run for run in listed_runs(store)}
            records = RecordsOf(store)
            rows += [
                (runs[run]["started"] or "", run, runs[run][keys.POLICY] or "", eval, line, records)
                for run, eval, line in store.execute("SELECT run_id, eval, line FROM evals")
                if run in runs
            ]
        return _ranked(*_chosen(rows))


def _chosen(rows: Sequence[Row]) -> tuple[dict[tuple[str, str], tuple[str, Records]], list[str]]:
    """Per (policy, Eval), its newest run on the protocol of the Eval's newest run, with its
    rollouts there; and a line for each policy left out for want of one."""
    chosen: dict[tuple[str, str], tuple[str, Records]] = {}  # (policy, eval) -> run, rollouts
    other: dict[tuple[str, str], str] = {}  # ... -> its newest run, on another protocol
    for eval in sorted({row[3] for row in rows}):
        mine = sorted((r for r in rows if r[3] == eval), key=lambda r: r[:2], reverse=True)
        current = mine[0][4]  # the protocol of the Eval's newest run
        for _, run, policy, _, line, records in mine:
            for name, members in _by_policy(records(run, eval), policy).items():
                if (name, eval) in chosen:
                    continue
                if line == current:
                    chosen[(name, eval)] = (run, members)
                else:
                    other.setdefault((name, eval), run)
    left_out = [
        f"{name} on {eval}: left out, its runs ({run} the newest) ran another protocol than "
        f"{eval}'s newest run"
        for (name, eval), run in sorted(other.items())
        if (name, eval) not in chosen
    ]
    return chosen, left_out


def _by_policy(records: Records, policy: str) -> dict[str, list[Mapping[str, Any]]]:
    """A run's rollouts of an Eval per policy: its arms' own in an A/B run."""
    found: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        arm = record.get(keys.ARM)
        found.setdefault(str(arm) if arm is not None else policy, []).append(record)
    return found


def _ranked(chosen: Mapping[tuple[str, str], tuple[str, Records]], left_out: list[str]) -> Board:
    evals = tuple(sorted({eval for _, eval in chosen}))
    tested = []
    for eval in evals:
        names = sorted(policy for policy, e in chosen if e == eval)
        for before, after in itertools.combinations(names, 2):
            comparison = compare_runs(chosen[(before, eval)][1], chosen[(after, eval)][1])
            if comparison.evals:
                row = comparison.evals[0]
                tested.append((eval, before, after, row.design.value, row.difference, row.p_value))
    adjusted = adjust([t[-1] for t in tested], Adjustment.HOLM)
    pairs = tuple(Pair(*t, q) for t, q in zip(tested, adjusted, strict=True))
    cells = {}
    for (policy, eval), (run, members) in chosen.items():
        beats = [
            p for p in pairs if p.eval == eval and p.significant and policy in (p.before, p.after)
        ]
        wins = [p.before if p.after == policy else p.after for p in beats if _winner(p) == policy]
        losses = [p for p in beats if _winner(p) != policy]
        cells[(policy, eval)] = Cell(
            policy, eval, run, tally_of(members), 1 + len(losses), tuple(sorted(wins))
        )
    policies = tuple(sorted({p for p, _ in chosen}, key=lambda p: _standing(p, cells, evals)))
    published = {
        eval: tuple(
            (entry, result)
            for entry in catalog()
            for result in entry.results
            if result.evals == (eval,) and result.task is None
        )
        for eval in evals
    }
    return Board(evals, policies, cells, pairs, {e: p for e, p in published.items() if p},
                 tuple(left_out))  # fmt: skip


def _winner(pair: Pair) -> str:
    return pair.after if pair.difference > 0 else pair.before


def _standing(policy: str, cells: Mapping[tuple[str, str], Cell], evals: Sequence[str]) -> tuple:
    """A policy's place in the rows: by its mean rank over the Evals it ran, then its mean
    success there, then its name."""
    mine = [cells[(policy, e)] for e in evals if (policy, e) in cells]
    rank = sum(cell.rank for cell in mine) / len(mine)
    return (rank, -sum(cell.tally.rate or 0.0 for cell in mine) / len(mine), policy)


def write_board(board: Board, roots: Sequence[Path], out: Path) -> tuple[Path, Path]:
    """`leaderboard.html` and `leaderboard.md` in `out`."""
    env = environment()
    env.filters["pct"] = lambda value, digits=1: "-" if value is None else f"{value:.{digits}%}"
    html = env.get_template("leaderboard.html.j2").render(
        board=board, roots=[str(root) for root in roots], method=_method()
    )
    page, text = out / LEADERBOARD_HTML, out / LEADERBOARD_MD
    write_file(page, html)
    write_file(text, board.markdown())
    return page, text
