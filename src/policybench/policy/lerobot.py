"""LeRobot checkpoints as policybench Models (`--policy=lerobot:PATH`): a PreTrainedPolicy and its
saved pre/post-processors, batched across rollouts; or a training loop's policy in memory
(`LeRobotModel.in_memory`, for `policybench.evaluate`). The model takes observations in LeRobot's
names, as an Eval's `lerobot` codec encodes them (the instruction as `task`).

A chunking policy (ACT, SmolVLA, pi0 style: one observation per chunk) answers chunks of
`n_action_steps`. A policy that remembers its rollout between steps (`n_obs_steps > 1`: Diffusion
Policy, VQ-BeT; ACT with temporal ensembling) sees every observation and answers one action a
step, as its `select_action` does, from a RolloutMemory kept per rollout: per session in
process, per connection when served (the server's context object of that connection).

Its action contract (policybench.policy.contract) is what the checkpoint says of itself: its
cameras and their sizes (the config's visual input features), its control rate (the env's fps in
train_config.json, for a policy trained with an env), and what a `contract.json` beside
config.json declares beyond that (action kind, rotation, gripper: LeRobot's config does not say
them), which wins."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import weakref
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import Chunk, ChunkSource, Observation, SessionContext
from policybench.policy.codec import Codec
from policybench.policy.contract import Contract, Image

PREFIX = "lerobot:"  # the policy name's prefix: `lerobot:PATH`
TASK = "task"  # LeRobot's key for the instruction in a batch (a `lerobot` codec's prompt key)
ACTION = "action"  # LeRobot's action feature
OBS_IMAGES = "observation.images"  # where select_action stacks a policy's cameras
# The CPU devices, by the kernels they run (see _use_cpu_kernels): `cpu-onednn` as lerobot-eval.
CPU_KERNELS = {
    "cpu": "native (oneDNN off), 1 intra-op thread unless OMP_NUM_THREADS is set",
    "cpu-onednn": "oneDNN (as lerobot-eval), 1 intra-op thread unless OMP_NUM_THREADS is set",
}
DEVICES = (*CPU_KERNELS, "cuda", "mps")
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
    float32. The instruction is left out (it travels as `task`), and so is what a request is
    told in a run with latency (it travels as `predict_action_chunk`'s arguments)."""
    inputs: dict[str, np.ndarray] = {}
    for name, value in encoded.items():
        if name in (TASK, keys.INFERENCE_DELAY, keys.ACTION_PREFIX):
            continue
        array = np.asarray(value)
        if array.dtype == np.uint8 and array.ndim == 3:
            # C order, as LeRobot's `.contiguous()`: a conv's kernel depends on the layout.
            inputs[name] = array.transpose(2, 0, 1).astype(np.float32, order="C") / np.float32(255)
        else:
            inputs[name] = array.astype(np.float32)
    return inputs


@dataclass(eq=False)
class RolloutMemory:
    """What a LeRobot policy keeps between one rollout's steps, as its `select_action` keeps it
    in `_queues`: the last `n_obs_steps` preprocessed observations (the first one copied until
    the history is full), the normalized actions still to play, ACT's temporal ensembler, and
    the rollout's own random generator (seeded from `rollout_seed` at its first observation)."""

    history: dict[str, deque[Any]]
    generator: Any
    actions: deque[Any] = field(default_factory=deque)
    ensembler: Any = None

    def remember(self, observation: Mapping[str, Any]) -> None:
        """LeRobot's `populate_queues`: the first observation fills the history."""
        for name, queue in self.history.items():
            if len(queue) < (queue.maxlen or 1):
                queue.extend([observation[name]] * ((queue.maxlen or 1) - len(queue)))
            else:
                queue.append(observation[name])


