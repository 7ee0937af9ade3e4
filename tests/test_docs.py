"""The documentation site's reference pages come from the parsers: the pytest options page lists
exactly the options `pytest --help` shows in the policybench group, and the commands page every
`policybench` command with exactly the options its `--help` shows. (`tox -e docs` builds the
site with `mkdocs build --strict`, where a broken link or anchor fails.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.test_readme import help_options

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("reference", REPO / "docs/hooks/reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flags(rows: list[tuple[str, str]]) -> set[str]:
    return {flag for names, _ in rows for flag in names.split(", ") if flag.startswith("--")}


def test_the_options_page_lists_exactly_the_options_pytest_help_shows(reference):
    shown = help_options(["-m", "pytest", "-p", "no:cacheprovider"], group="policybench:")
    documented = flags(reference.pytest_options())
    assert len(shown) >= 20 and documented == shown
    page = (REPO / "docs/reference/pytest-options.md").read_text()
    assert reference.PYTEST_MARK in page


@pytest.mark.parametrize("command", ["serve", "env serve", "report compare", "list", "score"])
def test_the_commands_page_lists_each_commands_options_as_its_help_does(reference, command):
    shown = help_options(["-m", "policybench.cli", *command.split()])
    documented = flags(reference.commands()[f"policybench {command}"])
    assert documented == shown
    assert reference.COMMANDS_MARK in (REPO / "docs/reference/commands.md").read_text()


def test_the_generated_reference_committed_in_the_repository_is_current(reference):
    stale = [
        name
        for name in reference.PAGES
        if reference.refreshed((REPO / "docs" / name).read_text())
        != (REPO / "docs" / name).read_text()
    ]
    assert not stale, f"{stale} are stale: run `python docs/hooks/reference.py` and commit them"


def test_every_docs_page_is_in_the_sites_nav():
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!python", ""))["nav"]

    def pages(entries) -> set[str]:
        found = set()
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                found |= pages(value) if isinstance(value, list) else {value}
        return found

    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert on_disk == pages(nav)
