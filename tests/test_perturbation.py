"""Perturbation axes (`--perturb AXIS=LEVELS`): on real MetaWorld and LIBERO renders, each axis
changes what it should and nothing else (a moved camera or a dimmed light changes the image and
not the state; observation noise the state and not the image; action noise nothing a reset
shows), the same for the same scene at any time, and a reset without it restores the scene
exactly. A run's arms are the policy on its scenes as they are (`none`) and under each
perturbation, compared with `none` alone, alike at -n 0 and -n 2, each record naming its
perturbation and replayed from it by a plain script; bad axes and levels are refused before
anything runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.perturbation import Grid, Perturbation, parse_perturb, refusals

ENVS = (Path(__file__).parent / "envs.py").read_text()
BENCHMARK = """
import dataclasses

import policybench
from envs import GreedyPointModel, point_eval

POINT = dataclasses.replace(
    point_eval("point", scripted=GreedyPointModel),
    paraphrases={"reach": ("go to the goal", "head for the target")},
)


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""


def test_perturb_values_parse_into_axis_and_level_and_bad_ones_say_the_syntax():
    found = parse_perturb(["action_noise=0,0.05,0.1", "camera_pose=0.02"])
    assert [p.label for p in found] == ["action_noise-0.05", "action_noise-0.1", "camera_pose-0.02"]
    for bad in ("action_noise", "=0.1", "action_noise=a"):
        with pytest.raises(ValueError, match=r"--perturb takes AXIS=LEVELS"):
            parse_perturb([bad])
    with pytest.raises(ValueError, match=r"--perturb names obs_noise-0\.1 more than once"):
        parse_perturb(["obs_noise=0.1", "obs_noise=0.1"])


@pytest.fixture(scope="module")
def metaworld():
    pytest.importorskip("metaworld", reason="needs MetaWorld: pip install 'policybench[metaworld]'")
    from policybench.suites.metaworld import mt10
    from policybench.world import World

    eval = mt10(camera="corner", size=64, tasks={"reach-v3": "reach the goal"})
    world = World(eval)
    yield world
    world.close()


def first(world, level: float | None = None, axis: str = "camera_pose"):
    scene = world.eval.rollouts(1, 3)[0].scene
    return world.reset(scene, None if level is None else Perturbation(axis, level))


@pytest.mark.parametrize(
    ("axis", "level", "moves"),
    [
        ("camera_pose", 0.1, keys.IMAGE),
        ("lighting", 0.5, keys.IMAGE),
        ("colour", 0.3, keys.IMAGE),
        ("texture", 1.0, keys.IMAGE),
        ("obs_noise", 0.05, keys.STATE),
        ("action_noise", 0.5, None),
    ],
)
def test_each_axis_changes_what_it_should_and_nothing_else(metaworld, axis, level, moves):
    plain = first(metaworld)
    perturbed = first(metaworld, level, axis)
    again = first(metaworld, level, axis)
    for name in (keys.IMAGE, keys.STATE):
        same = np.array_equal(plain[name], perturbed[name])
        assert same == (name != moves), (axis, name)
        assert np.array_equal(perturbed[name], again[name])  # seeded by the scene
    restored = first(metaworld)
    assert all(np.array_equal(plain[name], restored[name]) for name in (keys.IMAGE, keys.STATE))


@pytest.fixture(scope="module")
def libero_world():
    for module in ("libero", "robosuite", "bddl"):
        pytest.importorskip(module, reason="needs LIBERO: pip install 'policybench[libero]'")
    import dataclasses

    from policybench.suites.libero import OPENPI, libero
    from policybench.world import World

    quick = dataclasses.replace(OPENPI, camera_size=128, settle_steps=2)  # cheap frames
    world = World(libero("libero_spatial", quick))
    yield world
    world.close()