class LeRobotModel:
    """A LeRobot policy: `predict_batch` runs the policy on the stacked observations of many
    rollouts. A chunking policy answers each rollout the first `n_action_steps` actions of its
    chunk (LeRobot's own action queue), so a ChunkPlayer replans when they are played; a policy
    with a RolloutMemory (`stepwise`) answers one action per observation."""

    def __init__(self, checkpoint: Path, device: str = "cpu", seed: int = 0) -> None:
        if device not in DEVICES:
            raise ValueError(f"--policy-device must be one of {', '.join(DEVICES)}, got {device!r}")
        self.checkpoint: Path | None = checkpoint
        self.device = device
        self.seed = seed
        self.name = f"{PREFIX}{checkpoint}"
        self._onednn = device == "cpu-onednn"
        self._on_cpu = device in CPU_KERNELS
        if self._on_cpu:
            _use_cpu_kernels(self._onednn)
        policy, pre, post = _load(checkpoint, "cpu" if self._on_cpu else device)
        # What every rollout's record names: read once, for the weights loaded (hashing a VLA's
        # weights at each rollout would cost seconds).
        self._adopt(policy, pre, post, _digest(checkpoint / "model.safetensors"))

    @classmethod
    def in_memory(
        cls, policy: Any, preprocessor: Any, postprocessor: Any, seed: int = 0
    ) -> LeRobotModel:
        """A PreTrainedPolicy and its pre/post-processors as a training loop holds them (as
        `make_pre_post_processors` made them), for `policybench.evaluate`. The policy runs where
        its weights are, with the process's torch settings untouched; the record names the
        weights by a digest of the state_dict taken now (build one per evaluation, as the
        weights change between steps). Each call runs the policy in eval mode and leaves it in
        the mode it found it in."""
        model = cls.__new__(cls)
        model.checkpoint = None
        model.device = str(next(iter(policy.parameters())).device)
        model.seed = seed
        model.name = f"lerobot-{policy.config.type}-in-memory"
        model._onednn = model._on_cpu = False  # the caller's kernels and threads, as they are
        model._adopt(policy, preprocessor, postprocessor, _state_digest(policy))
        return model

    @property
    def source(self) -> str:
        """What the model was built from, as errors name it."""
        if self.checkpoint is None:
            return f"in-memory LeRobot policy {self.name}"
        return f"LeRobot checkpoint {self.checkpoint}"

    def _adopt(self, policy: Any, pre: Any, post: Any, weights_sha256: str) -> None:
        """Reads what the model needs to know of `policy`'s config."""
        self._policy, self._pre, self._post = policy, pre, post
        self.weights_sha256 = weights_sha256
        self.lerobot_version = metadata.version("lerobot")
        config = self._policy.config
        self.policy_type: str = config.type
        self.chunk_size: int = int(getattr(config, "chunk_size", 1) or 1)
        self.n_action_steps: int = int(getattr(config, "n_action_steps", 1) or 1)
        self.n_obs_steps: int = int(getattr(config, "n_obs_steps", 1) or 1)
        self.ensemble_coeff: float | None = getattr(config, "temporal_ensemble_coeff", None)
        self.stepwise = self.n_obs_steps > 1 or self.ensemble_coeff is not None
        # The history LeRobot's select_action keeps: every queue of the policy but its actions.
        queues = getattr(self._policy, "_queues", None) or {}
        self._history_names = tuple(name for name in queues if name != ACTION)
        if self.n_obs_steps > 1:
            if ACTION not in queues or not self._history_names:
                raise ValueError(
                    f"{self.source} ({config.type}) conditions on "
                    f"n_obs_steps={self.n_obs_steps} past observations but keeps no observation "
                    "queues as Diffusion Policy and VQ-BeT do; policybench cannot replay them"
                )
            self.n_action_steps = int(queues[ACTION].maxlen)  # what one generation queues
        self.expected = Features(
            {
                name: tuple(feature.shape)
                for name, feature in config.input_features.items()
                if feature.type.name in ("VISUAL", "STATE", "ENV")
            }
        )
        action = config.output_features.get(ACTION)
        self.action_shape = None if action is None else tuple(action.shape)
        # The input layouts checked against the checkpoint's features: one model may serve
        # several Evals (load_model keeps one a checkpoint), each checked at its first call.
        self._checked: set[tuple[tuple[str, tuple[int, ...]], ...]] = set()
        self._memories: dict[int, RolloutMemory] = {}
        # Real-time chunking (pi0, pi0.5, SmolVLA with `rtc_config.enabled`): each rollout's last
        # chunk as the policy answered it (normalized), whose tail is the next call's prefix.
        rtc = getattr(config, "rtc_config", None)
        self.rtc = bool(rtc is not None and getattr(rtc, "enabled", False))
        self._answered: dict[int, Any] = {}
        self.contract = checkpoint_contract(config, self.checkpoint)

    def open(self, context: SessionContext) -> ChunkSource:
        self._memories.pop(id(context), None)  # a session starts its rollout afresh
        return lambda obs: self.predict_batch([(context, obs)])[0]

    def predict_batch(self, requests: Sequence[tuple[SessionContext, Observation]]) -> list[Chunk]:
        import torch

        inputs = [as_lerobot_inputs(obs) for _, obs in requests]
        if self._on_cpu:  # this model's kernels, whichever model of the process was loaded last
            torch.backends.mkldnn.enabled = self._onednn
        layout = tuple(sorted((name, array.shape) for name, array in inputs[0].items()))
        if layout not in self._checked:
            self._check(inputs[0])
            self._checked.add(layout)
        batch: dict[str, Any] = {
            name: torch.from_numpy(np.stack([one[name] for one in inputs]))
            for name in self.expected.shapes
        }
        batch[TASK] = [obs.get(TASK, context.instruction) for context, obs in requests]
        with torch.inference_mode(), _evaluating(self._policy):
            if self.stepwise:
                contexts = [context for context, _ in requests]
                memories = [self._memory(c, one) for c, one in zip(contexts, inputs, strict=True)]
                actions = self._post(self._select_actions(self._pre(batch), memories))[:, None]
            elif self.rtc:
                actions = self._post(self._rtc_chunks(self._pre(batch), requests))
            else:
                actions = self._policy.predict_action_chunk(self._pre(batch))
                actions = self._post(actions[:, : self.n_action_steps])
        actions = actions.to("cpu", torch.float32).numpy()
        return [
            Chunk(chunk, context.control_hz)
            for (context, _), chunk in zip(requests, actions, strict=True)
        ]

    def _rtc_chunks(
        self, batch: dict[str, Any], requests: Sequence[tuple[SessionContext, Observation]]
    ) -> Any:
        """Each rollout's chunk as LeRobot's RTC loop asks for it: one rollout at a time (the
        delay is one number per call), with `inference_delay` and `prev_chunk_left_over` (the
        unplayed tail of the rollout's last chunk, normalized) where the request carries them."""
        import torch

        chunks = []
        for row, (context, obs) in enumerate(requests):
            one = {
                name: value[row : row + 1] if isinstance(value, torch.Tensor | list) else value
                for name, value in batch.items()
            }
            told: dict[str, Any] = {}
            if keys.INFERENCE_DELAY in obs:
                left = len(obs[keys.ACTION_PREFIX])
                last = self._answered.get(id(context))
                # The keys are named as predict_action_chunk's arguments.
                told = {
                    keys.INFERENCE_DELAY: int(obs[keys.INFERENCE_DELAY]),
                    keys.ACTION_PREFIX: None if last is None or not left else last[-left:],
                }
            chunk = self._policy.predict_action_chunk(one, **told)[:, : self.n_action_steps]
            if id(context) not in self._answered:
                weakref.finalize(context, self._answered.pop, id(context), None)
            self._answered[id(context)] = chunk[0]
            chunks.append(chunk)
        return torch.cat(chunks)

    def _memory(self, context: SessionContext, inputs: Mapping[str, np.ndarray]) -> RolloutMemory:
        """The rollout's memory, made at its first observation and dropped with its context."""
        key = id(context)
        memory = self._memories.get(key)
        if memory is None:
            import torch
            from lerobot.policies.act.modeling_act import ACTTemporalEnsembler

            generator = torch.Generator().manual_seed(rollout_seed(self.seed, inputs))
            history = {name: deque(maxlen=self.n_obs_steps) for name in self._history_names}
            memory = self._memories[key] = RolloutMemory(history, generator)
            if self.ensemble_coeff is not None:
                memory.ensembler = ACTTemporalEnsembler(self.ensemble_coeff, self.chunk_size)
            weakref.finalize(context, self._memories.pop, key, None)
        return memory

    def _select_actions(self, batch: dict[str, Any], memories: list[RolloutMemory]) -> Any:
        """One normalized action per rollout, as `select_action` answers it, for a preprocessed
        batch whose rows are the rollouts of `memories`."""
        import torch

        if self.ensemble_coeff is not None:  # ACT: a chunk every step, averaged over time
            chunks = self._policy.predict_action_chunk(batch)
            rows = [m.ensembler.update(chunks[i : i + 1]) for i, m in enumerate(memories)]
            return torch.cat(rows)
        config = self._policy.config
        if config.image_features:  # select_action's stacking of the cameras
            names = list(config.image_features)
            batch = {**batch, OBS_IMAGES: torch.stack([batch[n] for n in names], dim=-4)}
        for i, memory in enumerate(memories):
            memory.remember({name: batch[name][i : i + 1] for name in self._history_names})
        empty = [memory for memory in memories if not memory.actions]
        if empty:
            for memory, chunk in zip(empty, self._generate(empty), strict=True):
                memory.actions.extend(chunk[:, None])
        return torch.cat([memory.actions.popleft() for memory in memories])

    def _generate(self, memories: list[RolloutMemory]) -> Any:
        """`[B, n_action_steps, D]` normalized actions from the rollouts' histories, each drawing
        its noise from its own generator: Diffusion Policy in one batch (a noise sample per
        rollout, the denoising steps' noise from a list of generators), any other policy one
        rollout at a time with torch's global generator in the rollout's state."""
        import torch

        steps = self.n_obs_steps
        stacked = {
            name: torch.stack(
                [torch.cat([m.history[name][t] for m in memories]) for t in range(steps)],
                dim=1,
            )
            for name in self._history_names
        }
        config = self._policy.config
        if self.policy_type == "diffusion":
            diffusion = self._policy.diffusion
            condition = diffusion._prepare_global_conditioning(stacked)
            shape = (1, config.horizon, config.action_feature.shape[0])
            generators = [memory.generator for memory in memories]
            noise = torch.cat([torch.randn(shape, generator=g) for g in generators])
            sample = diffusion.conditional_sample(
                len(memories),
                global_cond=condition,
                generator=generators,
                noise=noise.to(condition.device, condition.dtype),
            )
            start = self.n_obs_steps - 1
            return sample[:, start : start + self.n_action_steps]
        chunks = []
        for i, memory in enumerate(memories):
            with torch.random.fork_rng(devices=[]):
                torch.set_rng_state(memory.generator.get_state())
                self._policy._queues = {
                    name: deque([step[i : i + 1] for step in stacked[name].unbind(1)])
                    for name in self._history_names
                }
                chunk = self._policy.predict_action_chunk(dict.fromkeys(self._history_names))
                memory.generator.set_state(torch.get_rng_state())
            chunks.append(chunk[:, : self.n_action_steps])
        return torch.cat(chunks)

    def _check(self, inputs: Mapping[str, np.ndarray]) -> None:
        provided = Features({name: array.shape for name, array in inputs.items()})
        missing = [
            name
            for name, shape in self.expected.shapes.items()
            if provided.shapes.get(name) != shape
        ]
        if missing:
            raise FeatureMismatch(
                f"{self.source} expects input features {self.expected}; "
                f"the Eval's 'lerobot' codec provides {provided} (mismatched: "
                f"{', '.join(missing)}). Evaluate the checkpoint on the suite it was trained "
                "for, or declare a codec that names its features"
            )

    def describe(self) -> dict[str, Any]:
        return {
            keys.POLICY_NAME: self.name,
            "policy_type": self.policy_type,
            **(
                {"checkpoint": str(self.checkpoint)}
                if self.checkpoint is not None
                else {"in_memory": "a PreTrainedPolicy in the evaluating process, no checkpoint"}
            ),
            "weights_sha256": self.weights_sha256,
            "chunk_size": self.chunk_size,
            "n_action_steps": self.n_action_steps,
            "n_obs_steps": self.n_obs_steps,
            "temporal_ensemble_coeff": self.ensemble_coeff,
            **({"real_time_chunking": True} if self.rtc else {}),
            "actions_per_call": 1 if self.stepwise else self.n_action_steps,
            "sampling": f"per rollout: torch generator seeded from seed {self.seed} and the "
            "rollout's first observation",
            "device": self.device,
            "cpu_kernels": CPU_KERNELS.get(self.device)
            if self.checkpoint is not None
            else "as the evaluating process set them",
            "lerobot": self.lerobot_version,
        }


