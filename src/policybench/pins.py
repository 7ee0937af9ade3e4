"""Pins: the versions an Eval's env runs on, and a candidate pin set (`--env-pins "mujoco==3.5.0"`)
as an arm of a run. The candidate arm runs the Eval's env in an interpreter built from the
Eval's current pins (the versions installed where the run runs) with the candidate's versions
installed over them (with what they need themselves; a suite that pins an exact version, as
MetaWorld pins mujoco, is overridden on purpose), on the same scenes, with the same policy; the
env's factory is the Eval's own (policybench is copied into that interpreter), so only the pins
differ. An Eval whose env already runs in an interpreter of its own gets that interpreter's
requirements with the candidate's over them."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import re
from dataclasses import dataclass, replace

from policybench.envserver import Isolated
from policybench.envserver.interpreters import Interpreter, distribution
from policybench.spec import Eval

PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*$")
# What every env's factory module needs beside the suite's own requirements (policybench's
# modules a suite imports: numpy and gymnasium), and what the env server needs.
BASE = ("numpy", "gymnasium", "msgpack")


@dataclass(frozen=True)
class PinSet:
    """A candidate pin set: `name==version` requirements, one per distribution."""

    pins: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> PinSet:
        """`"mujoco==3.5.0 gymnasium==1.4.0"` (spaces or commas between); a ValueError says what
        was expected."""
        parts = [part for part in re.split(r"[\s,]+", text.strip()) if part]
        if not parts:
            raise ValueError("--env-pins: give one or more NAME==VERSION, e.g. mujoco==3.5.0")
        pins, seen = [], set()
        for part in parts:
            found = PIN.match(part)
            if found is None:
                raise ValueError(
                    f"--env-pins {part!r}: expected NAME==VERSION (an exact version, e.g. "
                    "mujoco==3.5.0); ranges would make the candidate a moving target"
                )
            name = distribution(found[1])
            if name in seen:
                raise ValueError(f"--env-pins names {found[1]} twice; give each package once")
            seen.add(name)
            pins.append(f"{found[1]}=={found[2]}")
        return cls(tuple(pins))

    @property
    def label(self) -> str:
        """The candidate arm's label: `mujoco-3.5.0` (item ids take letters, digits, _ . -)."""
        return "_".join(pin.replace("==", "-") for pin in self.pins)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(distribution(pin) for pin in self.pins)

    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.pins).encode()).hexdigest()[:8]


CURRENT = "current"  # the baseline arm's label: the pins installed where the run runs


def under_pins(eval: Eval, pins: PinSet) -> Eval:
    """`eval` with its env built in an interpreter of the candidate pins; a ValueError where its
    env's factory cannot run in another interpreter (it says how to declare one that can)."""
    make = eval.make_env
    if isinstance(make, Isolated):
        interpreter = replace(
            make.interpreter,
            name=f"{make.interpreter.name}-pins-{pins.digest()}",
            overrides=pins.pins,
            python=None,
        )
        return replace(eval, make_env=replace(make, interpreter=interpreter))
    if isinstance(make, functools.partial) and not make.args:
        entry = f"{make.func.__module__}:{make.func.__qualname__}"
        interpreter = Interpreter(
            name=f"{eval.extra or eval.name}-pins-{pins.digest()}",
            requirements=current_pins(eval, pins),
            overrides=pins.pins,
            copied=("policybench",),
        )
        renders = eval.renderer is not None
        isolated = Isolated(entry, interpreter, dict(make.keywords), renders=renders)
        return replace(eval, make_env=isolated)
    raise ValueError(
        f"{eval.name}: its env's factory {make!r} can only run in this process, so it cannot "
        "run under other pins; declare it with policybench.envserver.isolable(make, ...), a "
        "module-level function of the task"
    )


def current_pins(eval: Eval, pins: PinSet) -> tuple[str, ...]:
    """The versions installed here of what the Eval's env needs (its extra's requirements, its
    recorded packages, and BASE), the candidate's own names left to the candidate."""
    names = dict.fromkeys([*BASE, *_extra_requirements(eval.extra), *eval.packages])
    found = []
    for name in names:
        if distribution(name) in (*pins.names, "policybench"):  # policybench is copied in
            continue
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here: the Eval does not run here either
    return tuple(found)


def _extra_requirements(extra: str | None) -> list[str]:
    """The distributions policybench's `extra` installs."""
    if extra is None:
        return []
    marker = re.compile(r"""extra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    required = importlib.metadata.requires("policybench") or []
    return [distribution(line) for line in required if marker.search(line)]
