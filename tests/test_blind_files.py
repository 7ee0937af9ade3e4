"""`--blind` hides the policies in every file of the run directory but the two that keep the
names aside (`blinding.json`, `blinding-policies.jsonl`): the preflights' files included."""

from __future__ import annotations

from policybench.report.arms import BLINDING_FILE, SEALED_FILE
from tests.test_arms import AB, NAMES, bench, run_dir  # noqa: F401 (bench is a fixture)


def test_blind_run_names_no_policy_in_any_file_but_the_sealed_ones(bench):  # noqa: F811
    result = bench.runpytest("--rollouts", "1", *AB, "--blind")
    assert result.ret == 0
    directory = run_dir(bench)
    files = [p for p in directory.rglob("*") if p.is_file()]
    assert sorted(p.name for p in directory.glob("preflight/*.json")) == [
        "point@A.json",
        "point@B.json",
    ]
    leaks = {
        str(path.relative_to(directory)): [name for name in NAMES if name in path.read_text()]
        for path in files
        if path.name not in (BLINDING_FILE, SEALED_FILE)
    }
    assert {path: names for path, names in leaks.items() if names} == {}
