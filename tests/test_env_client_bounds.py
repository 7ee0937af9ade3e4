"""The env client reads an env server's frames under the same bound as the relay reads its
clients': a server (or whatever listens at --env-url) that announces a frame of gigabytes gets a
clear error, before a byte of it is read or a buffer for it allocated. The server here is a
hand-made one on loopback, as a hostile one would be."""

from __future__ import annotations

import io
import socket
import threading

import pytest

from policybench.envserver import server as protocol
from policybench.envserver.proxy import EnvServerError
from policybench.envserver.remote import EnvEndpoint, RemoteEnvServer


def test_a_server_announcing_a_huge_frame_is_refused_before_it_is_read():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer_hello_with_a_huge_length() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(1 << 16)
            connection.sendall(protocol.HEADER.pack(2**32 - 1, 2**32 - 1))
            connection.recv(1)  # until the client hangs up

    thread = threading.Thread(target=answer_hello_with_a_huge_length, daemon=True)
    thread.start()
    with pytest.raises(EnvServerError) as refused:
        RemoteEnvServer(EnvEndpoint(f"tcp://127.0.0.1:{port}", "a-key"))
    message = str(refused.value)
    assert f"127.0.0.1:{port}" in message and "answered hello with a frame of" in message
    assert f"at most {protocol.FRAME_LIMIT}" in message
    thread.join(timeout=10)
    assert not thread.is_alive()  # the client hung up
    listener.close()


def test_a_frame_over_the_limit_a_reader_gives_is_refused():
    frame = protocol.Codec().pack({"ok": list(range(100))})
    read = protocol.Codec().read
    assert read(io.BytesIO(frame), limit=len(frame)) == {"ok": list(range(100))}
    with pytest.raises(protocol.FrameTooLarge, match=f"a frame of {len(frame)} bytes"):
        read(io.BytesIO(frame), limit=len(frame) - 1)
