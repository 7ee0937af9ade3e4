"""An Eval's env in an interpreter of its own (policybench.envserver), with real processes: the
same records as in-process, arrays byte-exact both ways, faults (a server killed mid-rollout,
its controller killed, an entry that fails at import, a protocol mismatch) said clearly."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from policybench.envserver import ENV_PYTHON_VARIABLE, Interpreter, Isolated
from policybench.envserver import server as protocol
from policybench.envserver.proxy import SERVER_SOURCE, EnvProxy, EnvServer, EnvServerError
from policybench.world import EnvCache
from tests.test_plugin import ENVS

REPO = Path(__file__).resolve().parents[1]
PYTHON = Path(sys.executable)  # the other interpreter: this one, in a process of its own

ECHO = """
import os, sys
import gymnasium as gym
import numpy as np


class Echo(gym.Env):
    '''Answers each action with it, nested in dicts and tuples, as observation and info.'''

    metadata = {"render_modes": ["rgb_array"], "render_fps": 7}

    def __init__(self, task, **kwargs):
        self.action_space = gym.spaces.Dict({
            "arm": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
            "grip": gym.spaces.Discrete(3, start=-1),
        })
        self.observation_space = gym.spaces.Box(0, 255, (2, 2), np.uint8)

    def reset(self, *, seed=None, options=None):
        return np.array(int(seed)), {"path": sys.path[0], "listed": os.listdir(sys.path[0])}

    def step(self, action):
        return action, 1.5, False, True, {"nested": (action, {"again": action})}

    def render(self):
        return np.full((2, 3, 3), 9, np.uint8)
"""


@pytest.fixture
def entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of entry modules on the env servers' path (they inherit PYTHONPATH)."""
    (tmp_path / "echo_env.py").write_text(ECHO)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    return tmp_path


def test_arrays_of_several_dtypes_and_shapes_cross_both_ways_byte_exact(entries):
    arrays = [
        np.arange(24, dtype=np.float32).reshape(2, 3, 4),
        np.array([np.nan, -0.0, np.inf], dtype=np.float64),
        np.arange(12, dtype=">i4").reshape(3, 4).T,  # big-endian, not contiguous
        np.array([True, False]),
        np.zeros((0, 5), np.int16),
        np.array(7, np.uint64),
        np.full((96, 96, 3), 200, np.uint8),
        np.array([1 + 2j], np.complex64),
    ]
    env = EnvProxy(PYTHON, "echo_env:Echo", "task")
    try:
        for array in arrays:
            obs, reward, terminated, truncated, info = env.step(array)
            (nested, inner) = info["nested"]
            for back in (obs, nested, inner["again"]):
                assert back.dtype == array.dtype and back.shape == array.shape
                assert back.tobytes() == np.ascontiguousarray(array).tobytes()
                assert back.flags.writeable
            assert (reward, terminated, truncated) == (1.5, False, True)
    finally:
        env.close()


def test_spaces_metadata_render_and_path_of_the_server_are_the_envs(entries):
    env = EnvProxy(PYTHON, "echo_env:Echo", "task")
    try:
        assert env.action_space == gym.spaces.Dict(
            {
                "arm": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                "grip": gym.spaces.Discrete(3, start=-1),
            }
        )
        assert env.observation_space.dtype == np.uint8 and env.observation_space.shape == (2, 2)
        assert env.metadata == {"render_modes": ["rgb_array"], "render_fps": 7}
        obs, info = env.reset(seed=5)
        assert obs == 5
        # The launcher puts the server module's own folder first, and nothing else beside it.
        assert info["listed"] == ["policybench_envserver.py"]
        assert env.render().tolist() == np.full((2, 3, 3), 9, np.uint8).tolist()
    finally:
        env.close()
    assert env._server._process.returncode == 0


def test_a_protocol_mismatch_is_a_clear_error_at_connect(tmp_path):
    other = tmp_path / "policybench_envserver.py"
    ours = f"PROTOCOL = {protocol.PROTOCOL} "
    other.write_text(SERVER_SOURCE.read_text().replace(ours, "PROTOCOL = 99 "))
    with pytest.raises(
        EnvServerError, match=f"speaks env server protocol {protocol.PROTOCOL}, this server 99"
    ):
        EnvServer(PYTHON, "echo_env:Echo", script=other)


def test_an_error_in_the_servers_env_is_raised_here_with_its_type_and_message(entries):
    env = EnvProxy(PYTHON, "echo_env:Echo", "task")
    try:
        with pytest.raises(
            EnvServerError, match=r"ValueError in the env server .* at reset: invalid literal"
        ):
            env.reset(seed="not a seed", options=[1])
    finally:
        env.close()


# --- Runs: the records of isolated runs, and faults, through the pytest plugin ---

