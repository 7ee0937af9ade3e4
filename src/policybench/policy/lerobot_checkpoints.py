"""Random-init LeRobot checkpoints, saved as `lerobot-eval` loads them (weights, config and
processors): small networks for checking a pipeline end to end, not skill."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from policybench.policy.lerobot import ACTION

# Small networks for pipeline checks: what each policy type is built with unless told otherwise.
SMALL = {
    "act": {
        "chunk_size": 20,
        "n_action_steps": 10,
        "dim_model": 64,
        "n_heads": 2,
        "dim_feedforward": 128,
        "n_encoder_layers": 1,
        "n_decoder_layers": 1,
        "n_vae_encoder_layers": 1,
    },
    "diffusion": {
        "n_obs_steps": 2,
        "horizon": 16,
        "n_action_steps": 8,
        "down_dims": (32, 64),
        "diffusion_step_embed_dim": 32,
        "spatial_softmax_num_keypoints": 16,
        "num_inference_steps": 10,
    },
    "vqbet": {
        "n_obs_steps": 3,
        "n_action_pred_token": 3,
        "action_chunk_size": 5,
        "spatial_softmax_num_keypoints": 16,
        "vqvae_n_embed": 8,
        "vqvae_embedding_dim": 32,
        "vqvae_enc_hidden_dim": 32,
        "gpt_block_size": 16,
        "gpt_input_dim": 32,
        "gpt_output_dim": 32,
        "gpt_n_layer": 1,
        "gpt_n_head": 2,
        "gpt_hidden_dim": 32,
    },
}


def save_random_checkpoint(
    directory: Path,
    images: Mapping[str, tuple[int, int, int]],
    state_dim: int,
    action_dim: int,
    stats: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    policy_type: str = "act",
    seed: int = 0,
    **config: Any,
) -> Path:
    """Writes a small random-init checkpoint of `policy_type` (SMALL's sizes, updated by
    `config`) for camera features `images` (name -> CxHxW), `observation.state` and `action`,
    with its processors, as `lerobot-eval` loads it: for pipeline checks, not skill. `stats`
    holds mean/std (and min/max where the policy normalizes so) per feature, per channel for
    images."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import (
        get_policy_class,
        make_policy_config,
        make_pre_post_processors,
    )

    torch.manual_seed(seed)
    features = {name: PolicyFeature(FeatureType.VISUAL, shape) for name, shape in images.items()}
    features["observation.state"] = PolicyFeature(FeatureType.STATE, (state_dim,))
    policy_config = make_policy_config(
        policy_type,
        input_features=features,
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (action_dim,))},
        pretrained_backbone_weights=None,
        device="cpu",
        **{**SMALL.get(policy_type, {}), **config},
    )
    policy = get_policy_class(policy_type)(policy_config)
    tensors = {
        name: {stat: torch.tensor(values, dtype=torch.float32) for stat, values in by_stat.items()}
        for name, by_stat in stats.items()
    }
    pre, post = make_pre_post_processors(policy_config, dataset_stats=tensors)
    directory.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(directory)
    pre.save_pretrained(directory)
    post.save_pretrained(directory)
    return directory
