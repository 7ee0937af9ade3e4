"""--env-url: this run's isolated envs built by `policybench env serve` on another machine (or
port) instead of in interpreters here, in the controller, in every worker and in the run's own
policy server alike."""

from __future__ import annotations

import contextlib
import warnings

import pytest

from policybench.options import ENV_API_KEY, ENV_URL, declare_env_url

_ENDPOINT_USED = pytest.StashKey[contextlib.ExitStack]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench", "policybench: evaluate robot policies")
    declare_env_url(group.addoption, checked=False)


@pytest.hookimpl
def pytest_cmdline_main(config: pytest.Config) -> None:
    why = ENV_URL.refusal(config.getoption(ENV_URL.dest))
    if why is not None:
        raise pytest.UsageError(why)


@pytest.hookimpl(tryfirst=True)  # before the run's own policy server starts: it inherits it
def pytest_configure(config: pytest.Config) -> None:
    url = config.getoption(ENV_URL.dest)
    if url is not None:
        from policybench.envserver import remote  # a proxy's imports, only when it is used

        used = contextlib.ExitStack()
        used.enter_context(remote.given(url, config.getoption(ENV_API_KEY.dest)))
        config.stash[_ENDPOINT_USED] = used


def pytest_unconfigure(config: pytest.Config) -> None:
    used = config.stash.get(_ENDPOINT_USED, None)
    if used is not None:
        used.close()


@pytest.hookimpl(trylast=True)  # the items this process runs: after -k, --shard, --resume
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Says when --env-url can build nothing: no Eval of the items is isolated, so every env
    runs here whatever listens there."""
    url = config.getoption(ENV_URL.dest)
    if url is None:
        return
    from policybench import envserver
    from policybench.pytest_plugin.collection import planned_of

    said = envserver.builds_nothing(url, (p.eval for p in map(planned_of, items) if p))
    if said is not None:
        warnings.warn(pytest.PytestWarning(said), stacklevel=1)
