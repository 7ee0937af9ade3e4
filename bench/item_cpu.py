"""A pytest plugin for bench/recorders.py: each test item's CPU time (this process's, setup, call
and teardown), written as JSON lines to $POLICYBENCH_ITEM_CPU. Wall time on a shared machine moves
by several percent from run to run; a process's CPU time moves less, which is what telling a 5%
cost apart needs. Loaded with `-p item_cpu` and this folder on PYTHONPATH."""

from __future__ import annotations

import json
import os
import time

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started = time.process_time()
    yield
    path = os.environ.get("POLICYBENCH_ITEM_CPU")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"item": item.nodeid, "cpu_s": time.process_time() - started}))
            out.write("\n")
