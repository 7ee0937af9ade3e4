"""The pytest plugin (registered through the `pytest11` entry point). Each concern is a plugin
module of its own with its own hooks and options, listed below; read any one top to bottom."""

pytest_plugins = [
    "policybench.pytest_plugin.workers",
    "policybench.pytest_plugin.signals",
    "policybench.pytest_plugin.options",
    "policybench.pytest_plugin.collection",
    "policybench.pytest_plugin.shards",
    "policybench.pytest_plugin.scheduling",
    "policybench.pytest_plugin.fixtures",
    "policybench.pytest_plugin.lockstep",
    "policybench.pytest_plugin.outcomes",
    "policybench.pytest_plugin.resume",
    "policybench.pytest_plugin.aggregation",
    "policybench.pytest_plugin.progress",
    "policybench.pytest_plugin.crashes",
    "policybench.pytest_plugin.watchdog",
    "policybench.pytest_plugin.attended",
    "policybench.pytest_plugin.rundir",
    "policybench.pytest_plugin.preflights",
    "policybench.pytest_plugin.video",
    "policybench.pytest_plugin.rollout_trace",
    "policybench.pytest_plugin.gates",
    "policybench.pytest_plugin.goldens",
    "policybench.pytest_plugin.remote",
    "policybench.pytest_plugin.env_remote",
    "policybench.pytest_plugin.dataset",
]