CONTRACT_FILE = "contract.json"  # beside config.json: what a checkpoint declares of itself


def checkpoint_contract(config: Any, checkpoint: Path | None) -> Contract:
    """A checkpoint's action contract (see the module's doc); ValueError naming a contract.json
    that does not parse or names an unknown field or value."""
    images = {
        name: Image(int(feature.shape[-2]), int(feature.shape[-1]), flip=None)
        for name, feature in config.input_features.items()
        if feature.type.name == "VISUAL" and len(feature.shape) == 3
    }
    declared: dict[str, Any] = {"images": images}
    train_config = None if checkpoint is None else checkpoint / "train_config.json"
    if train_config is not None and train_config.is_file():
        env = (json.loads(train_config.read_text()) or {}).get("env") or {}
        if env.get("fps"):
            declared[keys.CONTROL_HZ] = float(env["fps"])
    own = None if checkpoint is None else checkpoint / CONTRACT_FILE
    if own is not None and own.is_file():
        try:
            data = json.loads(own.read_text())
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object of contract fields, got {data!r}")
            return Contract.of({**declared, **data})
        except ValueError as error:
            raise ValueError(f"{own}: {error}") from None
    return Contract(**declared)


_LOADED: dict[tuple[Path, str, int, int | None], LeRobotModel] = {}
_LOADING = threading.Lock()


