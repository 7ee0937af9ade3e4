"""`policybench probe` on PushT: against a `policybench serve` on loopback it prints the contract
and writes the chunk plot and the images it sent; a model answering the wrong action width exits
1 naming the problem; an unreachable server exits 2 at once, saying what to do."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("gym_pusht")
pytest.importorskip("matplotlib")

from PIL import Image

from policybench.cli import main
from policybench.preflight import Preflight
from policybench.probe import write_images
from tests.test_remote import REPO, free_port, start_server


@pytest.fixture(scope="module")
def served_pusht():
    """`policybench serve --policy=scripted --eval pusht` on loopback; its URL."""
    port = free_port()
    server = start_server(port, "--eval", "pusht")
    yield f"ws://127.0.0.1:{port}"
    server.kill()
    server.wait()


def printed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Each printed line with its runs of spaces made one, so table columns compare simply."""
    return [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]


def png(path) -> Image.Image:
    image = Image.open(path)
    image.load()
    assert image.format == "PNG" and image.width > 0 and image.height > 0
    return image


def test_probe_of_a_served_policy_prints_the_contract_and_plots_the_chunk(
    served_pusht, tmp_path, capsys
):
    out = tmp_path / "probe"
    argv = ["probe", "--eval", "pusht", "--policy=openpi", f"--policy-url={served_pusht}"]
    assert main([*argv, "--out", str(out)]) == 0
    lines = printed(capsys)
    start = lines.index("contract:") + 1
    assert lines[start : start + 6] == [
        "sent observation/image [96, 96, 3] uint8",
        "observation/state [2] float64",
        "prompt str",
        "answered chunk [1, 2] float64",
        "horizon 1",
        "env action space (2,) in [0, 512]",
    ]
    assert lines[start + 6 : start + 8] == [
        "action contract of the model openpi: none declared",
        "action contract of the codec openpi: action: eef-absolute; rotation: none; control_hz: "
        "10.0; images: observation/image 96x96; state: agent_pos:2",
    ]
    assert re.fullmatch(r"latency: \d+\.\d ms", lines[start + 8])
    assert "preflight: passed" in lines
    assert any(line.startswith('server metadata: {"server": "policybench"') for line in lines)
    assert any('"model": {"name": "scripted"' in line for line in lines)
    stored = json.loads((out / "preflight.json").read_text())
    assert Preflight.from_json(stored).as_json() == stored
    assert stored["received"] == stored["answered"] == "[1, 2] float64"
    answered = np.asarray(stored["actions"])
    assert answered.shape == (1, 2) and ((answered >= 0) & (answered <= 512)).all()

    assert f"wrote {out / 'chunk.png'}" in lines
    assert png(out / "chunk.png").height > 200
    assert png(out / "observation_image.png").size == (96, 96)  # the image as sent


WIDE = """
import numpy as np
from policybench.policy.base import Chunk


class Wide:
    name = "wide"

    def open(self, context):
        return lambda obs: Chunk(np.zeros((3, 5)), context.control_hz)

    def describe(self):
        return {"name": self.name}


MODEL = Wide()
"""


def test_a_model_answering_the_wrong_action_width_exits_1_naming_the_problem(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "probe_wide.py").write_text(WIDE)
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert main(["probe", "--eval", "pusht", "--policy=probe_wide:MODEL", "--out", str(out)]) == 1
    lines = printed(capsys)
    assert "answered chunk as answered [3, 5] float64" in lines
    assert "env action space (2,) in [0, 512]" in lines
    problem = "answered action of shape (5,), expected (2,)"
    assert any(line.startswith("preflight: failed:") and problem in line for line in lines)
    assert lines[-1].startswith("failed: every rollout of pusht would be an error")
    assert not (out / "chunk.png").exists()  # no chunk the env could play
    assert png(out / "image.png").size == (96, 96)


def test_an_unreachable_server_exits_2_at_once_saying_what_to_do(tmp_path):
    url = f"ws://127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "policybench.cli", "probe", "--eval", "pusht"]
    command += ["--policy=openpi", "--policy-url", url, "--out", str(tmp_path)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    # The refusal ends it: no 300 s inference timeout, no waiting for the server to come.
    assert time.perf_counter() - started < 60
    assert done.returncode == 2, done.stderr
    assert f"preflight: inconclusive: RemoteDown: cannot reach a policy server at {url}" in (
        done.stdout
    )
    assert "inconclusive: the policy server could not be asked" in done.stdout
    assert "point --policy-url at it" in done.stdout


def test_channels_first_float_images_are_written_upright_and_other_arrays_are_not(tmp_path):
    chw = np.zeros((3, 24, 32), dtype=np.float32)
    chw[0] = 1.0  # red, in [0, 1]
    shown = {"observation.image": chw, "observation.state": np.zeros(2), "task": "push"}
    (path,) = write_images(shown, tmp_path)
    assert path.name == "observation.image.png"
    image = png(path)
    assert image.size == (32, 24) and image.getpixel((0, 0)) == (255, 0, 0)
