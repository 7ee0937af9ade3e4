"""Suite adapters: each module declares the Evals of one simulator and is registered under the
`policybench.suites` entry point (the built-in ones too), so nothing lists suites by hand."""

from __future__ import annotations

import functools
import importlib
import sys
from importlib.metadata import entry_points
from types import ModuleType

from policybench.spec import Eval

ENTRY_POINT_GROUP = "policybench.suites"


def suite_modules() -> dict[str, str]:
    """Registered suite name -> the module that declares its Evals."""
    return {entry.name: entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)}


@functools.cache
def registered_evals() -> dict[str, Eval]:
    """Every module-level Eval of the registered suites, by name (importing a suite module
    imports no simulator)."""
    found: dict[str, Eval] = {}
    for module_name in suite_modules().values():
        for value in vars(importlib.import_module(module_name)).values():
            if isinstance(value, Eval):
                found.setdefault(value.name, value)
    return found


def module_beside_user(module_name: str, wanted_for: str) -> ModuleType:
    """The module `module_name` (of `wanted_for`, a module:attribute the user gave), looked for
    beside the user too, as `python -m` finds it; one that cannot be imported is a LookupError
    saying what to do."""
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise LookupError(
            f"cannot import {module_name!r} for {wanted_for} ({error}); run from the directory "
            "that holds it or put it on PYTHONPATH"
        ) from None


def eval_named(text: str) -> Eval:
    """An Eval named by its registered name or as `module:attribute`."""
    if ":" not in text:
        evals = registered_evals()
        if text not in evals:
            raise LookupError(f"no registered eval {text!r}; known: {sorted(evals)}")
        return evals[text]
    module_name, _, attribute = text.partition(":")
    return eval_in(module_beside_user(module_name, text), attribute, text)


def eval_in(module: ModuleType, attribute: str, text: str) -> Eval:
    """`module`'s `attribute`, an Eval (`text`: how the user named it); a LookupError if not."""
    value = getattr(module, attribute, None)
    if not isinstance(value, Eval):
        raise LookupError(f"{text} is not an Eval (got {type(value).__name__})")
    return value


def reference_in(eval: Eval, module: ModuleType) -> str | None:
    """`module:attribute` of `eval` where `module` (the one that uses it) holds it at module
    level, so a server can import the same declaration; None if it does not."""
    for attribute, value in vars(module).items():
        if value is eval:
            return f"{module.__name__}:{attribute}"
    return None
