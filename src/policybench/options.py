"""The options pytest and the `policybench` commands share, each declared once: its flag,
default, help and the check its value must pass, for argparse and pytest alike."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from policybench.serve.client import DEFAULT_URL

API_KEY_VARIABLE = "POLICYBENCH_API_KEY"


@dataclass(frozen=True)
class Option:
    """One shared option. `help` may name `{default}`; `check` says why a value is refused
    (None: it is accepted)."""

    flag: str
    help: str
    default: Any = None
    type: Callable[[str], Any] = str
    metavar: str | None = None
    check: Callable[[Any], str | None] | None = None

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    def refusal(self, value: Any) -> str | None:
        """Why `value` is refused, naming the option ("--server-wait must be ..."), or None."""
        why = None if self.check is None or value is None else self.check(value)
        return None if why is None else f"{self.flag} {why}"

    def declare(self, add: Callable[..., Any], checked: bool = True, **changes: Any) -> None:
        """Declares the option with `add` (an argparse parser's add_argument or a pytest group's
        addoption), its value checked as it is parsed unless not `checked` (the caller checks
        it with `refusal`); `changes` (e.g. a command's own default) override the shared ones."""
        default = changes.pop("default", self.default)
        add(
            self.flag,
            type=self._parsed if checked and self.check else self.type,
            default=default,
            metavar=self.metavar,
            help=self.help.format(default=default),
            **changes,
        )

    def _parsed(self, text: str) -> Any:
        """argparse's type: the value, or its refusal as argparse's error for this argument."""
        try:
            value = self.type(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a {self.type.__name__}, got {text!r}"
            ) from None
        why = None if self.check is None else self.check(value)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return value


def loopback(host: str) -> bool:
    """Whether every address `host` names is this machine's own."""
    try:
        found = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in found)


def key_refusal(key: str | None, host: str, reach: str) -> str | None:
    """Why a server may not start with the API key `key` (its --api-key, else
    $POLICYBENCH_API_KEY) bound to `host`: an empty key (it would turn authentication off
    unseen), or none beyond loopback, where anyone who reaches it could do what `reach` says."""
    if key is not None and not key.strip():
        return (
            f"the API key given (--api-key or ${API_KEY_VARIABLE}) is empty, which would serve "
            f"without one: give a key, or unset ${API_KEY_VARIABLE} and leave out --api-key to "
            "serve loopback without one"
        )
    if key is None and not loopback(host):
        return (
            f"refusing to serve {host} without a key: anyone who reaches it {reach}. Set "
            f"${API_KEY_VARIABLE} (or --api-key), or bind 127.0.0.1"
        )
    return None


def api_key(given: str | None) -> str | None:
    """The policy server's API key: `given` (--policy-api-key), else $POLICYBENCH_API_KEY."""
    return given or os.environ.get(API_KEY_VARIABLE) or None


def _positive(value: float) -> str | None:
    return None if value > 0 else f"must be > 0 seconds, got {value:g}"


def _not_negative(value: float) -> str | None:
    return None if value >= 0 else f"must be >= 0 seconds, got {value:g}"


def _websocket_url(url: str) -> str | None:
    if url.startswith(("ws://", "wss://")):
        return None
    return f"takes a ws:// or wss:// URL, e.g. {DEFAULT_URL}, got {url!r}"


POLICY_URL = Option(
    "--policy-url",
    f"where --policy=openpi is served (default {DEFAULT_URL})",
    DEFAULT_URL,
    metavar="URL",
    check=_websocket_url,
)
POLICY_API_KEY = Option(
    "--policy-api-key",
    f"API key for the policy server, sent as 'Authorization: Api-Key KEY' (default: "
    f"${API_KEY_VARIABLE}, else none); never recorded",
    metavar="KEY",
)
INFER_TIMEOUT = Option(
    "--infer-timeout",
    "seconds to wait for a served policy's answer before the call is an error (default "
    "{default:g}: a first call may compile)",
    300.0,
    float,
    "S",
    _positive,
)
SERVER_WAIT = Option(
    "--server-wait",
    "seconds to wait, with backoff, for an unreachable policy server to come (back) (default "
    "{default:g}; the wait is logged once per outage)",
    120.0,
    float,
    "S",
    _not_negative,
)
SEED = Option(
    "--seed",
    "base seed of the rollout plan and of seeded policies (random, LeRobot) (default {default})",
    0,
    int,
    "S",
)
POLICY_DEVICE = Option(
    "--policy-device",
    "where a local model with weights (lerobot:PATH) runs: cpu (default), cpu-onednn "
    "(lerobot-eval's CPU kernels), cuda or mps",
    "cpu",
    metavar="DEV",
)


ENV_SCHEME = "tcp"  # where `policybench env serve` listens: tcp://HOST:PORT
ENV_TLS_SCHEME = "tls"  # ... or, started with --tls-cert/--tls-key, tls://HOST:PORT


def url_refusal(url: str) -> str | None:
    """Why `url` is not an env server's URL, or None."""
    example = f"{ENV_SCHEME}://gpu-box:7000"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        port = None
    else:
        schemes = (ENV_SCHEME, ENV_TLS_SCHEME)
        if parts.scheme in schemes and parts.hostname and port and not parts.path.strip("/"):
            return None
    return (
        f"takes {ENV_SCHEME}://HOST:PORT (or {ENV_TLS_SCHEME}://HOST:PORT for a server started "
        f"with --tls-cert), e.g. {example}, got {url!r}"
    )


ENV_URL = Option(
    "--env-url",
    "run isolated Evals' envs on the `policybench env serve` at tcp://HOST:PORT (tls://HOST:PORT "
    "for one serving TLS) instead of in interpreters here (default: here)",
    metavar="URL",
    check=url_refusal,
)
ENV_API_KEY = Option(
    "--env-api-key",
    f"API key for --env-url's server (default: ${API_KEY_VARIABLE}, else none); never recorded",
    metavar="KEY",
)


def declare_env_url(add: Callable[..., Any], checked: bool = True) -> None:
    """Declares --env-url and --env-api-key with `add`, for pytest and every command that builds
    an isolated Eval's env (`envserver.remote.given` applies them)."""
    ENV_URL.declare(add, checked=checked)
    ENV_API_KEY.declare(add, checked=checked)
