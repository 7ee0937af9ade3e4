import os

import pytest

# scipy's and numpy's extension modules cannot be imported twice in one process; load them
# before pytester's in-process runs snapshot and restore sys.modules.
import scipy.stats  # noqa: F401

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True, scope="session")
def _nested_pytest_runs_without_hypothesis():
    """The pytest runs these tests start (subprocesses, pytester's runs) use no hypothesis, and
    importing its plugin is about a second of each subprocess's start: they leave it out. The
    tests of this session that use hypothesis are configured before this runs."""
    before = os.environ.get("PYTEST_ADDOPTS")
    os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, [before, "-p no:hypothesispytest"]))
    yield
    if before is None:
        os.environ.pop("PYTEST_ADDOPTS", None)
    else:
        os.environ["PYTEST_ADDOPTS"] = before
