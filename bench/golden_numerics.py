"""How far the goldens' simulated values move with the CPU's numerics: each golden whose suite
states a CpuNumerics tolerance is replayed under every OpenBLAS kernel family this CPU can run
(`OPENBLAS_CORETYPE`, set in this script's child processes only: tests and CI leave it as they
find it) and compared with the stored golden: the largest difference of an observation or reward
number, the largest image thumbnail difference in levels, and whether the golden's own
comparison, with the tolerance it states, accepts it.

Run from the repository root with the suites' interpreters built (`policybench env install
robomimic`, `... maniskill`):  python bench/golden_numerics.py  [--suites robomimic,maniskill]
It prints a markdown table and the command that made it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policybench.record.numerics import machine_numerics  # noqa: E402
from policybench.record.trace import (  # noqa: E402
    CPU_TOLERANCE,
    LEVELS,
    SIMULATED,
    differences,
    thumbnail,
)

# OpenBLAS's x86-64 kernel families, oldest first, with the CPU flag each needs.
FAMILIES = (
    ("Prescott", "sse4_2"),
    ("Nehalem", "sse4_2"),
    ("Sandybridge", "avx"),
    ("Haswell", "avx2"),
    ("Zen", "avx2"),
    ("SkylakeX", "avx512f"),
    ("Cooperlake", "avx512_bf16"),
    ("SapphireRapids", "amx_tile"),
)
SUITES = {  # suite -> (its benchmark module, its goldens' folder)
    "robomimic": ("benchmarks.test_robomimic", "test_robomimic"),
    "maniskill": ("benchmarks.test_maniskill", "test_maniskill"),
}
CHILD = """
import json, sys
from importlib import import_module
module = import_module(sys.argv[1])
print(json.dumps({name: module.golden_trace(name) for name in sys.argv[2:]}))
"""


def traces(module: str, names: list[str], family: str | None) -> dict[str, Any]:
    env = {**os.environ}
    env.pop("OPENBLAS_CORETYPE", None)
    if family is not None:
        env["OPENBLAS_CORETYPE"] = family  # reaches the env server's interpreter too
    done = subprocess.run(
        [sys.executable, "-c", CHILD, module, *names],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{module} under {family}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def largest(
    expected: Any, actual: Any, simulated: bool = False, name: str = ""
) -> tuple[float, int]:
    """The largest difference of a simulated number (images aside), and of an image's thumbnail
    in levels (rounded up)."""
    worst, levels = 0.0, 0
    if isinstance(expected, dict) and isinstance(actual, dict):
        if simulated and LEVELS in expected and LEVELS in actual:
            pairs = zip(expected[LEVELS], actual[LEVELS], strict=False)
            return 0.0, max((abs(int(a, 16) - int(b, 16)) for a, b in pairs), default=0)
        for name in expected.keys() & actual.keys():
            w, lv = largest(expected[name], actual[name], simulated or name in SIMULATED, name)
            worst, levels = max(worst, w), max(levels, lv)
    elif simulated and str(name).endswith("image") and isinstance(expected, list):
        # an image handed over as numbers in [0, 1]: its thumbnail's blocks, in levels
        a, b = thumbnail(np.asarray(expected, float)), thumbnail(np.asarray(actual, float))
        return 0.0, int(np.ceil(np.abs(a - b).max() * 255)) if a.shape == b.shape else 999
    elif isinstance(expected, list) and isinstance(actual, list):
        for a, b in zip(expected, actual, strict=False):
            w, lv = largest(a, b, simulated)
            worst, levels = max(worst, w), max(levels, lv)
    elif simulated and isinstance(expected, float | int) and isinstance(actual, float | int):
        worst = abs(float(expected) - float(actual))
    return worst, levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument(
        "--families", default=None, help="comma-separated; default: all this CPU runs"
    )
    args = parser.parse_args()
    flags = set(machine_numerics()["cpu"])
    families = [f for f, flag in FAMILIES if flag in flags]
    if args.families:
        families = args.families.split(",")
    rows = []
    for suite in args.suites.split(","):
        module, folder = SUITES[suite]
        files = sorted((ROOT / "goldens" / folder).glob("*.json"))
        names = {f.stem.split("[", 1)[1].rstrip("]"): f for f in files}
        for family in [None, *families]:
            try:
                found = traces(module, list(names), family)
            except RuntimeError as error:
                rows.append(f"| {suite} | {family or '(as found)'} | - | - | - | {error} |")
                continue
            for name, path in names.items():
                stored = json.loads(path.read_text())
                worst, levels = largest(stored.get("trace"), found[name].get("trace"))
                stated = stored.get(CPU_TOLERANCE) or {}
                accepted = not differences(stored, found[name])
                rows.append(
                    f"| {suite} | {family or '(as found)'} | {name} | {worst:.3g} | {levels} | "
                    f"{'yes' if accepted else 'NO'} (abs {stated.get('abs')}, rel "
                    f"{stated.get('rel')}, {stated.get('image_levels')} levels) |"
                )
    print(f"machine: {json.dumps(machine_numerics())}")
    print("| suite | OPENBLAS_CORETYPE | golden | largest difference | image levels | accepted |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"command: python bench/golden_numerics.py {shlex.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
