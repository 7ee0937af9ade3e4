"""`--blind` hides the policies in every file of the run directory but the two that keep the
names aside (`blinding.json`, `blinding-policies.jsonl`): the preflights' files included."""

from __future__ import annotations

import zipfile

from policybench.run.arms import BLINDING_FILE, SEALED_FILE
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
        str(path.relative_to(directory)): [name for name in NAMES if name in _text(path)]
        for path in files
        if path.name not in (BLINDING_FILE, SEALED_FILE)
    }
    assert {path: names for path, names in leaks.items() if names} == {}


def _text(path):
    """A file's text; of the observations a rollout kept for the expert (a compressed archive),
    its members inflated, so that a name inside one is found too."""
    if path.suffix != ".npz":
        return path.read_text()
    with zipfile.ZipFile(path) as archive:
        return "".join(archive.read(name).decode("latin-1") for name in archive.namelist())


def test_a_sealed_records_messages_name_neither_its_policy_nor_its_server(tmp_path):
    """An error's reason (a policy's own exception) and a retry's message keep the arm's letter
    in place of its policy's name, checkpoint or server; run-wide fields stay readable."""
    from policybench import keys
    from policybench.run.arms import Sealer

    sealer = Sealer(tmp_path, servers=[("ws://gpu-7:8000", "B")])
    record = {
        keys.NODEID: "t::a/seed=0/policy=B",
        keys.ARM: "B",
        keys.POLICY: {
            "name": "pizero",
            "checkpoint": "ckpt/pi0-libero",
            keys.INFERENCE_LATENCY: "steps:2",
        },
        keys.REASON: "RuntimeError: pizero lost ckpt/pi0-libero at ws://gpu-7:8000 (steps:2)",
        keys.RETRIED: ["pizero timed out"],
    }
    sealed = sealer.seal(record)
    sealer.close()
    reason = "RuntimeError: <arm B> lost <arm B> at <arm B's server> (steps:2)"
    assert sealed[keys.REASON] == reason
    assert sealed[keys.RETRIED] == ["<arm B> timed out"]
    assert "pizero" in (tmp_path / "blinding-policies.jsonl").read_text()  # kept, sealed