def test_liberos_cameras_lights_and_colours_move_its_images_and_not_its_state(libero_world):
    scene = libero_world.eval.rollouts(1, 0)[0].scene
    plain = libero_world.reset(scene)
    moved = libero_world.reset(scene, Perturbation("camera_pose", 0.05))
    dimmed = libero_world.reset(scene, Perturbation("lighting", 0.5))
    recoloured = libero_world.reset(scene, Perturbation("colour", 0.3))
    retextured = libero_world.reset(scene, Perturbation("texture", 1.0))
    for perturbed in (moved, dimmed, recoloured, retextured):
        assert np.array_equal(plain[keys.STATE], perturbed[keys.STATE])
        for camera in (keys.IMAGE, keys.WRIST_IMAGE):
            assert not np.array_equal(plain[camera], perturbed[camera]), camera
    assert dimmed[keys.IMAGE].mean() < plain[keys.IMAGE].mean()
    again = libero_world.reset(scene, Perturbation("camera_pose", 0.05))
    assert np.array_equal(again[keys.IMAGE], moved[keys.IMAGE])
    restored = libero_world.reset(scene)
    assert all(np.array_equal(plain[name], restored[name]) for name in plain)
    # the objects moved once the init state is set: the robot's state alone is not theirs,
    # so the images show it and the robot's joints stay (the settle steps then run as ever)
    displaced = libero_world.reset(scene, Perturbation("initial_state", 0.03))
    assert not np.array_equal(plain[keys.IMAGE], displaced[keys.IMAGE])
    assert np.allclose(plain[keys.STATE], displaced[keys.STATE], atol=1e-3)
    sim = libero_world.env_for(scene.task).unwrapped._sim
    objects = [j for j in range(sim.model.njnt) if sim.model.jnt_type[j] == 0]
    assert objects  # LIBERO's objects are free bodies


def test_initial_state_moves_the_object_by_the_level_and_not_the_hand(metaworld):
    """MetaWorld's puck (its free body) moves in the table's plane by exactly the level, seeded
    by the scene; the hand, the goal and the height stay; the image shows it."""
    plain = first(metaworld)
    moved = first(metaworld, 0.03, "initial_state")
    state, shifted = plain[keys.STATE], moved[keys.STATE]
    assert np.linalg.norm(shifted[4:6] - state[4:6]) == pytest.approx(0.03, abs=1e-6)
    assert shifted[6] == pytest.approx(state[6], abs=1e-9)  # in the table's plane
    assert np.array_equal(shifted[:4], state[:4]) and np.array_equal(shifted[36:], state[36:])
    assert np.array_equal(shifted[18:36], shifted[:18])  # the previous frame is this one
    assert not np.array_equal(plain[keys.IMAGE], moved[keys.IMAGE])
    assert np.array_equal(first(metaworld, 0.03, "initial_state")[keys.STATE], shifted)
    assert np.array_equal(first(metaworld)[keys.STATE], state)


def test_lighting_dims_the_image_and_action_noise_moves_the_hand(metaworld):
    plain, dimmed = first(metaworld), first(metaworld, 0.8, "lighting")
    assert dimmed[keys.IMAGE].mean() < plain[keys.IMAGE].mean()
    hold = np.zeros(4)
    first(metaworld)
    still = metaworld.step(hold).obs[keys.STATE]
    first(metaworld, 0.5, "action_noise")
    shaken = metaworld.step(hold).obs[keys.STATE]
    assert np.abs(shaken[:3] - still[:3]).max() > 1e-4  # the hand moved under a zero command


def test_an_axis_the_eval_lacks_or_a_level_out_of_range_is_named_with_the_evals_axes():
    from policybench.suites.metaworld import MT10_STATE

    said = refusals(MT10_STATE, [Perturbation("camera_pose", 0.1)])
    assert said == (
        "--perturb: metaworld-mt10 has no axis 'camera_pose'; metaworld-mt10's axes: "
        "action_noise [0, 1] std / half the action range, obs_noise [0, 1] std of the state, "
        "action_delay [0, 10] control steps, initial_state [0, 0.05] metres, "
        "instruction [0, 2] paraphrase number"
    )
    said = refusals(MT10_STATE, [Perturbation("action_noise", 2.0)])
    assert said is not None and said.startswith(
        "--perturb: action_noise level 2 is outside [0, 1] (std / half the action range);"
    )
    assert refusals(MT10_STATE, [Perturbation("obs_noise", 0.5)]) is None


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    pytester.syspathinsert()
    return pytester


