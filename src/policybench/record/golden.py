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
from policybench.record.trace import describe_differences, differences

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
        yield from describe_differences(differences(expected, json.loads(serialized_data)))
        yield "review the change; accept it with: pytest benchmarks/ -m golden --snapshot-update"
