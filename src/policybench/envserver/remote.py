"""Isolated envs served from another machine: `RemoteEnvServer` is our side of a connection to
`policybench env serve` (envserver/relay.py) at a tcp:// URL (tls:// over TLS), making the same
requests as a local EnvServer; `--env-url` points a run's isolated envs there (`used`)."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from policybench import keys
from policybench.envserver import server as protocol
from policybench.envserver.proxy import Answering, EnvServerError, EnvServerGone
from policybench.options import ENV_TLS_SCHEME, api_key, url_refusal
from policybench.tls import client_context

if TYPE_CHECKING:
    pass

CONNECT_TIMEOUT_S = 10.0
HOW_TO_SERVE = "policybench env serve EVAL --port {port}"
VERSIONS = "versions"  # a connection's request for its interpreter's versions, in place of make


@dataclass(frozen=True)
class EnvEndpoint:
    """Where a run's isolated envs are served (`tcp://HOST:PORT`) and the key they ask for."""

    url: str
    api_key: str | None = None

    def __post_init__(self) -> None:
        why = url_refusal(self.url)
        if why is not None:
            raise ValueError(f"--env-url {why}")

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == ENV_TLS_SCHEME

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return parts.hostname or "", parts.port or 0

    def __repr__(self) -> str:  # the key is never shown
        return f"EnvEndpoint({self.url!r})"


_endpoint: EnvEndpoint | None = None
# How `used` hands the endpoint to the processes this one starts (the run's own policy server,
# which builds an env to read its action space; evaluate's child run): their environment, never
# a file or a command line.
URL_VARIABLE = "POLICYBENCH_ENV_URL"
KEY_VARIABLE = "POLICYBENCH_ENV_API_KEY"


@contextlib.contextmanager
def used(endpoint: EnvEndpoint) -> Iterator[EnvEndpoint]:
    """Builds this process's isolated envs, and those of the processes it starts, at `endpoint`
    within the block; then where they were built before."""
    global _endpoint
    before = _endpoint, {name: os.environ.get(name) for name in (URL_VARIABLE, KEY_VARIABLE)}
    _endpoint = endpoint
    _set_variables({URL_VARIABLE: endpoint.url, KEY_VARIABLE: endpoint.api_key})
    try:
        yield endpoint
    finally:
        _endpoint, variables = before
        _set_variables(variables)


def given(url: str | None, key: str | None) -> contextlib.AbstractContextManager[Any]:
    """`used` for the endpoint --env-url `url` and --env-api-key `key` (else $POLICYBENCH_API_KEY)
    name, for a command that builds isolated Evals' envs; nothing changes without `url`."""
    if url is None:
        return contextlib.nullcontext()
    return used(EnvEndpoint(url, api_key(key)))


def _set_variables(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)


def endpoint_in_use() -> EnvEndpoint | None:
    """`used`'s endpoint, or the one a process that started this one handed it."""
    if _endpoint is None and os.environ.get(URL_VARIABLE):
        return EnvEndpoint(os.environ[URL_VARIABLE], os.environ.get(KEY_VARIABLE) or None)
    return _endpoint