def records(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def outcomes(pytester: pytest.Pytester) -> dict[tuple[str, int], tuple[str, int]]:
    return {
        (r[keys.ARM], r["scene"]["seed"]): (r["outcome"], r["steps"]) for r in records(pytester)
    }


def test_a_perturbed_run_pairs_each_level_with_none_alike_at_any_number_of_workers(bench):
    perturb = ("--perturb", "action_noise=0.5,1", "--rollouts", "8")
    result = bench.runpytest(*perturb)
    assert result.ret == 0
    compared = [line for line in result.stdout.lines if line.endswith("test on the pairs):")]
    assert [line.split(",")[0] for line in compared] == [
        "action_noise-0.5 vs none",
        "action_noise-1 vs none",
    ]
    alone = outcomes(bench)
    arms = {arm for arm, _ in alone}
    assert arms == {"none", "action_noise-0.5", "action_noise-1"}
    solved = {
        arm: sum(o == "solved" for (a, _), (o, _) in alone.items() if a == arm) for arm in arms
    }
    assert solved["none"] == 8 and solved["action_noise-1"] < 8  # the noise costs it scenes
    perturbed = [r for r in records(bench) if r[keys.ARM] != "none"]
    assert all(r[keys.PERTURBATION]["axis"] == "action_noise" for r in perturbed)
    assert bench.runpytest(*perturb, "-n", "2").ret == 0
    assert outcomes(bench) == alone


def test_a_perturbed_rollout_replays_from_its_record_in_a_plain_script(bench):
    assert bench.runpytest("--perturb", "action_noise=1", "--rollouts", "4").ret == 0
    [record] = [r for r in records(bench) if r[keys.ARM] != "none" and r["scene"]["seed"] == 2]
    script = bench.path / "replay.py"
    script.write_text(
        f"""
import json
from envs import GreedyPointModel, point_eval
from policybench.harness import run_rollout
from policybench.perturbation import Perturbation
from policybench.registry import PolicySettings, build_policy
from policybench.world import World

record = json.loads({json.dumps(json.dumps(record))})
eval = point_eval("point", scripted=GreedyPointModel)
[rollout] = [r for r in eval.rollouts(4, 0) if r.scene.seed == record["scene"]["seed"]]
rollout = rollout.__class__(**{{**rollout.__dict__,
                               "perturbation": Perturbation(**record["perturbation"])}})
world = World(eval)
space = lambda: world.env_for("reach").action_space
policy = build_policy("scripted", eval, PolicySettings(), space)
episode = run_rollout(rollout, world, policy)
print(json.dumps([episode.outcome.kind.value, episode.steps]))
"""
    )
    replayed = bench.run(sys.executable, str(script))
    assert replayed.ret == 0, replayed.stderr.str()
    assert json.loads(replayed.stdout.lines[-1]) == [record["outcome"], record["steps"]]


def test_the_concentration_ranking_puts_the_one_axis_that_breaks_the_policy_on_top(bench):
    """The greedy point policy shrugs off a little state noise and fails under full action
    noise: the ranking's top cell is that one, and its order is the drops a hand computation on
    results.jsonl finds."""
    perturb = ("--perturb", "obs_noise=0.01", "--perturb", "action_noise=1", "--rollouts", "10")
    result = bench.runpytest(*perturb)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "where failures concentrate (task x perturbation vs none, paired; p adjusted across "
            "2 cells), the 2 largest drops:",
            "  point reach under action_noise-1: 10/10 -> */10 (*",
        ]
    )
    solved: dict[str, list[bool]] = {}
    for record in records(bench):
        solved.setdefault(record[keys.ARM], []).append(record["outcome"] == "solved")
    rate = {arm: sum(outcomes) / len(outcomes) for arm, outcomes in solved.items()}
    by_hand = sorted((rate[arm] - rate["none"], arm) for arm in rate if arm != "none")
    summary = json.loads((bench.path / "reports" / "latest" / "summary.json").read_text())
    cells = summary["robustness"]["cells"]
    drops = [(a / n - b / m, cell["perturbation"])
             for cell in cells for (b, m), (a, n) in [(cell["before"], cell["after"])]]  # fmt: skip
    assert [arm for _, arm in drops] == [arm for _, arm in by_hand]
    assert [drop for drop, _ in drops] == pytest.approx([drop for drop, _ in by_hand])
    assert by_hand[0][1] == "action_noise-1" and by_hand[0][0] <= -0.5
    axes = summary["robustness"]["axes"]
    assert [p["arm"] for p in axes["action_noise"]["evals"][0]["points"]] == [
        "none",
        "action_noise-1",
    ]
    html = (bench.path / "reports" / "latest" / "index.html").read_text()
    assert 'id="robustness"' in html and 'data-perturbation="action_noise-1"' in html
    # every unsolved rollout is in one failure cluster, and those are the noisy arm's
    unsolved = [r for r in records(bench) if r["outcome"] == "unsolved"]
    clusters = summary["failure_clusters"]
    assert sum(cluster["rollouts"] for cluster in clusters) == len(unsolved) > 0
    assert {arm for c in clusters for arm in c["perturbations"]} == {"action_noise-1"}
    result.stdout.fnmatch_lines(["how the unsolved rollouts failed: 1 cluster"])
    assert 'id="failures-table"' in html and 'href="rollouts/' in html


