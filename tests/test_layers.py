"""The layers and the fronts, checked over the package's imports: no module outside the pytest
plugin imports the plugin or pytest (but `policybench.parametrize`, loaded lazily, and
`evaluate()`'s child run, which is a pytest plugin); the layers below the fronts (the run layer,
recorders, policies, env servers, harness, suites) import no front and no report; a wrapped loop
imports no pytest; no function is longer than a screen."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "policybench"
FRONT = "policybench.pytest_plugin"
# Modules outside the plugin that may reach pytest, and why.
PYTEST_ALLOWED = {
    "policybench/__init__.py",  # policybench.parametrize, imported only when asked for
    "policybench/evaluate_run.py",  # evaluate()'s child run: a pytest plugin of its own
}


def imports(path: Path) -> list[str]:
    """The modules `path` imports at run time (its `if TYPE_CHECKING:` blocks left out)."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
    return found


def modules() -> dict[str, list[str]]:
    return {
        str(path.relative_to(SRC.parent)): imports(path)
        for path in sorted(SRC.rglob("*.py"))
        if "pytest_plugin" not in path.parts
    }


def test_no_module_outside_the_pytest_plugin_imports_it_or_pytest():
    offending = {
        name: [
            m for m in imported if m.split(".")[0] in ("pytest", "_pytest") or m.startswith(FRONT)
        ]
        for name, imported in modules().items()
        if name not in PYTEST_ALLOWED
    }
    assert {name: found for name, found in offending.items() if found} == {}


# The fronts and the report: what users call, each over the layers below, which never import them.
FRONTS = (
    FRONT,
    "policybench.report",
    "policybench.loop",
    "policybench.training",
    "policybench.evaluate_run",
    "policybench.scoring",
    "policybench.operator",
    "policybench.cli",
    "pytest",
    "_pytest",
)
# Modules outside FRONTS that may reach a front, and why.
FRONT_ALLOWED = {
    "policybench/__init__.py": "the package's face: wrap, evaluate and parametrize, lazily",
}


def test_the_layers_below_the_fronts_import_no_front_and_no_report():
    """The run layer, the recorders, the policy layer, the env servers, the harness and the
    suites import no front and no report (at run time, lazily neither)."""
    front_paths = tuple(name.replace(".", "/") for name in FRONTS)
    below = {
        name: imported
        for name, imported in modules().items()
        if not name.removesuffix(".py").startswith(front_paths) and name not in FRONT_ALLOWED
    }
    offending = {
        name: [m for m in imported if m.startswith(FRONTS)] for name, imported in below.items()
    }
    assert "policybench/run/info.py" in below and "policybench/record/video.py" in below
    assert {name: found for name, found in offending.items() if found} == {}


def test_a_wrapped_loop_imports_no_pytest(tmp_path):
    script = f"""
import sys
import gymnasium as gym
import policybench

cartpole = gym.make("CartPole-v1", max_episode_steps=5)
env = policybench.wrap(cartpole, "c", "t", run_dir={str(tmp_path)!r})
env.reset(seed=0)
env.step(0)
env.close()
print(sorted(m for m in sys.modules if "pytest" in m.split(".")[0] or "pytest_plugin" in m))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def module_graph() -> dict[str, set[str]]:
    """Each module's module-level imports of the package (run-time ones: a `TYPE_CHECKING`
    block imports nothing; `from policybench import keys` imports policybench.keys)."""
    root = SRC.parent
    names = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        names[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = {f"{node.module}.{alias.name}" for alias in node.names} & names.keys()
                found |= subs or {node.module}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {dep for dep in found if dep in names and dep != name}
    return graph


def test_no_import_circles_at_module_level():
    graph = module_graph()
    circles = []

    def visit(module: str, path: list[str], done: set[str]) -> None:
        for dep in sorted(graph[module]):
            if dep in path:
                circles.append([*path[path.index(dep) :], dep])
            elif dep not in done:
                visit(dep, [*path, dep], done)
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module], done)
    assert circles == []


LONGEST_FUNCTION = 60  # lines, its signature and docstring included


def test_no_function_is_longer_than_a_screen():
    """A function that does one thing fits on a screen; over LONGEST_FUNCTION lines it does
    several, and its parts want names of their own."""
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name} {lines}")
    assert not long, "functions over a screen:\n" + "\n".join(long)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package (dotted) to the package's modules it imports, lazily or not:
    `from policybench.a import b` is an import of `policybench.a.b` where that is a module."""
    names = {
        ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in SRC.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        name = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        name = name.removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    whole = f"{node.module}.{alias.name}"
                    found.add(whole if whole in names else node.module)
        graph[name] = {module for module in found if module in names and module != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_anywhere_in_the_package():
    """Arrows point down: no module reaches itself through the package's imports, lazy imports
    inside functions included (the package's own `__init__` aside, which re-exports)."""
    graph = import_graph()
    graph.pop("policybench", None)
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