def load_model(policy_name: str, device: str = "cpu", seed: int = 0) -> LeRobotModel:
    """The LeRobotModel for `lerobot:PATH`, loaded once a process for each device and seed: a
    server or worker that plays it on several Evals (each through its own codec; its rollouts'
    state is kept per session) holds one copy of the weights. ValueError for a bad checkpoint
    directory. Weights rewritten since (a training run saving to the same path) load again."""
    checkpoint = checkpoint_of(policy_name)
    weights = checkpoint / "model.safetensors"
    key = (
        checkpoint.resolve(),
        device,
        seed,
        weights.stat().st_mtime_ns if weights.exists() else None,
    )
    with _LOADING:
        model = _LOADED.get(key)
        if model is None:
            model = _LOADED[key] = LeRobotModel(checkpoint, device, seed)
        return model


def is_pretrained_policy(target: Any) -> bool:
    """Whether `target` is a LeRobot PreTrainedPolicy (without importing LeRobot to ask)."""
    return any(
        cls.__name__ == "PreTrainedPolicy" and cls.__module__.startswith("lerobot.")
        for cls in type(target).__mro__
    )


def rollout_seed(seed: int, inputs: Mapping[str, np.ndarray]) -> int:
    """The seed of a rollout's generator: from the run's policy seed and the bytes of the
    rollout's first observation (as LeRobot inputs), so a rollout samples alike on any worker,
    in any batch, in any order."""
    hasher = hashlib.blake2b(digest_size=8)
    hasher.update(int(seed).to_bytes(8, "little", signed=True))
    for name in sorted(inputs):
        hasher.update(name.encode())
        hasher.update(np.ascontiguousarray(inputs[name]).tobytes())
    return int.from_bytes(hasher.digest(), "little") >> 1