class RemoteEnvServer:
    """One connection to `policybench env serve`, which runs an env server of its own for it
    (ended when the connection ends). Requests are answered in order, one at a time."""

    pid = None  # the env server's process is on the other machine

    def __init__(self, endpoint: EnvEndpoint) -> None:
        self.endpoint = endpoint
        self._codec = protocol.Codec()
        self._answering = Answering(f"env server at {endpoint.url}")
        host, port = endpoint.address
        try:
            self._socket = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
            if endpoint.tls:  # the server's certificate checked against the trusted authorities
                self._socket = client_context().wrap_socket(self._socket, server_hostname=host)
        except ssl.SSLError as error:
            self._socket.close()
            raise EnvServerError(
                f"no TLS connection to the env server at {endpoint.url} ({error.reason or error}): "
                "is it started with --tls-cert, and is its certificate trusted here "
                "($SSL_CERT_FILE names a private authority's)?"
            ) from None
        except OSError as error:
            how = HOW_TO_SERVE.format(port=port)
            raise EnvServerError(
                f"no env server at {endpoint.url} ({error.strerror or error}): start one there "
                f"with `{how}`, or leave out --env-url to run isolated envs here"
            ) from None
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._stream = self._socket.makefile("rb", buffering=0)
        try:  # the hello's answer within CONNECT_TIMEOUT_S too: what listens may be no env server
            hello = {"protocol": protocol.PROTOCOL, keys.ENV_API_KEY: endpoint.api_key}
            self.request("hello", **hello)
        except EnvServerGone:
            self._hang_up()
            raise EnvServerGone(
                f"what listens at {endpoint.url} gave no answer to an env server's hello within "
                f"{CONNECT_TIMEOUT_S:g} s: is it a `policybench env serve` (not a policy "
                "server, whose ws:// URL goes to --policy-url)?"
            ) from None
        except BaseException:
            self._hang_up()
            raise
        self._socket.settimeout(None)

    def request(self, op: str, **args: Any) -> Any:
        url = self.endpoint.url
        with self._answering.request(op):
            try:
                frame = self._codec.frame({"op": op, **args})
                if isinstance(self._socket, ssl.SSLSocket):  # through TLS, not the bare fd
                    self._socket.sendall(b"".join(frame))
                else:
                    protocol.write_frame(self._socket.fileno(), frame)
                answer = self._codec.read(self._stream)
            except OSError:  # reset by the other side, or closed here already
                answer = None
            except protocol.FrameTooLarge as large:  # its bytes never read: the stream is lost
                self._hang_up()
                raise EnvServerError(f"env server at {url} answered {op} with {large}") from None
        if answer is None:
            raise EnvServerGone(
                f"env server at {url} closed the connection at {op}: its `policybench env "
                "serve` ended or was stopped (its output says why)"
            )
        if "error" in answer:
            error = answer["error"]
            where = " | ".join(line.strip() for line in error["traceback"][-3:-1])
            if op == "hello":
                raise EnvServerError(
                    f"env server at {url} refused the connection: {error['message']}"
                )
            gone = error["type"] == EnvServerGone.__name__
            if error["type"] in (EnvServerGone.__name__, EnvServerError.__name__):
                # the relay's own: its message says what, and the type is said once
                raise (EnvServerGone if gone else EnvServerError)(
                    f"{error['message']} (served at {url}, at {op})"
                )
            raise EnvServerError(
                f"{error['type']} in the env server at {url} at {op}: {error['message']}"
                + (f" [{where}]" if where else "")
            )
        return answer["ok"]

    def made_env(self, number: int) -> None:
        """A connection's one env is made (EnvServer's, for the proxy)."""

    def release(self, number: int | None) -> None:
        """The connection's env is done with: the connection ends."""
        self.close()

    def close(self) -> None:
        """Ends the connection, and with it the env server there: asks it to close its env
        first, unless it is still busy with an interrupted request (the relay then kills it)."""
        try:
            if not self._answering.interrupted and self._socket.fileno() >= 0:
                with contextlib.suppress(EnvServerError):  # gone meanwhile: nothing to close
                    self.request("close")
        finally:
            self._hang_up()

    def _hang_up(self) -> None:
        self._stream.close()
        self._socket.close()


def served_versions(endpoint: EnvEndpoint, entry: str, kwargs: dict[str, Any]) -> dict[str, str]:
    """The distributions installed in the interpreter that serves `entry` at `endpoint`
    (Isolated.versions of the serving machine)."""
    server = RemoteEnvServer(endpoint)
    try:
        return server.request(VERSIONS, entry=entry, kwargs=kwargs)
    finally:
        server._hang_up()  # the relay ends the connection after its answer
