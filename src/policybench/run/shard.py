"""A shard: a deterministic 1/N of a run's planned rollouts (`--shard K/N`), independent of the
worker count; a shard is a run of its own, and merge builds one run from shards."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1..count) of `count`; `source` says where it was read from."""

    index: int
    count: int
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ValueError(
                f"--shard K/N needs 1 <= K <= N, got {self.index}/{self.count}: shards are "
                f"numbered from 1 (--shard 1/{max(self.count, 1)} to "
                f"{max(self.count, 1)}/{max(self.count, 1)})"
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if found is None:
            raise ValueError(
                f"--shard takes K/N (shard K of N, numbered from 1, e.g. --shard 2/4) or auto, "
                f"got {text!r}"
            )
        return cls(int(found[1]), int(found[2]), f"--shard {text}")

    @property
    def label(self) -> str:
        """What names this shard in its run id: `shard2of4`."""
        return f"shard{self.index}of{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def takes(self, place: int) -> bool:
        """Whether this shard runs what is dealt at `place` (0, 1, 2, ...): shard 1 takes 0, N,
        2N, ..., shard 2 takes 1, N + 1, ..."""
        return place % self.count == self.index - 1
