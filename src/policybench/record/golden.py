"""The golden-trace syrupy extension: one readable JSON file per golden under `goldens/`,
compared with the tolerances of `record.trace`, with a diff that names the first differing step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.location import PyTestLocation

from policybench import keys
from policybench.record.numerics import machine_numerics, numerics_lines
from policybench.record.trace import (
    CPU_TOLERANCE,
    NUMERICS,
    describe_differences,
    differences,
)

GOLDENS_DIR = "goldens"


def dumps(trace: Any) -> str:
    """JSON with one line per step, so a golden diff reads step by step."""
    if isinstance(trace, dict) and isinstance(trace.get(keys.TRACE_STEPS), list):
        head = {name: value for name, value in trace.items() if name != keys.TRACE_STEPS}
        # The other sections, indented, without the closing brace: "{\n ...\n}" -> "{\n ...,\n".
        opening = json.dumps(head, indent=1, sort_keys=True)[:-2] + ",\n" if head else "{\n"
        steps = ",\n".join("  " + json.dumps(s, sort_keys=True) for s in trace[keys.TRACE_STEPS])
        return opening + f' "{keys.TRACE_STEPS}": [\n' + steps + "\n ]\n}\n"
    return json.dumps(trace, indent=1, sort_keys=True) + "\n"


class GoldenExtension(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "json"

    def serialize(self, data: Any, **kwargs: Any) -> str:
        return dumps(data)

    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        """`<rootdir>/goldens/<test module>/`, instead of `__snapshots__` beside the test."""
        root = test_location.item.config.rootpath
        return str(Path(root) / GOLDENS_DIR / test_location.basename)

    @classmethod
    def discovery_dirname(cls, *, test_location: PyTestLocation) -> str:
        return cls.dirname(test_location=test_location)

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        try:
            expected = json.loads(snapshot_data)
        except (TypeError, ValueError):
            return False
        return not differences(expected, json.loads(serialized_data))

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        try:
            expected = json.loads(snapshot_data)
        except (TypeError, ValueError) as error:
            yield f"the stored golden is not JSON ({error}); regenerate it with --snapshot-update"
            return
        actual = json.loads(serialized_data)
        yield from _what_differs_around(expected, actual)
        yield from describe_differences(differences(expected, actual))
        yield "review the change; accept it with: pytest benchmarks/ -m golden --snapshot-update"


def _what_differs_around(expected: Any, actual: Any) -> Iterator[str]:
    """Before the values: what differs in how the two were made, the machine's numerics and the
    packages, and how to measure whether that changes success."""
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return
    was, now = expected.get(keys.TRACE_ABOUT) or {}, actual.get(keys.TRACE_ABOUT) or {}
    numerics = numerics_lines(was.get(NUMERICS), now.get(NUMERICS) or machine_numerics())
    if numerics:
        stated = expected.get(CPU_TOLERANCE)
        within = (
            f"its values are compared within the tolerance it states ({stated.get('why')})"
            if isinstance(stated, dict)
            else "it states no tolerance for them"
        )
        yield (
            f"this golden was recorded on other numerics ({'; '.join(numerics)}): {within}; "
            "measure them with python bench/golden_numerics.py"
        )
    packages = _packages_changed(was.get(keys.PACKAGES), now.get(keys.PACKAGES))
    if packages:
        pins = " ".join(f"{name}=={version}" for name, _, version in packages if version)
        changed = ", ".join(f"{name} {before} -> {after}" for name, before, after in packages)
        yield (
            f"packages differ from the golden's record: {changed}; whether that changes success "
            f"is measured, paired by scene, by: pytest benchmarks/ --env-pins '{pins}'"
        )


def _packages_changed(before: Any, after: Any) -> list[tuple[str, str | None, str | None]]:
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    return [
        (name, before.get(name), after.get(name))
        for name in sorted(set(before) | set(after))
        if name != "policybench" and before.get(name) != after.get(name)
    ]
