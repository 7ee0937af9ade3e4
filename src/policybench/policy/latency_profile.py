"""Latency profiles: a model call's latency as a distribution in a small JSON file (an empirical
sample, or a scipy.stats family), drawn from with a seeded generator so a score needs no host."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

# The file's keys, spelled once (`policybench latency record` writes with these).
FORMAT, VERSION = "format", "version"
FORMAT_NAME, FORMAT_VERSION = "policybench-latency-profile", 1
SAMPLE = "sample_s"  # an empirical sample of call latencies, in seconds (drawn by resampling)
FAMILY, PARAMS = "family", "params"  # a continuous scipy.stats distribution and its parameters
RECORDED = "recorded"  # where the latencies came from (free-form; not part of the digest)
# What describe() shows.
KIND, DIGEST, CALLS, MEDIAN, P95, CLIPPED = "kind", "digest", "n", "median_s", "p95_s", "clipped"
EMPIRICAL, PARAMETRIC = "empirical", "parametric"
DIGEST_CHARS = 12
_HEAD = f'"{FORMAT}": "{FORMAT_NAME}", "{VERSION}": {FORMAT_VERSION}'
EXAMPLE = (
    f'{{{_HEAD}, "{SAMPLE}": [0.11, 0.12, 0.15]}} or '
    f'{{{_HEAD}, "{FAMILY}": "lognorm", "{PARAMS}": {{"s": 0.3, "scale": 0.12}}}}'
)


@dataclass(frozen=True)
class LatencyProfile:
    """A distribution of model-call latencies read from `path`. Draws are >= 0: a parametric
    family whose support reaches below 0 is clipped at 0 (its `clipped` share says how often)."""

    path: Path
    digest: str  # of the distribution alone (kind and sample, or family and parameters)
    sample_s: tuple[float, ...] = ()  # empirical: the latencies resampled
    family: str | None = None  # parametric: a continuous scipy.stats distribution's name
    params: Mapping[str, float] = field(default_factory=dict)
    recorded: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _frozen: Any = field(default=None, compare=False, repr=False)  # the frozen scipy family

    @classmethod
    def load(cls, path: str | Path) -> LatencyProfile:
        """The profile in `path`; ValueError naming the file, what was expected and what came."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(
                f"latency profile {path}: no such file; record one with `policybench latency "
                f"record --policy-url ws://HOST:PORT -o {path.name}` or write one such as {EXAMPLE}"
            ) from None
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"latency profile {path}: cannot be read: {error}") from None
        try:
            content = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"latency profile {path}: not JSON ({error}); expected an object such as {EXAMPLE}"
            ) from None
        return cls.of_content(content, path)

    @classmethod
    def of_content(cls, content: Any, path: str | Path) -> LatencyProfile:
        """The profile a file's parsed JSON `content` describes; `path` names it in errors."""
        path = Path(path)

        def wrong(what: str) -> ValueError:
            return ValueError(f"latency profile {path}: {what}")

        if not isinstance(content, dict):
            raise wrong(f"expected a JSON object such as {EXAMPLE}; got {_shown(content)}")
        if content.get(FORMAT) != FORMAT_NAME:
            raise wrong(f'expected "{FORMAT}": "{FORMAT_NAME}"; got {_shown(content.get(FORMAT))}')
        if content.get(VERSION) != FORMAT_VERSION:
            raise wrong(
                f'expected "{VERSION}": {FORMAT_VERSION} (this policybench reads version '
                f"{FORMAT_VERSION}); got {_shown(content.get(VERSION))}"
            )
        recorded = content.get(RECORDED, {})
        if not isinstance(recorded, dict):
            raise wrong(f'expected "{RECORDED}" to be an object; got {_shown(recorded)}')
        has_sample, has_family = SAMPLE in content, FAMILY in content
        if has_sample == has_family:
            found = "both" if has_sample else "neither"
            raise wrong(
                f'expected either "{SAMPLE}" (an empirical sample, in seconds) or "{FAMILY}" '
                f'and "{PARAMS}" (a scipy.stats distribution); got {found}'
            )
        if has_sample:
            sample = _sample(content[SAMPLE], wrong)
            digest = _digest({SAMPLE: list(sample)})
            return cls(path, digest, sample_s=sample, recorded=recorded)
        family, params, frozen = _family(content[FAMILY], content.get(PARAMS, {}), wrong)
        digest = _digest({FAMILY: family, PARAMS: params})
        return cls(path, digest, family=family, params=params, recorded=recorded, _frozen=frozen)

    def __hash__(self) -> int:
        return hash((self.path, self.digest))

    @property
    def kind(self) -> str:
        return PARAMETRIC if self.family is not None else EMPIRICAL

    def draw_seconds(self, rng: np.random.Generator) -> float:
        """One call's latency in seconds (>= 0), drawn with `rng`: equal generators draw equal
        latencies, on any host."""
        if self._frozen is None:
            return self.sample_s[int(rng.integers(len(self.sample_s)))]
        return max(0.0, float(self._frozen.rvs(random_state=rng)))

    def quantile_s(self, q: float) -> float:
        """The latency below which a share `q` of draws fall (0 <= q <= 1)."""
        if self._frozen is None:
            return float(np.quantile(self.sample_s, q))
        return max(0.0, float(self._frozen.ppf(q)))

    def share_above_s(self, seconds: float) -> float:
        """The share of draws longer than `seconds`."""
        if self._frozen is None:
            return float(np.mean(np.asarray(self.sample_s) > seconds))
        return float(self._frozen.sf(seconds)) if seconds >= 0 else 1.0

    def describe(self) -> dict[str, Any]:
        """What a record shows of the profile: its kind, digest, sample size or family and
        parameters, median and 95th percentile (and the share of draws clipped at 0)."""
        shown: dict[str, Any] = {KIND: self.kind, DIGEST: self.digest}
        if self._frozen is None:
            shown[CALLS] = len(self.sample_s)
        else:
            shown[FAMILY] = self.family
            shown[PARAMS] = dict(self.params)
            clipped = float(self._frozen.cdf(0.0))
            if clipped > 0:
                shown[CLIPPED] = clipped
        shown[MEDIAN] = self.quantile_s(0.5)
        shown[P95] = self.quantile_s(0.95)
        return shown


