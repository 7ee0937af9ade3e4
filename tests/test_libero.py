"""The LIBERO suite: its plan and wire convention (no simulator), then on the real LIBERO env:
init states are honoured, the image orientation is pinned, and an openpi client served over a
loopback websocket receives openpi's LIBERO keys, shapes and dtypes."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import mmap
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import Chunk, SessionContext
from policybench.policy.codec import resize_with_pad
from policybench.record.episode import OutcomeKind
from policybench.registry import PolicySettings, build_policy
from policybench.serve.client import Endpoint
from policybench.serve.server import PolicyServer, ServerConfig, ServerThread, fixed_model
from policybench.spec import Scene
from policybench.suites.libero import (
    LIBERO_10,
    LIBERO_SPATIAL,
    OPENPI,
    InitStatePerTask,
    language_of,
    libero,
    openpi_codec,
)
from policybench.suites.libero.tasks import TASKS
from policybench.world import World

WIRE_IMAGES = ("observation/image", "observation/wrist_image")
WIRE_KEYS = {*WIRE_IMAGES, "observation/state"}


def warmth(image: np.ndarray) -> float:
    """How much redder than blue an image region is: LIBERO's wooden table is warm, the floor
    and wall behind the robot are grey."""
    pixels = image.astype(np.float64)
    return float((pixels[..., 0] - pixels[..., 2]).mean())


# --- Without a simulator ---


def test_instructions_are_libero_benchmark_language_from_the_task_names():
    assert language_of("pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate") == (
        "pick up the black bowl on the stove and place it on the plate"
    )
    assert language_of("KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it") == (
        "turn on the stove and put the moka pot on it"
    )
    assert language_of("KITCHEN_SCENE10_close_the_top_drawer_of_the_cabinet") == (
        "close the top drawer of the cabinet"
    )
    assert LIBERO_10.rollouts(1, 0)[0].instruction == (
        "put both the alphabet soup and the tomato sauce in the basket"
    )


def test_rollout_i_of_each_task_starts_from_init_state_i_and_the_scene_records_it():
    rollouts = LIBERO_SPATIAL.rollouts(3, 0)
    assert len(rollouts) == 30
    first_task = [r for r in rollouts if r.scene.task == "task0"]
    assert [r.scene.fields for r in first_task] == [{"init_state": i} for i in range(3)]
    assert [r.scene.seed for r in first_task] == [7, 7, 7]  # openpi seeds a task's env once
    assert first_task[1].id == "task0/seed=7/init_state=1"
    assert first_task[0].timeout_s == 220 / 20.0  # openpi's libero_spatial max_steps at 20 Hz
    assert first_task[0].scene.as_record()["init_state"] == 0


def test_more_rollouts_than_init_states_is_a_clear_error():
    plan = InitStatePerTask({"task0": "do it"}, timeout_s=1.0)
    with pytest.raises(ValueError, match=r"50 init states per task.*got --rollouts 51"):
        plan("libero_spatial", 51, 0)


def test_protocol_constants_are_recorded_in_the_eval_settings():
    settings = LIBERO_SPATIAL.metadata
    assert settings["protocol"] == "openpi"
    assert settings["max_steps"] == 220
    assert settings["settle_steps"] == 10
    assert settings["settle_action"] == [0.0] * 6 + [-1.0]
    assert settings["action_horizon"] == 5
    assert LIBERO_SPATIAL.control_hz == 20.0


def test_resize_with_pad_fits_and_centres_like_openpi_client():
    image = np.full((256, 128, 3), 200, np.uint8)
    resized = resize_with_pad(image, 224, 224)
    assert resized.shape == (224, 224, 3) and resized.dtype == np.uint8
    # A 2:1 image becomes 224x112, centred with 56 black columns either side.
    assert (resized[:, :56] == 0).all() and (resized[:, -56:] == 0).all()
    assert (resized[:, 56:168] == 200).all()
    same = np.zeros((224, 224, 3), np.uint8)
    assert resize_with_pad(same, 224, 224) is same


def test_openpi_codec_sends_rotated_224_images_the_8d_state_and_plays_five_actions():
    codec = openpi_codec()
    image = np.zeros((256, 256, 3), np.uint8)
    image[:64] = (200, 150, 100)  # a warm band at the top, as LIBERO renders the table
    obs = {
        keys.IMAGE: image,
        keys.WRIST_IMAGE: np.zeros((256, 256, 3), np.uint8),
        keys.STATE: np.arange(8.0),
    }
    wire = codec.encode(obs, "put the bowl on the plate")
    assert set(wire) == {*WIRE_KEYS, "prompt"}
    for name in WIRE_IMAGES:
        assert wire[name].shape == (224, 224, 3) and wire[name].dtype == np.uint8
    assert warmth(wire["observation/image"][-40:]) > 50 > warmth(wire["observation/image"][:40])
    np.testing.assert_array_equal(wire["observation/state"], np.arange(8.0))
    assert wire["prompt"] == "put the bowl on the plate"
    actions = codec.actions(np.ones((10, 32)))
    assert actions.shape == (5, 7)


def test_task_table_is_hf_liberos_benchmark_map():
    spec = importlib.util.find_spec("libero")
    if spec is None:
        pytest.skip("hf-libero not installed: pip install --no-deps hf-libero==0.1.4")
    root = Path(next(iter(spec.submodule_search_locations)))
    source = (root / "libero" / "benchmark" / "libero_suite_task_map.py").read_text()
    (assignment,) = ast.parse(source).body
    table = ast.literal_eval(assignment.value)
    assert {suite: tuple(names) for suite, names in table.items()} == TASKS


# --- On the real LIBERO env (one env for the module: building one takes seconds) ---

# openpi's protocol with cheaper frames and a shorter settle: software rendering of a LIBERO scene
# costs a fifth of a second or more per camera frame here, and a hard reset seconds.
QUICK = libero("libero_spatial", dataclasses.replace(OPENPI, camera_size=128, settle_steps=2))


@pytest.fixture(scope="module")
def world():
    for module in ("libero", "robosuite", "bddl"):
        pytest.importorskip(module, reason=LIBERO_SPATIAL.install)
    world = World(QUICK)
    yield world
    world.close()


def sim_state_after_reset(world: World, init_state: int, seed: int = 0) -> np.ndarray:
    world.reset(Scene("task0", seed, {"init_state": init_state}))
    return world.env_for("task0").sim_state().copy()


def test_same_init_state_gives_an_identical_sim_state_and_another_differs(world):
    first = sim_state_after_reset(world, 3)
    other = sim_state_after_reset(world, 4)
    again = sim_state_after_reset(world, 3, seed=1)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


def test_staging_leaves_numpys_global_rng_as_it_found_it(world):
    # The env built first: building it (once a process) draws from numpy's RNG, staging must not.
    world.reset(Scene("task0", 7, {"init_state": 0}))
    np.random.seed(123)
    before = np.random.get_state()
    world.reset(Scene("task0", 7, {"init_state": 1}))  # seeds numpy and replays a reset
    after = np.random.get_state()
    assert after[2] == before[2]
    np.testing.assert_array_equal(after[1], before[1])


def test_an_init_state_index_out_of_range_names_the_range(world):
    with pytest.raises(ValueError, match=r"0 <= i < 50"):
        world.reset(Scene("task0", 0, {"init_state": 50}))


def test_a_reset_without_a_seed_says_to_pass_the_scenes_seed(world):
    with pytest.raises(ValueError, match=r"needs an int seed .* got None; .*seed=scene.seed"):
        world.env_for("task0").reset(options={"init_state": 0})


def test_the_models_textures_are_given_back_once_rendered_and_frames_stay_the_same(world):
    env = world.env_for("task0")
    world.reset(Scene("task0", 0, {"init_state": 0}))
    textures = env.libero.env.sim.model._model.tex_data
    # Its pages read as zeros now (a compiled model's textures are about half non-zero here);
    # only the partial pages at either end are kept.
    assert textures.size > 1_000_000 and np.count_nonzero(textures) < 2 * mmap.PAGESIZE
    first = [world.step(np.zeros(7)).obs[keys.IMAGE].copy() for _ in range(2)]
    env._release_model_textures = lambda: None  # the same steps with the textures kept
    try:
        world.reset(Scene("task0", 0, {"init_state": 0}))
        assert np.count_nonzero(env.libero.env.sim.model._model.tex_data) > textures.size // 10
        kept = [world.step(np.zeros(7)).obs[keys.IMAGE] for _ in range(2)]
    finally:
        del env._release_model_textures
    for released, with_textures in zip(first, kept, strict=True):
        np.testing.assert_array_equal(released, with_textures)


def test_mujoco_lets_go_of_the_compiled_scene_after_a_reset(world, tmp_path):
    import mujoco

    world.reset(Scene("task0", 0, {"init_state": 0}))
    model = world.env_for("task0").libero.env.sim.model._model
    path = tmp_path / "last.xml"
    mujoco.mj_saveLastXML(str(path), model)
    # What MuJoCo kept of its last compile is the empty model compiled after the scene's.
    assert "<worldbody/>" in path.read_text() and model.nbody > 10


def test_agentview_comes_upside_down_and_the_openpi_codec_turns_it_upright(world):
    obs = world.reset(Scene("task0", 0, {"init_state": 0}))
    image = obs[keys.IMAGE]
    assert image.shape == (128, 128, 3) and image.dtype == np.uint8
    quarter = image.shape[0] // 4
    # As rendered, the table fills the top and the grey floor behind the robot the bottom.
    assert warmth(image[:quarter]) > warmth(image[-quarter:]) + 10
    upright = openpi_codec().encode(obs, "")["observation/image"]
    quarter = upright.shape[0] // 4
    assert warmth(upright[-quarter:]) > warmth(upright[:quarter]) + 10


class CheckingModel:
    """A served model that checks every observation has openpi's LIBERO form, keeps what it saw,
    and answers 10-action chunks (of which the client plays 5)."""

    name = "checking"

    def __init__(self) -> None:
        self.seen: list[dict[str, np.ndarray]] = []
        self.instructions: list[str] = []

    def open(self, context: SessionContext):
        self.instructions.append(context.instruction)

        def predict(obs):
            if set(obs) != WIRE_KEYS:
                raise ValueError(f"expected keys {sorted(WIRE_KEYS)}, got {sorted(obs)}")
            for name in WIRE_IMAGES:
                image = obs[name]
                if image.shape != (224, 224, 3) or image.dtype != np.uint8:
                    raise ValueError(f"{name}: expected (224, 224, 3) uint8, got {image.shape}")
            state = obs["observation/state"]
            if state.shape != (8,) or state.dtype != np.float64:
                raise ValueError(f"observation/state: expected (8,) float64, got {state.shape}")
            self.seen.append(dict(obs))
            return Chunk(np.zeros((10, 7)), context.control_hz)

        return predict

    def describe(self):
        return {keys.POLICY_NAME: self.name}


def test_openpi_policy_on_libero_sends_openpis_libero_convention_over_the_wire(world):
    model = CheckingModel()
    rollout = dataclasses.replace(QUICK.rollouts(1, 0)[0], timeout_s=0.6)  # 12 steps at 20 Hz
    server = PolicyServer(fixed_model(model, QUICK.control_hz), ServerConfig(port=0))
    with ServerThread(server) as served:
        settings = PolicySettings(endpoint=Endpoint(served.url, infer_timeout_s=60.0))
        space = world.env_for(rollout.scene.task).action_space
        policy = build_policy("openpi", QUICK, settings, lambda: space)
        episode = run_rollout(rollout, world, policy)
    assert episode.outcome.kind is OutcomeKind.UNSOLVED, episode.outcome
    assert episode.steps == 12
    assert len(model.seen) == 3  # a new chunk every 5 actions: at steps 0, 5 and 10
    assert model.instructions == [rollout.instruction]
    first = model.seen[0]["observation/image"]
    assert warmth(first[-56:]) > warmth(first[:56]) + 10  # upright: the table at the bottom
    assert episode.statics[keys.EVAL_SETTINGS]["protocol"] == OPENPI.name
