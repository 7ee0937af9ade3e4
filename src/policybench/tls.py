"""TLS for the servers whose clients may cross a network: `--tls-cert` and `--tls-key` on a
server, Python's `ssl` under it. Clients verify a server's certificate against the system's
trusted authorities, or those in the file `$SSL_CERT_FILE` names (a private CA's)."""

from __future__ import annotations

import argparse
import os
import ssl
import stat
import threading
import time
import weakref
from pathlib import Path
from typing import Any


def add_tls_options(parser: argparse.ArgumentParser, scheme: str) -> None:
    parser.add_argument(
        "--tls-cert",
        default=None,
        metavar="FILE",
        help=f"serve over TLS ({scheme}://) with this certificate (PEM; with --tls-key): keys "
        "and observations then cross a network encrypted",
    )
    parser.add_argument(
        "--tls-key", default=None, metavar="FILE", help="the private key of --tls-cert (PEM)"
    )


def server_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """A server's TLS context from --tls-cert and --tls-key (None: neither given); ValueError
    saying what to give when only one is, or a file cannot be loaded."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError("--tls-cert and --tls-key go together: give both, or neither")
    for given in (cert, key):
        if not Path(given).is_file():
            raise ValueError(f"{given} is not a file; give a PEM certificate and its key")
    mode = os.stat(key).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(
            f"--tls-key {key} may be read or written by others (mode {stat.S_IMODE(mode):04o}): "
            f"a private key must be its owner's alone, as ssh demands; run `chmod 600 {key}`"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as error:
        raise ValueError(f"--tls-cert {cert} / --tls-key {key}: {error.reason or error}") from None
    return context


def client_context() -> ssl.SSLContext:
    """A client's TLS context: the server's certificate verified against the system's trusted
    authorities, or those of `$SSL_CERT_FILE`, and its name against the URL's host."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class HandshakesBusy(ssl.SSLError):
    """A TLS handshake refused because the server has as many under way as it takes."""


def capped_handshakes(context: ssl.SSLContext, limit: int, timeout_s: float) -> ssl.SSLContext:
    """`context`, taking at most `limit` TLS handshakes under way at once: one more fails at
    once, before its client has cost anything. A handshake is under way from the connection's
    start until it succeeds or fails, or `timeout_s` after it began (by then the server has cut
    it), so the count needs no word from a connection that vanished."""
    lock = threading.Lock()
    under_way: dict[int, float] = {}  # id of each handshake's SSLObject -> when it began
    refused: weakref.WeakSet[ssl.SSLObject] = weakref.WeakSet()

    def begin(handshake: ssl.SSLObject) -> None:
        now = time.monotonic()
        with lock:
            for key in [k for k, began in under_way.items() if now - began > timeout_s]:
                del under_way[key]
            if len(under_way) >= limit:
                refused.add(handshake)
            else:
                under_way[id(handshake)] = now

    def end(handshake: ssl.SSLObject) -> None:
        with lock:
            under_way.pop(id(handshake), None)

    class Counted(ssl.SSLObject):
        @classmethod
        def _create(cls, *args: Any, **kwargs: Any) -> Counted:  # what wrap_bio calls
            handshake = super()._create(*args, **kwargs)
            begin(handshake)
            return handshake

        def do_handshake(self) -> None:
            if self in refused:
                raise HandshakesBusy(f"{limit} TLS handshakes under way; try again shortly")
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise  # under way: more bytes to come
            except BaseException:
                end(self)
                raise
            end(self)

    context.sslobject_class = Counted
    return context