def check_action_width(model: LeRobotModel, codec: Codec) -> None:
    """Raises FeatureMismatch when the checkpoint's actions are narrower than the env plays."""
    width = codec.action_width
    if model.action_shape is not None and width is not None and model.action_shape[0] < width:
        raise FeatureMismatch(
            f"{model.source} answers actions {model.action_shape}; the "
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


def _use_cpu_kernels(onednn: bool) -> None:
    """On CPU: torch's native kernels rather than oneDNN's unless `onednn`, and one intra-op
    thread per process, as parallelism comes from `-n` workers (several threads per worker on a
    shared machine are many times slower).

    oneDNN's convolutions give answers that depend on the batch size and the thread count (a
    served model batches whatever rollouts arrive together, so they would depend on timing); the
    native ones are batch-invariant, at a cost in speed (a random-init ACT on PushT, one thread:
    47.6 ms a sample at batch 1 and 34.1 at batch 8, against oneDNN's 40.2 and 15.1; so
    `cpu-onednn` is the fast choice where a batch's make-up is fixed, as with --envs-per-worker
    and a model per worker). lerobot-eval runs oneDNN, so
    its actions differ from native ones (MetaWorld reach-v3, a random-init ACT: 2e-7 in the
    first chunk, 5.5e-5 after 40 steps as the rollouts drift apart); with the same kernels and
    thread count they are bit-equal (tests/test_lerobot_parity.py)."""
    import torch

    torch.backends.mkldnn.enabled = onednn
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


@contextmanager
def _evaluating(policy: Any) -> Iterator[None]:
    """The policy in eval mode (dropout off) for a call, then back in the mode it was in: a
    training loop's policy is in train mode between its steps."""
    training = policy.training
    policy.eval()
    try:
        yield
    finally:
        policy.train(training)


def _state_digest(policy: Any) -> str:
    """The weights' digest, from the state_dict's names, dtypes, shapes and bytes."""
    import torch

    hasher = hashlib.sha256()
    for name, tensor in policy.state_dict().items():
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        hasher.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)}".encode())
        hasher.update(flat.view(torch.uint8).numpy().tobytes())
    return hasher.hexdigest()[:16]


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()[:16]
