"""--env-url: this run's isolated envs built by `policybench env serve` on another machine (or
port) instead of in interpreters here, in the controller, in every worker and in the run's own
policy server alike."""

from __future__ import annotations

import pytest

from policybench.options import ENV_API_KEY, ENV_URL, api_key


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench", "policybench: evaluate robot policies")
    ENV_URL.declare(group.addoption, checked=False)
    ENV_API_KEY.declare(group.addoption, checked=False)


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

        key = api_key(config.getoption(ENV_API_KEY.dest))
        remote.use(remote.EnvEndpoint(url, key))


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.getoption(ENV_URL.dest) is not None:
        from policybench.envserver import remote

        remote.use(None)
