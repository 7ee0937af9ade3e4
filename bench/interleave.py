"""A pytest plugin for bench/recorders.py --interleaved: the recorder settings named in
$POLICYBENCH_INTERLEAVE (comma-separated: bare, traces) taken by the run's rollouts in turn, item
by item, so that every setting meets the same machine at the same time; each item's setting,
wall and CPU time written as JSON lines to $POLICYBENCH_ITEM_CPU. The run's first rollout warms
up (the env built, the preflight run, the expert's observations kept) and is not counted. Loaded
with `-p interleave` and this folder on PYTHONPATH."""

from __future__ import annotations

import json
import os
import time

import pytest

OPTIONS = {  # setting -> (no_rollout_traces, expert_shadow)
    "bare": (True, 0),
    "traces": (False, 0),
}
SETTING = pytest.StashKey[str]()


def pytest_collection_modifyitems(session, config, items):
    settings = os.environ["POLICYBENCH_INTERLEAVE"].split(",")
    for turn, item in enumerate(items[1:]):  # the first warms up, under the run's own options
        item.stash[SETTING] = settings[turn % len(settings)]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    setting = item.stash.get(SETTING, None)
    if setting is not None:
        item.config.option.no_rollout_traces, item.config.option.expert_shadow = OPTIONS[setting]
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    with open(os.environ["POLICYBENCH_ITEM_CPU"], "a", encoding="utf-8") as out:
        found = {
            "item": item.nodeid,
            "setting": setting,
            "wall_s": time.perf_counter() - wall,
            "cpu_s": time.process_time() - cpu,
        }
        out.write(json.dumps(found) + "\n")
