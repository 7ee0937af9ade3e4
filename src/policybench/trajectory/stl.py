"""Signal temporal logic over a rollout's signals, scored by robustness: how far a formula held
(positive) or was violated (negative), and at which step (its witness).

A rollout's signals are arrays over its control steps (`Signals`: a name to an array of length T,
or T x d for a vector). Time is the step's start in simulated seconds (the signal `time_s`), and a
temporal operator's window [a, b] counts from each step in those seconds. Semantics, as in Donzé
and Maler (2010), on a finite trace:

- `x <= c`: c - x at each step (a vector: its worst element); `x >= c`: x - c;
- `~phi`: -phi; `phi & psi`: the smaller; `phi | psi`: the larger;
- `Always(phi, (a, b))` at t: the least of phi over the steps t' with time(t') - time(t) in
  [a, b] (+inf when no step lies there: nothing to violate); `Eventually`: the greatest (-inf
  when none);
- `Until(phi, psi, (a, b))` at t: the greatest, over t' in the window, of the smaller of psi at t'
  and the least of phi over [t, t').

A formula's robustness over a rollout is its value at the first step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Signals = Mapping[str, np.ndarray]  # a name to its values per step (T, or T x d)
TIME = "time_s"  # the signal of each step's start, in simulated seconds
PERIOD = "period_s"  # the control period, at every step (a rollout of one step has no spacing)
FOREVER = math.inf
Window = tuple[float, float]


class Formula:
    """A formula of signal temporal logic; `&`, `|` and `~` combine formulas."""

    def robustness(self, signals: Signals, memo: dict[int, np.ndarray] | None = None) -> np.ndarray:
        """Its robustness at every step (computed once per formula and signals, in `memo`)."""
        memo = {} if memo is None else memo
        found = memo.get(id(self))
        if found is None:
            found = memo[id(self)] = self._robustness(signals, memo)
        return found

    def _robustness(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def witness(self, signals: Signals, memo: dict[int, np.ndarray], at: int) -> int:
        """The step that decides its robustness at step `at`: where a violation happens."""
        raise NotImplementedError

    def signal_names(self) -> set[str]:
        raise NotImplementedError

    def __and__(self, other: Formula) -> Formula:
        return And(self, other)

    def __or__(self, other: Formula) -> Formula:
        return Or(self, other)

    def __invert__(self) -> Formula:
        return Not(self)


@dataclass(frozen=True, eq=False)
class Signal:
    """A rollout's signal by name, or one element of a vector signal (`index`); compared with a
    number (or a vector of them) it is a predicate."""

    name: str
    index: int | None = None

    def values(self, signals: Signals) -> np.ndarray:
        if self.name not in signals:
            raise KeyError(
                f"no signal {self.name!r} in this rollout; it has {', '.join(sorted(signals))}"
            )
        values = np.asarray(signals[self.name], dtype=np.float64)
        if self.index is not None:
            if values.ndim < 2 or not -values.shape[1] <= self.index < values.shape[1]:
                shape = values.shape
                raise KeyError(f"signal {self.name!r} of shape {shape} has no [{self.index}]")
            values = values[:, self.index]
        return values

    def __getitem__(self, index: int) -> Signal:
        return Signal(self.name, index)

    def __le__(self, bound: Any) -> Formula:  # type: ignore[override]
        return Predicate(self, "<=", _bound(bound))

    def __ge__(self, bound: Any) -> Formula:  # type: ignore[override]
        return Predicate(self, ">=", _bound(bound))

    def within(self, low: Any, high: Any) -> Formula:
        """low <= signal <= high (elementwise for a vector)."""
        return And(self >= low, self <= high)

    def __repr__(self) -> str:
        return self.name if self.index is None else f"{self.name}[{self.index}]"


def _bound(bound: Any) -> float | tuple[float, ...]:
    if np.ndim(bound) == 0:
        return float(bound)
    return tuple(float(value) for value in np.asarray(bound).reshape(-1))


@dataclass(frozen=True, eq=False)
class Predicate(Formula):
    signal: Signal
    op: str  # "<=" or ">="
    bound: float | tuple[float, ...]

    def _robustness(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        values = self.signal.values(signals)
        bound = np.asarray(self.bound, dtype=np.float64)
        size = 1 if values.ndim == 1 else values.shape[1]
        if bound.ndim and bound.size != size:
            raise ValueError(
                f"{self!r}: signal {self.signal!r} has {size} number(s) a step, the bound "
                f"{bound.size}; give one bound, or one per element (or name an element: "
                f"{self.signal.name}[i])"
            )
        margin = bound - values if self.op == "<=" else values - bound
        return margin if margin.ndim == 1 else margin.min(axis=1)

    def witness(self, signals: Signals, memo: dict[int, np.ndarray], at: int) -> int:
        return at

    def signal_names(self) -> set[str]:
        return {self.signal.name}

    def __repr__(self) -> str:
        bound = self.bound
        shown = (
            f"{bound:g}" if isinstance(bound, float) else f"[{', '.join(f'{b:g}' for b in bound)}]"
        )
        return f"{self.signal!r} {self.op} {shown}"


@dataclass(frozen=True, eq=False)
class Not(Formula):
    formula: Formula

    def _robustness(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        return -self.formula.robustness(signals, memo)

    def witness(self, signals: Signals, memo: dict[int, np.ndarray], at: int) -> int:
        return self.formula.witness(signals, memo, at)

    def signal_names(self) -> set[str]:
        return self.formula.signal_names()

    def __repr__(self) -> str:
        return f"not ({self.formula!r})"


@dataclass(frozen=True, eq=False, init=False)
class _Junction(Formula):
    formulas: tuple[Formula, ...]
    word = ""
    reduce = staticmethod(np.min)  # how the formulas' values combine (`and`: the least)
    choose = staticmethod(np.argmin)  # which formula decides that value

    def __init__(self, *formulas: Formula) -> None:
        if not formulas:
            raise ValueError(f"{type(self).__name__} needs at least one formula")
        object.__setattr__(self, "formulas", formulas)

    def _robustness(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        each = np.stack([formula.robustness(signals, memo) for formula in self.formulas])
        return self.reduce(each, axis=0)

    def witness(self, signals: Signals, memo: dict[int, np.ndarray], at: int) -> int:
        values = np.array([formula.robustness(signals, memo)[at] for formula in self.formulas])
        return self.formulas[int(self.choose(values))].witness(signals, memo, at)

    def signal_names(self) -> set[str]:
        return set().union(*(formula.signal_names() for formula in self.formulas))

    def __repr__(self) -> str:
        return f" {self.word} ".join(f"({formula!r})" for formula in self.formulas)


class And(_Junction):
    word = "and"


class Or(_Junction):
    word = "or"
    reduce = staticmethod(np.max)
    choose = staticmethod(np.argmax)


def steps_of(window: Window, signals: Signals) -> tuple[int, int | None]:
    """A window in seconds as step offsets [first, last] (last None: to the end), from the
    control period (`period_s`, or the steps' spacing in `time_s`)."""
    low, high = window
    if not 0 <= low <= high:
        raise ValueError(f"a window must satisfy 0 <= a <= b, got ({low:g}, {high:g})")
    time = np.asarray(signals[TIME], dtype=np.float64)
    if PERIOD in signals and len(signals[PERIOD]):
        period = float(np.asarray(signals[PERIOD])[0])
    else:
        period = float(time[1] - time[0]) if len(time) > 1 else 1.0
    return _whole_steps(low / period, math.ceil), (
        None if math.isinf(high) else _whole_steps(high / period, math.floor)
    )


# How far from a whole number of steps a window's edge may be and still land on it: a period
# rounded to whole nanoseconds (1/30 s is 33,333,333 ns) puts 0.1 s at 3.00000003 periods. The
# rounding errs by at most 0.5 ns a period (4e-8 of a period at 80 Hz), relative to the edge.
_EDGE_TOLERANCE = 1e-6


def _whole_steps(periods: float, round_to: Any) -> int:
    """An edge `periods` periods from a step, in whole steps (rounded up for a window's start,
    down for its end), an edge within the tolerance of a whole number being that number."""
    nearest = round(periods)
    if abs(periods - nearest) <= _EDGE_TOLERANCE * max(1.0, abs(periods)):
        return int(nearest)
    return int(round_to(periods))


def _window_values(values: np.ndarray, first: int, last: int | None, fill: float) -> np.ndarray:
    """For each step t, the values at t + first .. t + last (to the end), padded with `fill`."""
    steps = len(values)
    last = steps - 1 if last is None else min(last, steps - 1)
    width = max(last - first + 1, 0)
    padded = np.concatenate([values, np.full(first + width, fill)])
    windows = np.lib.stride_tricks.sliding_window_view(padded[first:], width)
    return windows[:steps] if width else np.full((steps, 0), fill)


@dataclass(frozen=True, eq=False)
class _Temporal(Formula):
    formula: Formula
    window: Window = (0.0, FOREVER)
    word = ""
    fill = math.inf  # the value of a window with no step in it
    reduce = staticmethod(np.min)  # how a window's values combine (`always`: the least)
    choose = staticmethod(np.argmin)  # which step of a window decides that value

    def _windows(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        first, last = steps_of(self.window, signals)
        return _window_values(self.formula.robustness(signals, memo), first, last, self.fill)

    def _robustness(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        return self.reduce(self._windows(signals, memo), axis=1, initial=self.fill)

    def witness(self, signals: Signals, memo: dict[int, np.ndarray], at: int) -> int:
        first, _ = steps_of(self.window, signals)
        row = self._windows(signals, memo)[at]
        if math.isinf(self.reduce(row, initial=self.fill)):  # no step, or none decides
            return at
        return self.formula.witness(signals, memo, at + first + int(self.choose(row)))

    def signal_names(self) -> set[str]:
        return self.formula.signal_names()

    def __repr__(self) -> str:
        low, high = self.window
        within = "" if (low, high) == (0.0, FOREVER) else f"[{low:g}, {high:g} s]"
        return f"{self.word}{within} ({self.formula!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Always(_Temporal):
    word = "always"


@dataclass(frozen=True, eq=False, repr=False)
class Eventually(_Temporal):
    """`weak`: a step whose window reaches past the rollout's end is not judged (+inf), where
    the strong reading (the default) asks the rest of the rollout to hold the formula."""

    weak: bool = False
    word = "eventually"
    fill = -math.inf
    reduce = staticmethod(np.max)
    choose = staticmethod(np.argmax)

    def _robustness(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        found = super()._robustness(signals, memo)
        if self.weak:
            _, last = steps_of(self.window, signals)
            if last is not None:
                found[np.arange(len(found)) + last >= len(found)] = math.inf
        return found

    def __repr__(self) -> str:
        return super().__repr__() + (" (weak: not judged past the end)" if self.weak else "")


@dataclass(frozen=True, eq=False)
class Until(Formula):
    """`holding` holds until `reached` does, within `window` (see the module's doc)."""

    holding: Formula
    reached: Formula
    window: Window = (0.0, FOREVER)

    def _candidates(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        """[t, k]: min(reached(t + first + k), least of holding over [t, t + first + k))."""
        first, last = steps_of(self.window, signals)
        phi = self.holding.robustness(signals, memo)
        psi = self.reached.robustness(signals, memo)
        steps = len(phi)
        last = steps - 1 if last is None else min(last, steps - 1)
        prefix = np.full(steps, math.inf)  # least of phi over [t, t + k)
        shifted_phi = np.concatenate([phi, np.full(steps, math.inf)])
        shifted_psi = np.concatenate([psi, np.full(steps, -math.inf)])
        columns = []
        for k in range(0, last + 1):
            if k >= first:
                columns.append(np.minimum(shifted_psi[k : k + steps], prefix))
            prefix = np.minimum(prefix, shifted_phi[k : k + steps])
        return np.stack(columns, axis=1) if columns else np.full((steps, 0), -math.inf)

    def _robustness(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        return self._candidates(signals, memo).max(axis=1, initial=-math.inf)

    def witness(self, signals: Signals, memo: dict[int, np.ndarray], at: int) -> int:
        first, _ = steps_of(self.window, signals)
        row = self._candidates(signals, memo)[at]
        if not len(row) or math.isinf(row.max()):
            return at
        reached_at = at + first + int(np.argmax(row))
        psi = self.reached.robustness(signals, memo)[reached_at]
        phi = self.holding.robustness(signals, memo)[at:reached_at]
        if not len(phi) or psi <= phi.min():
            return self.reached.witness(signals, memo, reached_at)
        return self.holding.witness(signals, memo, at + int(np.argmin(phi)))

    def signal_names(self) -> set[str]:
        return self.holding.signal_names() | self.reached.signal_names()

    def __repr__(self) -> str:
        low, high = self.window
        within = "" if (low, high) == (0.0, FOREVER) else f"[{low:g}, {high:g} s]"
        return f"({self.holding!r}) until{within} ({self.reached!r})"


@dataclass(frozen=True)
class Margin:
    """A spec over one rollout: its robustness (positive: held by that much; negative: violated),
    the step that decides it, that step's time and the signals' values there."""

    value: float
    step: int
    time_s: float
    values: Mapping[str, Any] = field(default_factory=dict)
    first: int | None = None  # of a violated `always`: the first step it did not hold at

    @property
    def held(self) -> bool:
        return self.value >= 0


def margin_of(formula: Formula, signals: Signals) -> Margin:
    """`formula`'s robustness over the rollout (at its first step) and its witness."""
    memo: dict[int, np.ndarray] = {}
    value = float(formula.robustness(signals, memo)[0])
    step = formula.witness(signals, memo, 0)
    shown = {}
    for name in sorted(formula.signal_names()):
        at = np.asarray(signals[name])[step]
        shown[name] = np.round(at, 6).tolist() if np.ndim(at) else round(float(at), 6)
    first = None
    if isinstance(formula, Always) and value < 0:
        start, last = steps_of(formula.window, signals)
        inner = formula.formula.robustness(signals, memo)[
            start : None if last is None else last + 1
        ]
        first = start + int(np.argmax(inner < 0))
    return Margin(value, step, float(np.asarray(signals[TIME])[step]), shown, first)
