"""Builds the reference pages from the parsers themselves, so that they cannot drift from the
code: a page holding `<!-- pytest-options -->` holds, up to `<!-- /pytest-options -->`, a table of
the plugin's pytest options; `<!-- commands -->` a section per `policybench` command with its
options; `<!-- families -->` the suite families the registry holds. The generated text is
committed, so the pages read true in the repository too: `python docs/hooks/reference.py`
rewrites it, the site's build (an MkDocs hook, mkdocs.yml's `hooks:`) regenerates it, and a test
fails where the committed text is stale. `pytest_options()` and `commands()` serve the tests."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

PYTEST_MARK, COMMANDS_MARK = "<!-- pytest-options -->", "<!-- commands -->"
FAMILIES_MARK = "<!-- families -->"  # the suite families the registry holds, named and counted
DOCS = Path(__file__).resolve().parents[1]
PAGES = ("reference/pytest-options.md", "reference/commands.md", "index.md")


def end_of(mark: str) -> str:
    return mark.replace("<!-- ", "<!-- /")


def generators() -> dict[str, Callable[[], str]]:
    return {
        PYTEST_MARK: lambda: "\n" + table(pytest_options()) + "\n",
        COMMANDS_MARK: lambda: "\n" + commands_markdown() + "\n",
        FAMILIES_MARK: families,
    }


def refreshed(markdown: str) -> str:
    """`markdown` with the text after each mark, up to its end mark (added where missing),
    generated anew."""
    for mark, generate in generators().items():
        if mark not in markdown:
            continue
        pattern = re.escape(mark) + r"(.*?)" + re.escape(end_of(mark))
        text = mark + generate() + end_of(mark)
        found = re.search(pattern, markdown, flags=re.S)
        if found is not None:
            markdown = markdown[: found.start()] + text + markdown[found.end() :]
        else:
            markdown = markdown.replace(mark, text, 1)
    return markdown


def on_page_markdown(markdown: str, **_: Any) -> str:
    return refreshed(markdown)


def write() -> list[str]:
    """Rewrites the generated text of every page that holds some; the pages it changed."""
    changed = []
    for name in PAGES:
        path = DOCS / name
        text = path.read_text()
        new = refreshed(text)
        if new != text:
            path.write_text(new)
            changed.append(name)
    return changed


def families() -> str:
    """The registered suite families (the `policybench.suites` entry points), as a sentence."""
    from policybench.suites import suite_modules

    names = sorted(suite_modules())
    return f"{len(names)} families: " + ", ".join(f"`{name}`" for name in names)


def pytest_options() -> list[tuple[str, str]]:
    """(flags, help) of each option the plugin's `policybench` group registers, in its order."""
    from _pytest.config import _prepareconfig

    config = _prepareconfig(["-p", "no:cacheprovider"])
    try:
        group = config._parser.getgroup("policybench")
        return [
            (", ".join(option.names()), _help(option.attrs()))
            for option in group.options
            if option.attrs().get("help") != argparse.SUPPRESS  # a former name, kept working
        ]
    finally:
        config._ensure_unconfigure()


def commands() -> dict[str, list[tuple[str, str]]]:
    """Each `policybench` command (and subcommand) with the (flags, help) of its arguments."""
    from policybench.cli import COMMANDS

    parser = argparse.ArgumentParser(prog="policybench")
    subparsers = parser.add_subparsers(dest="command")
    for add_parser in COMMANDS.values():
        add_parser(subparsers)
    found: dict[str, list[tuple[str, str]]] = {}
    _walk("policybench", parser, found)
    found.pop("policybench", None)
    return found


def _walk(name: str, parser: argparse.ArgumentParser, found: dict) -> None:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                _walk(f"{name} {sub}", subparser, found)
        elif not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS:
            flags = ", ".join(action.option_strings) or action.metavar or action.dest
            rows.append((str(flags), _help(vars(action))))
    if rows or name != "policybench":
        found[name] = rows


def _help(attrs: dict[str, Any]) -> str:
    text = str(attrs.get("help") or "")
    if "%(default)" in text:
        text = text.replace("%(default)s", str(attrs.get("default")))
    return " ".join(text.split()).replace("|", "\\|")


def table(rows: list[tuple[str, str]]) -> str:
    lines = ["| option | meaning |", "|---|---|"]
    lines += [f"| `{flags}` | {meaning} |" for flags, meaning in rows]
    return "\n".join(lines)


def commands_markdown() -> str:
    parts = []
    for name, rows in commands().items():
        parts.append(f"## `{name}`\n\n" + (table(rows) if rows else "(no options)"))
    return "\n\n".join(parts)


if __name__ == "__main__":
    written = write()
    print("rewrote " + ", ".join(written) if written else "the reference pages are up to date")
    sys.exit(0)
