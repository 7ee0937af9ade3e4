"""The suites' interpreters of their own, as a test asks for one: skipped where it is not built,
saying how to build it."""

from __future__ import annotations

from pathlib import Path

import pytest

from policybench.envserver import Interpreter
from policybench.envserver.interpreters import InterpreterMissing, python_of


def built_python(interpreter: Interpreter) -> Path:
    """The python of `interpreter`; the test is skipped where it is not built."""
    try:
        return python_of(interpreter)
    except InterpreterMissing as missing:
        pytest.skip(str(missing))
