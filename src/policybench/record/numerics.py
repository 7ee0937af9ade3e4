"""What a machine's floating-point results are made of, where a simulator's numbers depend on it:
the BLAS kernel family OpenBLAS picked for this CPU (as threadpoolctl reports it) and the CPU's
instruction sets that pick kernels. A golden records them; a mismatch where only they differ
says so first."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

# The instruction sets that select numerical kernels (OpenBLAS's core types, PhysX's paths).
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


def machine_numerics() -> dict[str, Any]:
    """This process's BLAS libraries (their kernel family and version) and the CPU's flags."""
    return {"blas": _blas(), "cpu": _cpu_flags(), "machine": platform.machine()}


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
