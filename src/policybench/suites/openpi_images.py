"""openpi_client's image conventions, shared by the suites whose openpi codecs send images the
way openpi's examples do."""

from __future__ import annotations

import numpy as np


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """openpi_client's `image_tools.resize_with_pad`: scale to fit (PIL bilinear), pad with
    black to `height` x `width`, keep uint8."""
    from PIL import Image

    if image.shape[:2] == (height, width):
        return image
    current = Image.fromarray(image)
    ratio = max(current.width / width, current.height / height)
    resized = current.resize(
        (int(current.width / ratio), int(current.height / ratio)), resample=Image.BILINEAR
    )
    padded = Image.new(resized.mode, (width, height), 0)
    padded.paste(resized, ((width - resized.width) // 2, (height - resized.height) // 2))
    return np.asarray(padded)
