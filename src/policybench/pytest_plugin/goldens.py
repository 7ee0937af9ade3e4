"""The `golden` fixture: syrupy's `snapshot`, stored and compared as a golden trace."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def golden(snapshot: Any) -> Any:
    """`assert canonical_trace(...) == golden` pins a trace under goldens/<test module>/."""
    from policybench.record.golden import GoldenExtension

    return snapshot.use_extension(GoldenExtension)
