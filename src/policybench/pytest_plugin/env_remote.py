"""--env-url: this run's isolated envs built by `policybench env serve` on another machine (or
port) instead of in interpreters here, in the controller, in every worker and in the run's own
policy server alike."""

from __future__ import annotations

import warnings

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


@pytest.hookimpl(trylast=True)  # the items this process runs: after -k, --shard, --resume
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Says when --env-url can build nothing: no Eval of the items is isolated, so every env
    runs here whatever listens there."""
    url = config.getoption(ENV_URL.dest)
    if url is None:
        return
    from policybench.envserver import Isolated
    from policybench.pytest_plugin.collection import planned_of

    evals = {planned.eval.name: planned.eval for planned in map(planned_of, items) if planned}
    if evals and not any(isinstance(e.make_env, Isolated) for e in evals.values()):
        warnings.warn(
            pytest.PytestWarning(
                f"--env-url {url} builds no env of this run: none of its Evals "
                f"({', '.join(sorted(evals))}) runs its env in an interpreter of its own, so "
                "each runs here (MetaWorld and PushT run isolated with $POLICYBENCH_ENV_PYTHON "
                "set)"
            ),
            stacklevel=1,
        )