def test_a_paraphrase_changes_the_instruction_alone(bench):
    assert bench.runpytest("--perturb", "instruction=1,2", "--rollouts", "3").ret == 0
    said = {(r[keys.ARM], r["scene"]["seed"]): r for r in records(bench)}
    for seed in range(3):
        plain = said[("none", seed)]
        for arm, text in (
            ("instruction-1", "go to the goal"),
            ("instruction-2", "head for the target"),
        ):
            assert said[(arm, seed)]["instruction"] == text
            assert plain["instruction"] == "reach the goal"
            for field in ("outcome", "steps", "sum_reward"):  # a policy that ignores it
                assert said[(arm, seed)][field] == plain[field]


def test_libero_and_metaworld_ship_paraphrases_of_every_task():
    from policybench.perturbation import axes_of, perturbed
    from policybench.suites.libero import LIBERO_10, LIBERO_SPATIAL
    from policybench.suites.metaworld import MT10_STATE

    for eval, count in ((LIBERO_SPATIAL, 1), (LIBERO_10, 1), (MT10_STATE, 2)):
        assert (
            set(eval.paraphrases) == set(eval.tasks) and axes_of(eval)["instruction"].high == count
        )
        rollout = eval.rollouts(1, 0)[0]
        changed = perturbed(rollout, Perturbation("instruction", 1), eval)
        assert changed.scene == rollout.scene and changed.id == rollout.id
        assert changed.instruction == eval.paraphrases[rollout.scene.task][0] != rollout.instruction
    assert LIBERO_SPATIAL.paraphrases["task0"] == (
        "lift the black bowl between the plate and ramekin and set it on the plate",
    )
    refused = refusals(MT10_STATE, [Perturbation("instruction", 1.5)])
    assert refused is not None
    assert "instruction level 1.5 is not a whole number in [0, 2]" in refused


