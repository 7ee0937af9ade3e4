"""policybench: evaluate robot policies in simulation the way pytest evaluates code."""

from policybench.spec import Eval, Rollout, Scene, seeded_per_task

__all__ = ["Eval", "Rollout", "Scene", "evaluate", "parametrize", "seeded_per_task", "wrap"]


def __getattr__(name: str):
    # `evaluate` lives with the pytest plugin; importing it lazily keeps the policy layer and
    # plain scripts free of pytest.
    if name in ("evaluate", "parametrize"):
        from policybench.pytest_plugin import collection

        return getattr(collection, name)
    if name == "wrap":  # the recorder of a loop policybench does not drive
        from policybench.wrap import wrap

        return wrap
    raise AttributeError(f"module 'policybench' has no attribute {name!r}")
