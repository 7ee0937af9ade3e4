"""policybench: evaluate robot policies in simulation the way pytest evaluates code."""

from policybench.spec import Eval, Rollout, Scene, seeded_per_task

__all__ = ["Eval", "Rollout", "Scene", "evaluate", "seeded_per_task"]


def __getattr__(name: str):
    # `evaluate` lives with the pytest plugin; importing it lazily keeps the policy layer and
    # plain scripts free of pytest.
    if name == "evaluate":
        from policybench.pytest_plugin.collection import evaluate

        return evaluate
    raise AttributeError(f"module 'policybench' has no attribute {name!r}")
