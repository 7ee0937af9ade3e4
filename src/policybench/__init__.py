"""policybench: evaluate robot policies in simulation the way pytest evaluates code."""

from policybench.spec import Eval, Rollout, Scene, seeded_per_task

__all__ = ["Eval", "Rollout", "Scene", "evaluate", "parametrize", "seeded_per_task", "wrap"]


def __getattr__(name: str):
    # Imported lazily: `parametrize` lives with the pytest plugin, `evaluate` serves a model to a
    # child pytest run, `wrap` records a loop; the policy layer and plain scripts import none.
    if name == "parametrize":  # the decorator: a test once per planned Rollout of Evals
        from policybench.pytest_plugin.collection import parametrize

        return parametrize
    if name == "evaluate":  # a model evaluated from a training loop
        from policybench.training import evaluate

        return evaluate
    if name == "wrap":  # the recorder of a loop policybench does not drive
        from policybench.loop import wrap

        return wrap
    raise AttributeError(f"module 'policybench' has no attribute {name!r}")