def profile_content(
    sample_s: Sequence[float], recorded: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A profile file's content for an empirical sample (seconds), with where it came from."""
    content: dict[str, Any] = {
        FORMAT: FORMAT_NAME,
        VERSION: FORMAT_VERSION,
        SAMPLE: [float(value) for value in sample_s],
    }
    if recorded:
        content[RECORDED] = dict(recorded)
    return content


def _sample(value: Any, wrong: Any) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise wrong(
            f'expected "{SAMPLE}" to be a list of latencies in seconds; got {_shown(value)}'
        )
    if not value:
        raise wrong(
            f'"{SAMPLE}" is empty; expected at least one latency in seconds (e.g. [0.12, 0.15])'
        )
    for index, item in enumerate(value):
        number = isinstance(item, int | float) and not isinstance(item, bool)
        if not (number and math.isfinite(item) and item >= 0):
            raise wrong(
                f'expected every latency in "{SAMPLE}" to be a finite number of seconds >= 0; '
                f"item {index} is {_shown(item)}"
            )
    return tuple(float(item) for item in value)


def _family(name: Any, params: Any, wrong: Any) -> tuple[str, dict[str, float], Any]:
    """The family's name, its parameters and the frozen scipy distribution."""
    distribution = getattr(stats, name, None) if isinstance(name, str) else None
    if not isinstance(distribution, stats.rv_continuous):
        kind = "a discrete one" if isinstance(distribution, stats.rv_discrete) else "unknown"
        raise wrong(
            f'expected "{FAMILY}" to name a continuous scipy.stats distribution (e.g. lognorm, '
            f"gamma, norm, uniform); got {_shown(name)} ({kind})"
        )
    shapes = [shape for shape in (distribution.shapes or "").replace(" ", "").split(",") if shape]
    accepted = [*shapes, "loc", "scale"]
    if not isinstance(params, dict):
        raise wrong(f'expected "{PARAMS}" to be an object of {accepted}; got {_shown(params)}')
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise wrong(f"{name} takes the parameters {accepted}; got unknown {unknown}")
    missing = [shape for shape in shapes if shape not in params]
    if missing:
        raise wrong(f"{name} needs its shape parameters {shapes}; {missing} not given")
    for parameter, value in params.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise wrong(f"{name}'s parameter {parameter} must be a finite number; got {value!r}")
    values = {parameter: float(value) for parameter, value in sorted(params.items())}
    frozen = distribution(**values)
    median = float(frozen.median())
    if not math.isfinite(median):
        raise wrong(
            f"{name} is not defined for the parameters {values} (scipy.stats finds them out of "
            f"its domain); its parameters are {accepted}"
        )
    return name, values, frozen


def _digest(distribution: Mapping[str, Any]) -> str:
    canonical = json.dumps(
        {FORMAT: FORMAT_NAME, VERSION: FORMAT_VERSION, **distribution},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:DIGEST_CHARS]


def _shown(value: Any, limit: int = 80) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
