"""The package's structure holds: no import cycle in src/, the policy layer imports no pytest, no
serving and no suite, and nothing outside suites/ imports a suite module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in SRC.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """Every module that `name` imports (at module level or inside functions; typing-only
    imports excepted), as module names."""
    path = MODULES[name]
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)

    Visitor().visit(ast.parse(path.read_text()))
    return found - {name}


GRAPH = {name: {m for m in imports_of(name) if m in MODULES} for name in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, done = [], set()

    def visit(node: str, stack: list[str]) -> None:
        for target in sorted(graph[node]):
            if target in stack:
                found.append([*stack[stack.index(target) :], target])
            elif target not in done:
                visit(target, [*stack, target])
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            visit(node, [node])
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_src_has_no_import_cycle():
    assert len(GRAPH) > 40  # the walk found the package
    assert cycles(GRAPH) == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("policybench.policy")))
def test_the_policy_layer_knows_no_pytest_no_serving_and_no_suite(name):
    forbidden = (
        "pytest",
        "policybench.pytest_plugin",
        "policybench.serve",
        "policybench.registry",
        "policybench.suites",
        "policybench.harness",
    )
    assert not [m for m in imports_of(name) if m.startswith(forbidden)]


def test_no_module_outside_suites_imports_a_suite():
    suite_modules = {n for n in MODULES if n.startswith("policybench.suites.")}
    offenders = {
        name: sorted(imports_of(name) & suite_modules)
        for name in MODULES
        if not name.startswith("policybench.suites")
    }
    assert {name: found for name, found in offenders.items() if found} == {}
