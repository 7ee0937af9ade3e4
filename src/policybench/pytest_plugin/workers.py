"""What the controller hands each xdist worker, in one hook: each plugin module hands its values
(the run directory, the resolved policy, the shared server, ...) with `hand_to_workers` during
`pytest_configure`, and a worker reads them back with `from_controller`."""

from __future__ import annotations

from typing import Any

import pytest

WORKER_INPUT = "policybench"  # the workerinput entry that carries them
HANDED = pytest.StashKey[dict[str, Any]]()


def hand_to_workers(config: pytest.Config, name: str, value: Any) -> None:
    """Hands `value` (JSON-like) to every worker this controller starts."""
    config.stash.setdefault(HANDED, {})[name] = value


def from_controller(config: pytest.Config, name: str) -> Any:
    """What the controller handed this worker under `name`; None in the controller itself."""
    workerinput = getattr(config, "workerinput", None)
    return None if workerinput is None else workerinput.get(WORKER_INPUT, {}).get(name)


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[WORKER_INPUT] = dict(node.config.stash.get(HANDED, {}))