def test_only_the_selected_evals_must_have_the_axis(pytester: pytest.Pytester):
    pytester.makepyfile(envs=ENVS, test_two=BENCHMARK.replace(
        "@policybench.parametrize(POINT)",
        'PLAIN = point_eval("plain", tasks={"stay": "stay"})\n\n\n'
        "@policybench.parametrize(POINT, PLAIN)",
    ))  # fmt: skip
    refused = pytester.runpytest("--perturb", "instruction=1", "--rollouts", "1")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*plain has no axis 'instruction'*select the Evals to perturb*"])
    assert (
        pytester.runpytest("--perturb", "instruction=1", "--rollouts", "1", "--suite", "point").ret
        == 0
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("camera_pose=0.1", "--perturb: point has no axis 'camera_pose'; point's axes: *"),
        ("obs_noise=3", "--perturb: obs_noise level 3 is outside [0, 1] (std of the state);*"),
        ("obs_noise", "--perturb takes AXIS=LEVELS (levels joined by commas, *"),
    ],
)
def test_bad_axes_and_levels_are_refused_before_anything_runs(bench, given, said):
    result = bench.runpytest("--perturb", given, "--rollouts", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {said}".replace("[", "[[]")])
    assert not (bench.path / "reports" / "latest").exists()


def test_a_grid_of_two_axes_runs_every_combination_each_paired_with_none(bench):
    """--perturb-grid: obs_noise and action_noise at one level each, and both at once; the
    combined arm's action draws are the action_noise arm's (each axis draws alone), so where
    the state noise changes nothing the two arms play alike; the report tables the grid."""
    grid = ("--perturb", "obs_noise=0.01", "--perturb", "action_noise=0.5,1", "--perturb-grid")
    result = bench.runpytest(*grid, "--rollouts", "6")
    assert result.ret == 0
    arms = {r[keys.ARM] for r in records(bench)}
    assert arms == {
        "none",
        "obs_noise-0.01",
        "action_noise-0.5",
        "action_noise-1",
        "obs_noise-0.01+action_noise-0.5",
        "obs_noise-0.01+action_noise-1",
    }
    combined = [r for r in records(bench) if r[keys.ARM] == "obs_noise-0.01+action_noise-1"]
    assert combined[0][keys.PERTURBATION] == {
        "grid": [{"axis": "obs_noise", "level": 0.01}, {"axis": "action_noise", "level": 1.0}]
    }
    result.stdout.fnmatch_lines(
        [
            "point: solved over the grid, rows obs_noise, columns action_noise:",
            "*0*0.5*1",
            "  0  *6/6*/6*/6",
            "  0.01*/6*/6*/6",
        ]
    )
    summary = json.loads((bench.path / "reports" / "latest" / "summary.json").read_text())
    [table] = summary["robustness"]["grids"]
    assert table["rows"] == [0, 0.01] and table["columns"] == [0, 0.5, 1]
    solved = {}
    for record in records(bench):
        solved[record[keys.ARM]] = solved.get(record[keys.ARM], 0) + (record["outcome"] == "solved")
    assert table["solved"] == [
        [solved["none"], solved["action_noise-0.5"], solved["action_noise-1"]],
        [
            solved["obs_noise-0.01"],
            solved["obs_noise-0.01+action_noise-0.5"],
            solved["obs_noise-0.01+action_noise-1"],
        ],
    ]
    cells = {cell[keys.PERTURBATION] for cell in summary["robustness"]["cells"]}
    assert "obs_noise-0.01+action_noise-1" in cells  # ranked with the single axes
    html = (bench.path / "reports" / "latest" / "index.html").read_text()
    assert 'data-axes="obs_noise action_noise"' in html


def test_a_grid_needs_two_axes(bench):
    result = bench.runpytest("--perturb", "action_noise=0.5,1", "--perturb-grid")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--perturb-grid combines the levels of two or more axes, but --perturb names 1 "
         "(action_noise); add another --perturb AXIS=LEVELS*"]
    )  # fmt: skip


def test_action_delay_plays_each_action_late_holding_until_the_first_arrives():
    from policybench.perturbation import Noise

    delayed = Noise(Perturbation("action_delay", 2), seed=0, hold=lambda: np.array([-1.0]))
    played = [delayed.action(np.array([float(k)]), None)[0] for k in range(5)]
    assert played == [-1.0, -1.0, 0.0, 1.0, 2.0]
    both = Noise(
        Grid((Perturbation("action_delay", 1), Perturbation("action_noise", 0.5))),
        seed=3,
        hold=lambda: np.zeros(2),
    )
    alone = Noise(Perturbation("action_noise", 0.5), seed=3)
    bounds = (np.full(2, -1.0), np.full(2, 1.0))
    first, second = np.array([0.2, 0.2]), np.array([0.4, -0.4])
    # the delayed arm's noise lands on the action it plays, with the noise arm's own draws
    assert np.array_equal(both.action(first, bounds), alone.action(np.zeros(2), bounds))
    assert np.array_equal(both.action(second, bounds), alone.action(first, bounds))


def test_a_delayed_policy_takes_longer_to_reach_its_goal(bench):
    assert bench.runpytest("--perturb", "action_delay=3", "--rollouts", "4").ret == 0
    steps = {}
    for record in records(bench):
        steps.setdefault(record[keys.ARM], []).append(record["steps"])
    assert all(d >= n for d, n in zip(steps["action_delay-3"], steps["none"], strict=True))
    assert sum(steps["action_delay-3"]) > sum(steps["none"])
    refused = bench.runpytest("--perturb", "action_delay=1.5", "--rollouts", "1")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*action_delay level 1.5 is not a whole number in [[]0, 10]*"])


METAWORLD_CAMERA = """
import policybench
from policybench.suites.metaworld import mt10

EVAL = mt10(camera="corner", size=32, shadows=False, tasks={"push-v3": "push the puck to the goal"})


@policybench.parametrize(EVAL)
def test_mw(rollout, harness):
    harness(rollout)
"""


def played(path) -> tuple:
    """What a trace says the rollout did (its actions, rewards and states), as bytes; not its
    model calls' wall times, nor its images' motion (a frame's pixels follow the GL context's
    history in the process, as the first frame after a reset does: see the LeRobot staging)."""
    from policybench.record.rollout_trace import MOTION, read_trace

    arrays = read_trace(path)["arrays"]
    kept = [name for name in sorted(arrays) if "wall" not in name and not name.startswith(MOTION)]
    return tuple((name, arrays[name].tobytes()) for name in kept)


def test_metaworlds_staged_axes_run_alike_at_any_number_of_workers(pytester):
    """Moved objects and a moved camera on a rendered MetaWorld Eval, its expert playing: every
    rollout's outcome, length, reward and trace (its actions, rewards and states) are the same at
    -n 0 and -n 2. (The expert reads the state: the moved camera's images are checked to be
    seeded by the scene in the World tests above.)"""
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    pytester.makepyfile(test_mw=METAWORLD_CAMERA)
    given = ("--perturb", "initial_state=0.03", "--perturb", "camera_pose=0.05", "--rollouts", "2")

    def run(*workers: str) -> dict:
        result = pytester.runpytest_subprocess(*given, *workers, "-p", "no:cacheprovider")
        assert result.ret == 0, result.stdout.str()[-2000:]
        run_dir = pytester.path / "reports" / "latest"
        return {
            (r[keys.ARM], r[keys.TASK], r["scene"]["seed"]): (
                r["outcome"],
                r["steps"],
                r["sum_reward"],
                played(run_dir / r["rollout_trace"]),
            )
            for r in records(pytester)
        }

    alone = run()
    assert {arm for arm, _, _ in alone} == {"none", "initial_state-0.03", "camera_pose-0.05"}
    assert run("-n", "2") == alone
    moved = {key[1:]: value for key, value in alone.items() if key[0] == "initial_state-0.03"}
    plain = {key[1:]: value for key, value in alone.items() if key[0] == "none"}
    assert moved != plain  # the objects moved: the expert played other steps


def test_an_axis_an_eval_lacks_is_said_under_xdist_too_and_nothing_runs(bench):
    """Under -n 2 the refusal is found where the items are collected, in the workers; a usage
    error raised there would end the worker and cost the run its message (an INTERNALERROR).
    The run is refused as at -n 0 instead: exit 4, the one line, nothing run."""
    result = bench.runpytest("--perturb", "camera_pose=0.1", "--rollouts", "1", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(
        ["ERROR: --perturb: point has no axis 'camera_pose'; point's axes: *"]
    )
    assert "passed" not in result.parseoutcomes()
