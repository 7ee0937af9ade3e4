"""Action contracts: a model and its Eval's codec declare their conventions, and the preflight
checks one against the other before any rollout. On the real LIBERO env: a model whose gripper
sign is flipped, or that answers quaternions where LIBERO plays axis-angle, is refused before any
rollout with the mismatch named (or run, with `--contract-mismatch warn`); every built-in codec
declares a contract that a model following it passes; bad contract values are refused in one
line naming what is allowed."""

from __future__ import annotations

import json

import pytest

from policybench.policy.contract import (
    ACTIONS,
    ROTATIONS,
    Contract,
    Image,
    contract_of,
    mismatches,
)
from policybench.suites import registered_evals

LIBERO_MODELS = """
import numpy as np

from policybench.policy.base import Chunk
from policybench.suites.libero import libero

OWN = libero("libero_spatial").codecs["openpi"].contract


class Still:
    name = "still"

    def __init__(self, contract):
        self.contract = contract

    def open(self, context):
        return lambda obs: Chunk(np.zeros((5, 7), np.float32), context.control_hz)

    def describe(self):
        return {"name": self.name}


FOLLOWS = Still(OWN)
FLIPPED_GRIPPER = Still({"gripper": "negative-closes", "rotation": "axis-angle"})
QUATERNIONS = Still({"rotation": "quaternion-xyzw", "action": "eef-delta"})
"""

BENCHMARK = """
import dataclasses

import policybench
from policybench.suites.libero import OPENPI, libero

# openpi's protocol with cheaper frames, a short settle and two control steps a rollout: software
# rendering costs a fifth of a second or more a camera frame here. `-k task0` keeps one task.
QUICK = libero("libero_spatial", dataclasses.replace(OPENPI, camera_size=128, settle_steps=2))
QUICK = dataclasses.replace(
    QUICK, plan=dataclasses.replace(QUICK.plan, timeout_s=2 / QUICK.control_hz)
)


@policybench.parametrize(QUICK)
def test_libero(rollout, harness):
    harness(rollout)
"""


def test_a_contract_value_outside_the_known_ones_is_refused_naming_them():
    with pytest.raises(ValueError) as refused:
        Contract(rotation="quat")
    assert str(refused.value) == f"contract rotation: 'quat' is not one of {', '.join(ROTATIONS)}"
    with pytest.raises(ValueError, match=f"contract action: 'delta' is not one of {ACTIONS[0]}"):
        Contract(action="delta")
    with pytest.raises(ValueError, match="contract image flip: 'upside' is not one of none"):
        Image(96, 96, "upside")
    with pytest.raises(ValueError, match="unknown field rotations; the fields are action, "):
        Contract.of({"rotations": "axis-angle"})
    with pytest.raises(ValueError, match=r"each part is NAME:SIZE \(e.g. eef_pos:3\), got 'pos'"):
        Contract(state=("pos",))


def test_mismatches_name_each_point_and_how_to_convert():
    libero = Contract(action="eef-delta", rotation="axis-angle", gripper="positive-closes")
    model = Contract(action="eef-delta", rotation="quaternion-wxyz", gripper="negative-closes")
    assert mismatches(model, libero) == [
        "rotation: the model answers quaternion-wxyz, the Eval plays axis-angle; convert each "
        "action's rotation r with scipy: Rotation.from_quat(r[[1, 2, 3, 0]]).as_rotvec()",
        "gripper: for the model a negative command closes, for the Eval a positive command; "
        "negate the gripper command",
    ]
    # What one side leaves undeclared is not checked.
    assert mismatches(Contract(rotation="axis-angle"), libero) == []


def test_every_built_in_codec_declares_a_contract_a_model_following_it_passes():
    checked = 0
    for eval in registered_evals().values():
        for name, codec in eval.codecs.items():
            assert codec.contract is not None, f"{eval.name}'s codec {name} declares no contract"
            assert codec.contract.control_hz == eval.control_hz, (eval.name, name)
            follower = Contract.of(json.loads(json.dumps(codec.contract.as_json())))
            assert mismatches(follower, codec.contract) == [], (eval.name, name)
            checked += 1
    assert checked >= 10


def test_a_served_models_contract_comes_from_its_metadata():
    class Served:
        metadata = {"contract": {"rotation": "euler-xyz"}}
        contract = property(lambda self: self.metadata["contract"])

    assert contract_of(Served()) == Contract(rotation="euler-xyz")


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    for module in ("libero", "robosuite", "bddl"):
        pytest.importorskip(module, reason="needs LIBERO: pip install 'policybench[libero]'")
    pytester.makepyfile(models=LIBERO_MODELS, test_libero=BENCHMARK)
    pytester.syspathinsert()
    return pytester


