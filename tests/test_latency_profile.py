"""Latency profiles written by hand: an empirical sample and a scipy.stats family each draw the
same latencies from equally seeded generators and other ones from others, are digested by their
distribution alone, and a bad file is a ValueError naming the file, what was expected and what
came."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from policybench.policy.latency import InferenceLatency, LatencyMode
from policybench.policy.latency_profile import LatencyProfile

HEAD = {"format": "policybench-latency-profile", "version": 1}
EMPIRICAL = {**HEAD, "sample_s": [0.08, 0.1, 0.11, 0.12, 0.15, 0.3]}
LOGNORMAL = {**HEAD, "family": "lognorm", "params": {"s": 0.3, "scale": 0.12}}
# A normal reaching below 0: its draws are clipped at 0.
NORMAL = {**HEAD, "family": "norm", "params": {"loc": 0.02, "scale": 0.05}}
DRAWS = 200


def written(directory: Path, content: object, name: str = "profile.json") -> Path:
    path = directory / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def draws(profile: LatencyProfile, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [profile.draw_seconds(rng) for _ in range(DRAWS)]


@pytest.mark.parametrize(
    "content", [EMPIRICAL, LOGNORMAL, NORMAL], ids=["sample", "lognorm", "norm"]
)
def test_equally_seeded_generators_draw_identical_latencies_and_others_differ(tmp_path, content):
    profile = LatencyProfile.load(written(tmp_path, content))
    again = LatencyProfile.load(written(tmp_path, content, "copy.json"))
    first = draws(profile, seed=7)
    assert first == draws(again, seed=7)
    assert first != draws(profile, seed=8)
    assert all(isinstance(value, float) and value >= 0 for value in first)


def test_an_empirical_profile_resamples_its_sample(tmp_path):
    profile = LatencyProfile.load(written(tmp_path, EMPIRICAL))
    drawn = draws(profile, seed=1)
    assert set(drawn) == set(EMPIRICAL["sample_s"])  # every value drawn, nothing else
    shown = profile.describe()
    assert shown == {
        "kind": "empirical",
        "digest": profile.digest,
        "n": 6,
        "median_s": pytest.approx(np.median(EMPIRICAL["sample_s"])),
        "p95_s": pytest.approx(np.quantile(EMPIRICAL["sample_s"], 0.95)),
    }


def test_a_parametric_profile_draws_its_scipy_family(tmp_path):
    profile = LatencyProfile.load(written(tmp_path, LOGNORMAL))
    drawn = np.array(draws(profile, seed=2))
    frozen = stats.lognorm(s=0.3, scale=0.12)
    assert stats.kstest(drawn, frozen.cdf).pvalue > 1e-3
    shown = profile.describe()
    assert shown["kind"] == "parametric" and shown["family"] == "lognorm"
    assert shown["params"] == {"s": 0.3, "scale": 0.12}
    assert shown["median_s"] == pytest.approx(0.12)
    assert shown["p95_s"] == pytest.approx(frozen.ppf(0.95))
    assert "clipped" not in shown  # a lognormal never goes below 0


def test_a_family_reaching_below_zero_is_clipped_at_zero_and_says_how_often(tmp_path):
    profile = LatencyProfile.load(written(tmp_path, NORMAL))
    drawn = np.array(draws(profile, seed=3))
    assert drawn.min() == 0.0 and (drawn > 0).any()
    shown = profile.describe()
    assert shown["clipped"] == pytest.approx(stats.norm(0.02, 0.05).cdf(0.0))
    assert np.mean(drawn == 0.0) == pytest.approx(shown["clipped"], abs=0.1)


def test_the_digest_is_of_the_distribution_not_the_file_its_layout_or_provenance(tmp_path):
    digest = LatencyProfile.load(written(tmp_path, EMPIRICAL)).digest
    assert len(digest) == 12 and int(digest, 16) >= 0
    rewritten = json.dumps(dict(reversed(EMPIRICAL.items())), indent=4)
    provenance = {**EMPIRICAL, "recorded": {"url": "ws://elsewhere:8000", "calls": 6}}
    ints = {**HEAD, "family": "uniform", "params": {"loc": 0, "scale": 1}}
    floats = {**HEAD, "family": "uniform", "params": {"scale": 1.0, "loc": 0.0}}
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    assert LatencyProfile.load(written(sub, rewritten, "other-name.json")).digest == digest
    assert LatencyProfile.load(written(tmp_path, provenance, "p.json")).digest == digest
    changed = {**EMPIRICAL, "sample_s": [*EMPIRICAL["sample_s"], 0.5]}
    assert LatencyProfile.load(written(tmp_path, changed, "c.json")).digest != digest
    uniform = LatencyProfile.load(written(tmp_path, ints, "u1.json")).digest
    assert LatencyProfile.load(written(tmp_path, floats, "u2.json")).digest == uniform
    assert uniform != digest


def test_a_run_setting_of_profile_file_carries_the_profile_and_its_digest(tmp_path):
    path = written(tmp_path, LOGNORMAL, "pi0.json")
    latency = InferenceLatency.parse(f"profile:{path}")
    assert latency.mode is LatencyMode.PROFILE
    assert latency.profile_digest == LatencyProfile.load(path).digest
    assert str(latency) == "profile:pi0.json"


BAD = [
    ("missing", None, ["no such file", "policybench latency record"]),
    ("not JSON", "{sample_s: [0.1]", ["not JSON", "expected an object such as"]),
    ("a list", [0.1, 0.2], ["expected a JSON object", "got [0.1, 0.2]"]),
    ("no format", {"sample_s": [0.1]}, ['expected "format": "policybench-latency-profile"']),
    ("version", {**HEAD, "version": 2, "sample_s": [0.1]}, ['expected "version": 1', "got 2"]),
    ("nothing", HEAD, ['either "sample_s"', '"family"', "got neither"]),
    ("both", {**EMPIRICAL, "family": "norm"}, ["got both"]),
    ("empty", {**HEAD, "sample_s": []}, ['"sample_s" is empty', "at least one latency"]),
    ("negative", {**HEAD, "sample_s": [0.1, -0.02]}, [">= 0", "item 1 is -0.02"]),
    ("text", {**HEAD, "sample_s": ["0.1"]}, ["finite number", 'item 0 is "0.1"']),
    ("unknown family", {**HEAD, "family": "lognormal"}, ["continuous scipy.stats", '"lognormal"']),
    ("discrete", {**HEAD, "family": "poisson", "params": {"mu": 1}}, ["poisson", "discrete"]),
    ("no shape", {**HEAD, "family": "gamma", "params": {"scale": 0.1}}, ["needs", "['a']"]),
    (
        "unknown parameter",
        {**HEAD, "family": "lognorm", "params": {"s": 0.3, "sigma": 1}},
        ["['s', 'loc', 'scale']", "unknown ['sigma']"],
    ),
    (
        "out of domain",
        {**HEAD, "family": "lognorm", "params": {"s": 0.3, "scale": -1}},
        ["not defined for the parameters", "'scale': -1.0"],
    ),
    ("bad value", {**HEAD, "family": "norm", "params": {"loc": "0.1"}}, ["must be a finite"]),
]


@pytest.mark.parametrize(("content", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_file_is_a_value_error_naming_the_file_what_was_expected_and_what_came(
    tmp_path, content, expected
):
    path = tmp_path / "bad.json" if content is None else written(tmp_path, content, "bad.json")
    with pytest.raises(ValueError) as raised:
        LatencyProfile.load(path)
    message = str(raised.value)
    assert message.startswith(f"latency profile {path}: ")
    for fragment in expected:
        assert fragment in message


def test_a_bad_file_named_by_a_run_setting_is_a_value_error_naming_it(tmp_path):
    path = written(tmp_path, {**HEAD, "sample_s": []}, "empty.json")
    with pytest.raises(ValueError, match=f"latency profile {path}: .*empty"):
        InferenceLatency.parse(f"profile:{path}")
