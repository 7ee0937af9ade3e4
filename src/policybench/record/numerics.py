"""What a machine's floating-point results are made of, where a simulator's numbers depend on it:
the BLAS kernel family OpenBLAS picked for this CPU (as threadpoolctl reports it) and the CPU's
instruction sets that pick kernels. A golden records them; a mismatch where only they differ
says so first."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path
from typing import Any

# The instruction sets that select numerical kernels (OpenBLAS's core types, PhysX's paths).
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


# Run in another interpreter (an isolated env's, which may lack threadpoolctl): the kernel family
# each OpenBLAS that numpy loaded reports, asked through OpenBLAS's own C function.
PROBE = """
import ctypes, json, numpy
paths = dict.fromkeys(
    line.split()[-1] for line in open("/proc/self/maps")
    if "openblas" in line.lower() and ".so" in line.split()[-1]
)
found = []
for path in paths:
    lib = ctypes.CDLL(path)
    for name in ("openblas_get_corename", "openblas_get_corename64_",
                 "scipy_openblas_get_corename64_", "scipy_openblas_get_corename"):
        function = getattr(lib, name, None)
        if function is not None:
            function.restype = ctypes.c_char_p
            found.append({"library": "openblas", "architecture": function().decode(),
                          "version": None})
            break
print(json.dumps(found))
"""


def machine_numerics(python: str | None = None) -> dict[str, Any]:
    """The BLAS libraries (their kernel family and version) of this process, or of the numpy of
    the interpreter `python` (an isolated env's), and the CPU's flags."""
    blas = _blas() if python is None else _blas_of(python)
    return {"blas": blas, "cpu": _cpu_flags(), "machine": platform.machine()}


def _blas_of(python: str) -> list[dict[str, Any]] | None:
    done = subprocess.run(
        [python, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    try:
        return json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        return None


def numerics_lines(recorded: Any, here: dict[str, Any]) -> list[str]:
    """What differs between a golden's recorded numerics and this machine's; [] where they agree
    or the golden recorded none."""
    if not isinstance(recorded, dict):
        return []
    said = []
    before, now = _families(recorded.get("blas")), _families(here.get("blas"))
    if before != now:
        said.append(
            f"BLAS kernels {', '.join(before) or 'unknown'} -> {', '.join(now) or 'unknown'}"
        )
    if recorded.get("cpu") != here.get("cpu"):
        said.append(f"CPU flags {recorded.get('cpu')} -> {here.get('cpu')}")
    return said


def _families(blas: Any) -> list[str]:
    if not isinstance(blas, list):
        return []
    return [
        f"{lib.get('library')} {lib.get('architecture')}" for lib in blas if isinstance(lib, dict)
    ]


def _blas() -> list[dict[str, Any]]:
    """Each BLAS library this process loaded (numpy's, scipy's), as threadpoolctl reports it."""
    import numpy  # noqa: F401  (loads numpy's BLAS, so that threadpoolctl sees it)
    from threadpoolctl import threadpool_info

    return [
        {
            "library": info.get("internal_api"),
            "architecture": info.get("architecture"),
            "version": info.get("version"),
        }
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    ]


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    flags = set(line.partition(":")[2].split())
    return [flag for flag in KERNEL_FLAGS if flag in flags]
