"""The policy server a run starts (--policy-sharing=shared) imports from the run's path, but its
$PYTHONPATH leaves out this interpreter's own libraries: the env servers it starts for isolated
Evals run other interpreters, where a site-packages of ours ahead of theirs replaced their MuJoCo
4 with our 3.3 (MyoSuite's hand then failed to build)."""

from __future__ import annotations

import os
import site
import sysconfig
from pathlib import Path

from policybench.pytest_plugin.remote import _import_path


def test_the_servers_path_holds_the_runs_folders_and_none_of_this_interpreters_libraries(
    pytestconfig, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", "/somewhere/of/the/users")
    entries = _import_path(pytestconfig).split(os.pathsep)
    libraries = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]}
    libraries |= set(site.getsitepackages())
    resolved = {str(Path(entry).resolve()) for entry in entries}
    assert not resolved & {str(Path(d).resolve()) for d in libraries}
    assert str(pytestconfig.rootpath) in entries
    assert entries[-1] == "/somewhere/of/the/users"  # the user's own, kept
