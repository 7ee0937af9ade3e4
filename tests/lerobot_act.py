"""The small random-init ACT the LeRobot tests train and play: two heads, one layer each, chunks
of four, on the CPU, with no pretrained backbone (ImageNet's weights are a download)."""

from __future__ import annotations

from typing import Any

CHUNK = 4


def small_act_config(**fields: Any) -> Any:
    """LeRobot's ACTConfig at the tests' small size; `fields` adds to it (the features, where no
    dataset's metadata gives them to `make_policy`) or replaces a size."""
    from lerobot.policies.act.configuration_act import ACTConfig

    small = dict(
        chunk_size=CHUNK,
        n_action_steps=CHUNK,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        pretrained_backbone_weights=None,
        device="cpu",
    )
    return ACTConfig(**{**small, **fields})