ISOLATED_POINTS = """
import dataclasses, sys
import policybench
from envs import GreedyPointModel, point_eval
from policybench.envserver import Interpreter, Isolated

OTHER = Interpreter("tests", python=sys.executable)
POINT = point_eval("point", scripted=GreedyPointModel)
DYING = dataclasses.replace(
    point_eval("dying", tasks={"die": "reach the goal"}, scripted=GreedyPointModel),
    make_env=Isolated("fault_envs:DyingPoint", OTHER),
)
BROKEN = dataclasses.replace(
    point_eval("broken", tasks={"import": "reach the goal"}, scripted=GreedyPointModel),
    make_env=Isolated("broken_at_import:Env", OTHER),
)


@policybench.parametrize(POINT, DYING, BROKEN)
def test_point(rollout, harness):
    harness(rollout)
"""

FAULT_ENVS = """
import os, pathlib, signal, time
from envs import PointEnv


class DyingPoint(PointEnv):
    '''Its server is killed (SIGKILL) at step 2 of seed 0; each server notes its pid. With
    HANG_IN_STEP set, a step never returns (noting the server's pid in `hanging`).'''

    def __init__(self, task):
        super().__init__()

    def reset(self, *, seed=None, options=None):
        self.seed, self.steps = seed, 0
        with open("server_pids", "a") as pids:
            pids.write(f"{os.getpid()}\\n")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self.seed == 0 and self.steps == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        self.steps += 1
        if os.environ.get("HANG_IN_STEP"):
            pathlib.Path("hanging").write_text(str(os.getpid()))
            time.sleep(60)
        return super().step(action)
"""

BROKEN_AT_IMPORT = """
import sys
print("loading the simulator", file=sys.stderr)
print("libsim.so: cannot open shared object file", file=sys.stderr)
sys.exit(3)
"""


@pytest.fixture
def fault_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(
        envs=ENVS,
        fault_envs=FAULT_ENVS,
        broken_at_import=BROKEN_AT_IMPORT,
        test_points=ISOLATED_POINTS,
    )
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    return pytester


def records_of(report_dir: Path) -> dict[str, dict]:
    lines = (report_dir / "latest" / "results.jsonl").read_text().splitlines()
    return {record["nodeid"].split("[")[1].rstrip("]"): record for record in map(json.loads, lines)}


def test_a_killed_server_is_its_rollouts_error_and_an_import_failure_errors_only_its_eval(
    fault_run,
):
    result = fault_run.runpytest_subprocess("--rollouts", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=3)
    records = records_of(fault_run.path / "reports")
    died = records["die/seed=0"]
    assert died["outcome"] == "error" and died["steps"] == 2
    assert "env step raised EnvServerGone" in died["reason"]
    assert "killed by signal 9" in died["reason"]
    assert records["die/seed=1"]["outcome"] == "solved"  # on a new server
    pids = (fault_run.path / "server_pids").read_text().split()
    assert len(set(pids)) == 2 and pids[-1] != pids[-2]  # (the preflight reset the first)
    for seed in (0, 1):
        broken = records[f"import/seed={seed}"]
        assert broken["outcome"] == "error"
        reason = broken["reason"]
        assert "\n" not in reason and "exit code 3" in reason and str(PYTHON) in reason
        assert "loading the simulator | libsim.so: cannot open shared object file" in reason
        assert records[f"reach/seed={seed}"]["outcome"] == "solved"


def test_no_env_server_survives_its_controller_killed(fault_run):
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-k", "die"],
        cwd=fault_run.path,
        env={**os.environ, "HANG_IN_STEP": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    hanging = fault_run.path / "hanging"
    deadline = time.monotonic() + 60
    while not hanging.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hanging.exists(), "the env server never stepped its env"
    server = int(hanging.read_text())
    assert _alive(server)
    run.send_signal(signal.SIGKILL)  # the server, inside a step, reads no end of its pipe
    run.wait()
    deadline = time.monotonic() + 5
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server)


def test_a_step_hung_in_the_env_server_is_ended_by_the_rollout_watchdog(fault_run, monkeypatch):
    monkeypatch.setenv("HANG_IN_STEP", "1")
    started = time.monotonic()
    result = fault_run.runpytest_subprocess(
        "-p", "no:cacheprovider", "-k", "die", "--rollouts", "1", "--rollout-wall-timeout", "3"
    )
    assert time.monotonic() - started < 45  # the step would sleep 60 s
    assert result.ret == pytest.ExitCode.INTERRUPTED  # without xdist a hang stops the run
    record = records_of(fault_run.path / "reports")["die/seed=0"]
    assert record["outcome"] == "error" and "no end within 3 s" in record["reason"]
    assert not _alive(int((fault_run.path / "hanging").read_text()))


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped by init, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


# --- MetaWorld and PushT isolated: the records of in-process runs ---

MEASURED = {"wall_s", "peak_rss_mb", "infer_ms_max", "infer_ms_mean"}  # times and memory


