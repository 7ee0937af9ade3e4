"""LeRobot checkpoints as policybench Models (`--policy=lerobot:PATH`): a PreTrainedPolicy and its
saved pre/post-processors, batched across rollouts. The model takes observations in LeRobot's
names, as an Eval's `lerobot` codec encodes them (the instruction as `task`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import Chunk, ChunkSource, Observation, SessionContext
from policybench.policy.codec import Codec

PREFIX = "lerobot:"  # the policy name's prefix: `lerobot:PATH`
TASK = "task"  # LeRobot's key for the instruction in a batch (a `lerobot` codec's prompt key)
ACTION = "action"  # LeRobot's action feature
DEVICES = ("cpu", "cuda", "mps")
INSTALL = "pip install 'policybench[lerobot]'"


class FeatureMismatch(ValueError):
    """A checkpoint's input or action features are not what the Eval's codec provides."""


@dataclass(frozen=True)
class Features:
    """Feature name -> shape, as a checkpoint expects them or a codec provides them."""

    shapes: Mapping[str, tuple[int, ...]]

    def __str__(self) -> str:
        return "{" + ", ".join(f"{k}: {tuple(v)}" for k, v in sorted(self.shapes.items())) + "}"


def checkpoint_of(policy_name: str) -> Path:
    """The directory named by `lerobot:PATH` (absolute, `~` expanded)."""
    if not policy_name.startswith(PREFIX) or len(policy_name) == len(PREFIX):
        raise ValueError(f"a LeRobot policy is named lerobot:PATH, got {policy_name!r}")
    return Path(policy_name[len(PREFIX) :]).expanduser().resolve()


def as_lerobot_inputs(encoded: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A codec's output as LeRobot's env conventions hand it to a policy (its
    `preprocess_observation`): uint8 HxWxC images as float32 CxHxW in [0, 1], everything else
    float32. The instruction is left out (it travels as `task`)."""
    inputs: dict[str, np.ndarray] = {}
    for name, value in encoded.items():
        if name == TASK:
            continue
        array = np.asarray(value)
        if array.dtype == np.uint8 and array.ndim == 3:
            inputs[name] = array.transpose(2, 0, 1).astype(np.float32) / np.float32(255)
        else:
            inputs[name] = array.astype(np.float32)
    return inputs


class LeRobotModel:
    """A LeRobot policy: `predict_batch` runs the policy's `predict_action_chunk` on the stacked
    observations of many rollouts and answers each the first `n_action_steps` actions (LeRobot's
    own action queue), so a ChunkPlayer replans when they are played."""

    def __init__(self, checkpoint: Path, device: str = "cpu") -> None:
        if device not in DEVICES:
            raise ValueError(f"--policy-device must be one of {', '.join(DEVICES)}, got {device!r}")
        self.checkpoint = checkpoint
        self.device = device
        self.name = f"{PREFIX}{checkpoint}"
        if device == "cpu":
            _use_cpu_kernels()
        self._policy, self._pre, self._post = _load(checkpoint, device)
        config = self._policy.config
        self.policy_type: str = config.type
        self.chunk_size: int = int(getattr(config, "chunk_size", 1) or 1)
        self.n_action_steps: int = int(getattr(config, "n_action_steps", 1) or 1)
        self.expected = Features(
            {
                name: tuple(feature.shape)
                for name, feature in config.input_features.items()
                if feature.type.name in ("VISUAL", "STATE", "ENV")
            }
        )
        action = config.output_features.get(ACTION)
        self.action_shape = None if action is None else tuple(action.shape)
        self._checked = False

    def open(self, context: SessionContext) -> ChunkSource:
        return lambda obs: self.predict_batch([(context, obs)])[0]

    def predict_batch(self, requests: Sequence[tuple[SessionContext, Observation]]) -> list[Chunk]:
        import torch

        inputs = [as_lerobot_inputs(obs) for _, obs in requests]
        if not self._checked:
            self._check(inputs[0])
        batch: dict[str, Any] = {
            name: torch.from_numpy(np.stack([one[name] for one in inputs]))
            for name in self.expected.shapes
        }
        batch[TASK] = [obs.get(TASK, context.instruction) for context, obs in requests]
        with torch.inference_mode():
            actions = self._policy.predict_action_chunk(self._pre(batch))
            actions = self._post(actions[:, : self.n_action_steps])
        actions = actions.to("cpu", torch.float32).numpy()
        return [
            Chunk(chunk, context.control_hz)
            for (context, _), chunk in zip(requests, actions, strict=True)
        ]

    def _check(self, inputs: Mapping[str, np.ndarray]) -> None:
        provided = Features({name: array.shape for name, array in inputs.items()})
        missing = [
            name
            for name, shape in self.expected.shapes.items()
            if provided.shapes.get(name) != shape
        ]
        if missing:
            raise FeatureMismatch(
                f"LeRobot checkpoint {self.checkpoint} expects input features {self.expected}; "
                f"the Eval's 'lerobot' codec provides {provided} (mismatched: "
                f"{', '.join(missing)}). Evaluate the checkpoint on the suite it was trained "
                "for, or declare a codec that names its features"
            )
        self._checked = True

    def describe(self) -> dict[str, Any]:
        return {
            keys.POLICY_NAME: self.name,
            "policy_type": self.policy_type,
            "checkpoint": str(self.checkpoint),
            "weights_sha256": _digest(self.checkpoint / "model.safetensors"),
            "chunk_size": self.chunk_size,
            "n_action_steps": self.n_action_steps,
            "device": self.device,
            "cpu_kernels": CPU_KERNELS if self.device == "cpu" else None,
            "lerobot": metadata.version("lerobot"),
        }


