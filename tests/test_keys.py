"""Keys are spelled once: recorded statics and shared observation names come from
policybench.keys, which imports nothing from the package."""

from __future__ import annotations

import ast
from pathlib import Path

import policybench
from policybench import keys

SOURCE = Path(policybench.__file__).parent
KEY_VALUES = {
    value: name for name, value in vars(keys).items() if name.isupper() and isinstance(value, str)
}
NOT_OUR_KEYS = {
    ("world.py", "success"),  # the success flag gymnasium envs put in their info: the env's key
    ("cli.py", "published"),  # the `policybench published` command's name in the commands' table
}


def key_literals(path: Path) -> list[tuple[int, str]]:
    """String constants used where a key goes: dict keys, subscripts, `.get(...)` arguments."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            candidates = [key for key in node.keys if key is not None]
        elif isinstance(node, ast.Subscript):
            candidates = [node.slice]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get":
            candidates = node.args[:1]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
            found += [(node.lineno, kw.arg) for kw in node.keywords if kw.arg]
            continue
        else:
            continue
        found += [
            (c.lineno, c.value)
            for c in candidates
            if isinstance(c, ast.Constant) and isinstance(c.value, str)
        ]
    return found


def test_no_module_spells_a_key_literally():
    copies = [
        f"{path.relative_to(SOURCE)}:{line}: {value!r} is keys.{KEY_VALUES[value]}"
        for path in sorted(SOURCE.rglob("*.py"))
        if path.name != "keys.py"
        for line, value in key_literals(path)
        if value in KEY_VALUES and (path.name, value) not in NOT_OUR_KEYS
    ]
    assert not copies, "use policybench.keys instead of literal copies:\n" + "\n".join(copies)


def test_keys_is_a_leaf_module():
    tree = ast.parse((SOURCE / "keys.py").read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert imports == []


def test_no_two_keys_share_a_value():
    # No two names in keys.py are meant to be one key; a record would lose one of the two.
    names_by_value: dict[str, list[str]] = {}
    for name, value in vars(keys).items():
        if name.isupper() and isinstance(value, str):
            names_by_value.setdefault(value, []).append(name)
    shared = {value: names for value, names in names_by_value.items() if len(names) > 1}
    assert not shared, f"give each key its own value; these share one: {shared}"