def suite_records(pytester: pytest.Pytester, name: str, *args: str) -> list[dict]:
    report_dir = pytester.path / name
    result = pytester.runpytest_subprocess(
        str(REPO / "benchmarks" / "test_metaworld.py"),
        str(REPO / "benchmarks" / "test_pusht.py"),
        f"--rootdir={REPO}",
        "-p",
        "no:cacheprovider",
        f"--report-dir={report_dir}",
        "--rollouts",
        "1",
        "-k",
        "reach or pusht",
        *args,
    )
    assert result.ret == 0, result.stdout.str()
    return list(records_of(report_dir).values())


@pytest.mark.skipif(
    not all(map(importlib.util.find_spec, ("metaworld", "gym_pusht"))),
    reason="needs pip install 'policybench[metaworld,pusht]'",
)
def test_metaworld_and_pusht_isolated_record_what_they_record_in_process(pytester, monkeypatch):
    in_process = suite_records(pytester, "in-process")
    # The other interpreter: this Python, behind a script that notes each start.
    python = pytester.path / "python"
    python.write_text(
        f'#!/bin/sh\necho "$@" >> {pytester.path}/started\nexec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    monkeypatch.setenv(ENV_PYTHON_VARIABLE, str(python))
    isolated = suite_records(pytester, "isolated")
    started = (pytester.path / "started").read_text().splitlines()
    servers = [s for s in started if "policybench_envserver.py " in s]
    read = [s for s in started if s.startswith("-c ") and "importlib.metadata" in s]
    assert len(servers) == 2 and len(read) == 1  # the packages' versions are read there once
    assert len(started) == 3
    assert [r["eval"] for r in in_process] == ["metaworld-mt10", "pusht"]
    for here, there in zip(in_process, isolated, strict=True):
        differing = {k for k in here.keys() | there.keys() if here.get(k) != there.get(k)}
        assert differing <= MEASURED, (differing, here, there)
        assert here["steps"] > 0


def test_isolated_is_an_ordinary_make_env_whose_env_lives_in_its_own_process(entries):
    make_env = Isolated("echo_env:Echo", Interpreter("tests", python=sys.executable))
    env = make_env("task")
    try:
        assert env.server_pid != os.getpid() and _alive(env.server_pid)
    finally:
        env.close()
    assert not _alive(env.server_pid)


def test_an_env_cache_of_one_closes_a_server_when_it_builds_the_next(entries):
    make_env = Isolated("echo_env:Echo", Interpreter("tests", python=sys.executable))
    cache = EnvCache(capacity=1)
    first = cache.get(("echo", "a", None), lambda: make_env("a"))
    assert _alive(first.server_pid)
    second = cache.get(("echo", "b", None), lambda: make_env("b"))
    assert not _alive(first.server_pid) and _alive(second.server_pid)
    cache.close()
    assert not _alive(second.server_pid) and cache.closed == 2


def test_arrays_cross_with_their_values_dtype_and_layout_and_arrive_writable():
    codec = protocol.Codec()
    planar = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5).transpose(1, 2, 0)  # HWC view
    flipped = np.arange(6, dtype=">f8")[::-1]
    message = {"image": planar, "flipped": flipped, "pair": (np.bool_(True), np.zeros(0))}
    frame = codec.pack(message)
    body_size, _ = protocol.HEADER.unpack_from(frame)
    back = codec.unpack(memoryview(bytearray(frame))[protocol.HEADER.size :], body_size)
    assert back["image"].strides == planar.strides  # a planar image stays planar, uncopied
    for key in ("image", "flipped"):
        assert back[key].dtype == message[key].dtype
        np.testing.assert_array_equal(back[key], message[key])
        assert back[key].flags.writeable and back[key].flags.aligned
    assert back["pair"][0] is True and back["pair"][1].shape == (0,)


def test_an_isolated_envs_data_files_go_beside_its_modules_and_a_missing_one_is_named():
    """`Isolated(data=...)` puts a package's data file beside the server, where the env module
    the launcher put there reads it (Kinetix's level files); one that is not a file of an
    importable package is refused before any interpreter starts, naming it."""
    from policybench.envserver.proxy import server_script
    from policybench.suites import kinetix

    script = server_script(kinetix.MODULES, kinetix.DATA)
    folder = script.parent
    # (an env server that ran from the folder before leaves its bytecode cache beside them)
    assert sorted(p.name for p in folder.iterdir() if p.name != "__pycache__") == [
        "kinetix_env.py",
        "kinetix_rtc_levels.json.gz",
        "policybench_envserver.py",
    ]
    shipped = Path(kinetix.__file__).parent.parent / "data" / "kinetix_rtc_levels.json.gz"
    assert (folder / "kinetix_rtc_levels.json.gz").read_bytes() == shipped.read_bytes()
    assert server_script(kinetix.MODULES) != script  # a folder per content
    with pytest.raises(EnvServerError, match=r"data file 'policybench\.suites:data/nothing\.json'"):
        server_script(kinetix.MODULES, ("policybench.suites:data/nothing.json",))
