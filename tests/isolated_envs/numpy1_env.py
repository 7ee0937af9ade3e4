"""A small env needing numpy alone (no gymnasium, no policybench), run by the tests in an
interpreter with numpy < 2 while they run numpy 2: its observations hold arrays whose dtype, byte
order and shape must cross exactly, and its info the numpy version it runs under."""

from __future__ import annotations

from typing import Any

import numpy as np

STEPS_TO_SUCCESS = 3


class Box:
    """What the env server reads of a gymnasium Box (its name, low, high, dtype)."""

    def __init__(self, low: float, high: float, shape: tuple[int, ...], dtype: str) -> None:
        self.dtype = np.dtype(dtype)
        self.shape = shape
        self.low = np.full(shape, low, self.dtype)
        self.high = np.full(shape, high, self.dtype)


class Numpy1Env:
    """A point moved by its float32 action; solved after STEPS_TO_SUCCESS steps. Everything in an
    observation is drawn from the reset seed with RandomState, whose stream numpy 1 and 2 share."""

    metadata = {"render_modes": []}

    def __init__(self, task: str, image_shape: tuple[int, int] = (4, 5)) -> None:
        self.task = task
        self.image_shape = tuple(image_shape)
        self.action_space = Box(-1.0, 1.0, (2,), "float32")
        self.observation_space = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        self._random = np.random.RandomState(seed)
        self._position = np.zeros(2, np.float64)
        self._steps = 0
        return self._observation(np.zeros(2, np.float32)), self._info()

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        action = np.asarray(action)
        self._steps += 1
        self._position = self._position + action.astype(np.float64)
        reward = -float(np.abs(self._position).sum())
        return self._observation(action), reward, False, False, self._info()

    def close(self) -> None:
        self._random = None

    def _observation(self, action: np.ndarray) -> dict[str, np.ndarray]:
        draw = self._random
        return {
            "image": draw.randint(0, 256, (*self.image_shape, 3)).astype(np.uint8),
            "state": np.concatenate([self._position, [self._steps]]),
            "action": action,  # as it arrived: its dtype and bytes must be the proxy's
            "counts": draw.randint(-(2**31), 2**31 - 1, (2, 2)).astype(">i4"),  # big-endian
            "flags": draw.rand(3) > 0.5,
            "half": np.array(draw.rand(), np.float16),  # 0-d
            "none_yet": np.zeros((0, 2), np.float32),
        }

    def _info(self) -> dict[str, Any]:
        return {
            "is_success": self._steps >= STEPS_TO_SUCCESS,
            "numpy": np.__version__,
            "task": self.task,
        }


def make(task: str, **kwargs: Any) -> Numpy1Env:
    return Numpy1Env(task, **kwargs)
