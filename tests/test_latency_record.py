"""`policybench latency record` against a real `policybench serve --policy=random --eval pusht` on
loopback (behind an API key): the profile it writes loads, holds one latency per call, draws from
the round trip or the server's reported time as asked, and records PushT's observation sizes."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("gym_pusht")

from policybench.cli import main
from policybench.options import API_KEY_VARIABLE
from policybench.policy.latency_profile import LatencyProfile
from policybench.serve.wire import packb
from policybench.suites import eval_named
from policybench.world import World
from tests.test_remote import free_port, start_server

KEY = "record-secret-key"
SECONDS = "0.3"


@pytest.fixture(scope="module")
def served():
    """`policybench serve --policy=random --eval pusht` requiring an API key; its URL."""
    port = free_port()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(API_KEY_VARIABLE, KEY)
        server = start_server(port, "--eval", "pusht", "--policy=random")
    yield f"ws://127.0.0.1:{port}"
    server.kill()
    server.wait()


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(API_KEY_VARIABLE, KEY)


def recorded(url: str, path, *options: str) -> dict:
    argv = ["latency", "record", "--eval", "pusht", "--policy-url", url, "-o", str(path)]
    assert main([*argv, "--seconds", SECONDS, *options]) == 0
    return json.loads(path.read_text())


def pusht_frame_bytes() -> int:
    """The bytes of the openpi frame of PushT's first observation, as a run sends it."""
    eval = eval_named("pusht")
    world = World(eval)
    try:
        rollout = eval.rollouts(1, 0)[0]
        obs = world.reset(rollout.scene)
    finally:
        world.close()
    return len(packb(eval.codecs["openpi"].encode(obs, rollout.instruction)))


def test_a_recorded_profile_loads_with_a_latency_per_call_and_pushts_observation_sizes(
    served, keyed, tmp_path, capsys
):
    path = tmp_path / "profile.json"
    content = recorded(served, path, "--warmup", "2")
    profile = LatencyProfile.load(path)
    made = content["recorded"]
    assert made["calls"] == len(profile.sample_s) == len(made["round_trip_s"]) >= 1
    assert made["warmup_calls"] == 2 and made["eval"] == "pusht"
    assert made["url"] == served and KEY not in path.read_text()
    assert made["observation"] == {
        "observation/image": "[96, 96, 3] uint8",
        "observation/state": "[2] float64",
        "prompt": "str",
    }
    assert made["frame_bytes"] == pusht_frame_bytes()
    assert made["draws_from"] == "round_trip" and list(profile.sample_s) == made["round_trip_s"]
    # policybench serve reports its model time (infer_ms): within each call's round trip.
    server_s = made["server_timing_s"]
    assert len(server_s) == made["calls"] and all(s is not None for s in server_s)
    assert all(0 <= s <= rt for s, rt in zip(server_s, made["round_trip_s"], strict=True))
    out = capsys.readouterr().out
    assert "observation/image [96, 96, 3] uint8" in out
    assert f"digest {profile.digest}" in out and f"profile:{path}" in out


def test_draw_from_server_timing_makes_the_servers_reported_times_the_sample(
    served, keyed, tmp_path
):
    path = tmp_path / "server.json"
    content = recorded(served, path, "--draw-from", "server_timing")
    assert content["recorded"]["draws_from"] == "server_timing"
    assert content["sample_s"] == content["recorded"]["server_timing_s"]
    assert content["sample_s"] != content["recorded"]["round_trip_s"]
    assert LatencyProfile.load(path).describe()["n"] == content["recorded"]["calls"]


def test_a_server_refusing_the_key_exits_naming_it_and_writes_nothing(
    served, monkeypatch, tmp_path
):
    monkeypatch.setenv(API_KEY_VARIABLE, "wrong")
    path = tmp_path / "refused.json"
    with pytest.raises(SystemExit, match=r"refused the connection \(HTTP 401.*--policy-api-key"):
        recorded(served, path)
    assert not path.exists()


def test_an_unreachable_server_exits_naming_the_url_and_what_to_start(tmp_path):
    url = f"ws://127.0.0.1:{free_port()}"
    with pytest.raises(SystemExit) as exited:
        recorded(url, tmp_path / "none.json")
    message = str(exited.value.code)
    assert f"cannot reach a policy server at {url}" in message
    assert "policybench serve" in message
    assert not (tmp_path / "none.json").exists()


def test_a_server_without_the_eval_exits_with_one_line_naming_what_it_serves(
    served, keyed, tmp_path
):
    pytest.importorskip("metaworld")
    path = tmp_path / "other.json"
    argv = ["latency", "record", "--eval", "metaworld-mt10", "--policy-url", served]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "-o", str(path), "--seconds", SECONDS])
    message = str(exited.value.code)
    assert "\n" not in message and message.count("does not serve") == 1
    assert "does not serve eval 'metaworld-mt10'; it serves ['pusht']" in message
    assert "start a server with --eval metaworld-mt10" in message
    assert "module level" not in message
    assert not path.exists()
