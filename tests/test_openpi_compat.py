"""openpi's own client (`openpi-client`, which pins numpy<2) against `policybench serve`,
unchanged. Runs in its own environment: `tox -e openpi-compat`."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

openpi_client = pytest.importorskip(
    "openpi_client", reason="openpi-client is not installed here; run `tox -e openpi-compat`"
)
from openpi_client import msgpack_numpy  # noqa: E402
from openpi_client.websocket_client_policy import WebsocketClientPolicy  # noqa: E402

from policybench.serve.wire import packb, unpackb  # noqa: E402
from tests.test_remote import free_port, start_server  # noqa: E402


def test_openpi_client_gets_the_in_process_models_actions_from_policybench_serve():
    port = free_port()
    server = start_server(port)  # the point Eval's scripted (greedy) model
    try:
        client = WebsocketClientPolicy("127.0.0.1", port)
        assert client.get_server_metadata()["server"] == "policybench"
        for pos, goal in [(0.0, 3.0), (1.0, 1.2), (2.0, 0.5)]:
            obs = {"observation/state": np.array([pos, goal]), "prompt": "reach the goal"}
            answer = client.infer(obs)
            expected = np.clip(goal - pos, -0.5, 0.5)
            np.testing.assert_array_equal(answer["actions"], [[expected]])
            assert answer["server_timing"]["batch_size"] == 1
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("dtype", ["|u1", "<i4", "<f2", "<f4", "<f8", "|b1", "|S3", "<U2"])
def test_frames_are_byte_identical_to_openpi_msgpack_numpy(dtype):
    message = {"a": np.arange(6).reshape(2, 3).astype(dtype), "s": np.float32(2.5), "p": "go"}
    assert packb(message) == msgpack_numpy.packb(message)
    theirs = msgpack_numpy.unpackb(packb(message))
    ours = unpackb(msgpack_numpy.packb(message))
    for decoded in (theirs, ours):
        np.testing.assert_array_equal(decoded["a"], message["a"])
        assert decoded["a"].dtype == message["a"].dtype and decoded["s"] == np.float32(2.5)
    assert msgpack.unpackb(packb(message))["p"] == "go"