def records(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(
    ("model", "named"),
    [
        (
            "FLIPPED_GRIPPER",
            "gripper: for the model a negative command closes, for the Eval a positive command; "
            "negate the gripper command",
        ),
        (
            "QUATERNIONS",
            "rotation: the model answers quaternion-xyzw, the Eval plays axis-angle; convert "
            "each action's rotation r with scipy: Rotation.from_quat(r).as_rotvec()",
        ),
    ],
)
def test_a_model_breaking_liberos_contract_is_refused_before_any_rollout(bench, model, named):
    result = bench.runpytest_subprocess(
        "-k", "task0", "--rollouts", "2", f"--policy=models:{model}"
    )
    assert result.ret == 1
    line = next(line for line in result.stdout.lines if line.startswith("preflight libero"))
    # A model given as module:attr sees the env as it is: it is held to the env's own contract.
    assert line.startswith(
        "preflight libero_spatial: failed: action contract: still and libero_spatial's env "
        "disagree on 1 point: "
    )
    assert named in line
    assert "(--contract-mismatch warn runs the rollouts anyway)" in line
    for record in records(bench):
        assert record["outcome"] == "error" and record["steps"] == 0
        assert record["reason"].startswith("preflight of 'libero_spatial' failed, so none of")


def test_with_warn_the_mismatch_is_noted_and_the_rollouts_run(bench):
    result = bench.runpytest_subprocess(
        "-k", "task0", "--rollouts", "1", "--policy=models:FLIPPED_GRIPPER",
        "--contract-mismatch", "warn",
    )  # fmt: skip
    line = next(line for line in result.stdout.lines if line.startswith("preflight libero"))
    assert line.startswith("preflight libero_spatial: passed")
    assert "caveat: action contract: still and libero_spatial's env disagree on 1 point" in line
    assert "--contract-mismatch warn" not in line  # a flag never suggests itself
    [record] = records(bench)
    assert record["outcome"] in ("solved", "unsolved") and record["steps"] > 0


def test_a_model_following_the_codecs_contract_passes(bench):
    result = bench.runpytest_subprocess("-k", "task0", "--rollouts", "1", "--policy=models:FOLLOWS")
    line = next(line for line in result.stdout.lines if line.startswith("preflight libero"))
    assert "passed" in line and "action contract: agrees with libero_spatial's env" in line


def test_a_model_played_through_a_codec_is_held_to_the_codecs_contract():
    """PushT through its openpi codec (what an openpi client sends): a model acting at 20 Hz,
    with images of another size, against the codec's 10 Hz and 96x96."""
    pytest.importorskip("gym_pusht", reason="needs PushT: pip install 'policybench[pusht]'")
    import numpy as np

    from policybench.policy.base import Chunk
    from policybench.policy.chunk_player import ChunkPolicy
    from policybench.preflight import WARN, Verdict, preflight
    from policybench.suites.pusht import PUSHT
    from policybench.world import World

    class Model:
        name = "fast"
        contract = Contract(control_hz=20.0, images={"observation/image": Image(224, 224)})

        def open(self, context):
            return lambda obs: Chunk(np.full((1, 2), 256.0, np.float32), context.control_hz)

        def describe(self):
            return {"name": self.name}

    world = World(PUSHT)
    rollout = PUSHT.rollouts(1, 0)[0]
    try:
        policy = ChunkPolicy(Model(), PUSHT.codecs["openpi"])
        refused = preflight(world, rollout, policy)
        assert refused.verdict is Verdict.FAILED
        assert refused.problem == (
            "action contract: fast and codec openpi disagree on 2 points: control rate: the model "
            "acts at 20 Hz, the Eval steps at 10 Hz; resample its chunks (or serve a model "
            "trained at 10 Hz); image observation/image: the model takes 224x224, the codec "
            "sends 96x96; resize or flip it in the codec (--contract-mismatch warn runs the "
            "rollouts anyway)"
        )
        warned = preflight(world, rollout, policy, WARN)
        # Under warn, the same disagreement as a caveat, without advice to pass the flag given.
        said = refused.problem.removesuffix(" (--contract-mismatch warn runs the rollouts anyway)")
        assert warned.verdict is Verdict.PASSED and warned.notes[-1] == f"caveat: {said}"
    finally:
        world.close()


def test_the_guides_model_disagrees_with_libero_as_the_guide_shows():
    from pathlib import Path

    from policybench.policy.contract import actions_only
    from policybench.suites.libero import LIBERO_SPATIAL

    guide = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "contracts.md").read_text()
    block = guide.split("```python\n")[1].split("```")[0]
    found: dict = {}
    exec(block, found)
    lines = mismatches(contract_of(found["MyModel"]), actions_only(LIBERO_SPATIAL.contract))
    shown = guide.split("disagree on 3 points: ")[1].split(" (--contract-mismatch")[0]
    assert "; ".join(lines) == shown


def test_a_models_contract_with_an_unknown_value_is_refused_before_anything_runs(pytester):
    pytester.makepyfile(
        models="""
from policybench.policy.base import Chunk


class Odd:
    name = "odd"
    contract = {"rotation": "quat"}

    def open(self, context):
        return lambda obs: None

    def describe(self):
        return {"name": self.name}


ODD = Odd()
""",
        test_nothing="def test_nothing():\n    pass\n",
    )
    pytester.syspathinsert()
    result = pytester.runpytest("--policy=models:ODD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in result.stderr.lines if line.strip()]
    assert line == (
        f"ERROR: policy 'models:ODD': contract rotation: 'quat' is not one of "
        f"{', '.join(ROTATIONS)}"
    )