def load_model(policy_name: str, device: str = "cpu") -> LeRobotModel:
    """The LeRobotModel for `lerobot:PATH`; ValueError for a bad checkpoint directory."""
    return LeRobotModel(checkpoint_of(policy_name), device)


def check_action_width(model: LeRobotModel, codec: Codec) -> None:
    """Raises FeatureMismatch when the checkpoint's actions are narrower than the env plays."""
    width = codec.action_width
    if model.action_shape is not None and width is not None and model.action_shape[0] < width:
        raise FeatureMismatch(
            f"LeRobot checkpoint {model.checkpoint} answers actions {model.action_shape}; the "
            f"Eval's {codec.name!r} codec plays actions of width {width} (mismatched: {ACTION}). "
            "Evaluate the checkpoint on the suite it was trained for"
        )


def _load(checkpoint: Path, device: str) -> tuple[Any, Any, Any]:
    """The policy (eval mode, on `device`) and its pre/post-processors, from local files only."""
    try:
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    except ImportError as error:
        raise ImportError(f"--policy=lerobot:PATH needs LeRobot ({error}); {INSTALL}") from None
    if (
        not (checkpoint / "config.json").is_file()
        or not (checkpoint / "model.safetensors").is_file()
    ):
        found = sorted(p.name for p in checkpoint.iterdir()) if checkpoint.is_dir() else "nothing"
        raise ValueError(
            f"no LeRobot checkpoint at {checkpoint}: expected config.json and model.safetensors "
            f"(as PreTrainedPolicy.save_pretrained writes them), found {found}"
        )
    config = PreTrainedConfig.from_pretrained(checkpoint, local_files_only=True)
    _refuse_unsupported(config, checkpoint)
    config.device = device
    if hasattr(config, "pretrained_backbone_weights"):
        # The weights come from model.safetensors; the ImageNet initialisation is a download.
        config.pretrained_backbone_weights = None
    policy = get_policy_class(config.type).from_pretrained(checkpoint, config=config)
    policy.eval()
    has_processors = (checkpoint / "policy_preprocessor.json").is_file()
    pre, post = make_pre_post_processors(
        config,
        pretrained_path=str(checkpoint) if has_processors else None,
        preprocessor_overrides={"device_processor": {"device": device}},
    )
    return policy, pre, post


CPU_KERNELS = "native (oneDNN off), 1 intra-op thread unless OMP_NUM_THREADS is set"


def _use_cpu_kernels() -> None:
    """On CPU: torch's native kernels rather than oneDNN's, whose results depend on the batch size
    (a served model batches whatever rollouts arrive together, so its answers would depend on
    timing; the native ones are batch-invariant, and faster at small batches), and one intra-op
    thread per process, as parallelism comes from `-n` workers (several threads per worker on a
    shared machine are many times slower)."""
    import torch

    torch.backends.mkldnn.enabled = False
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def _refuse_unsupported(config: Any, checkpoint: Path) -> None:
    if getattr(config, "n_obs_steps", 1) != 1:
        raise ValueError(
            f"LeRobot checkpoint {checkpoint} ({config.type}) conditions on "
            f"n_obs_steps={config.n_obs_steps} past observations; policybench feeds LeRobot "
            "policies one observation per chunk (ACT, SmolVLA, pi0 style) and cannot run it yet"
        )
    if getattr(config, "temporal_ensemble_coeff", None) is not None:
        raise ValueError(
            f"LeRobot checkpoint {checkpoint} uses ACT temporal ensembling (a new chunk every "
            "step, averaged); policybench plays chunks: save it with temporal_ensemble_coeff=None"
        )


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()[:16]


def save_random_act(
    directory: Path,
    image_shape: tuple[int, int, int],
    state_dim: int,
    action_dim: int,
    stats: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    seed: int = 0,
    chunk_size: int = 20,
    n_action_steps: int = 10,
    image_key: str = "observation.image",
) -> Path:
    """Writes a small random-init ACT checkpoint (an image `image_key` CxHxW,
    `observation.state`, `action`) with its processors, as `lerobot-eval` loads it: for pipeline
    checks, not skill. `stats` holds mean/std per feature (images: per channel)."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(seed)
    config = ACTConfig(
        input_features={
            image_key: PolicyFeature(FeatureType.VISUAL, image_shape),
            "observation.state": PolicyFeature(FeatureType.STATE, (state_dim,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (action_dim,))},
        chunk_size=chunk_size,
        n_action_steps=n_action_steps,
        dim_model=64,
        n_heads=2,
        dim_feedforward=128,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        pretrained_backbone_weights=None,
        device="cpu",
    )
    policy = ACTPolicy(config)
    tensors = {
        name: {stat: torch.tensor(values, dtype=torch.float32) for stat, values in by_stat.items()}
        for name, by_stat in stats.items()
    }
    pre, post = make_pre_post_processors(config, dataset_stats=tensors)
    directory.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(directory)
    pre.save_pretrained(directory)
    post.save_pretrained(directory)
    return directory
