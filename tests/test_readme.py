"""The README and the guides say what is true: the README's quickstart module runs as written (in
process, and served by `policybench serve` for `--policy=openpi`), so do the "Your own loop"
script and the "why did a rollout fail" script of the guides, the option tables of the guides list
every option, the README stays short, and the files it links to exist."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

from policybench import keys
from policybench.record.episode import OutcomeKind
from policybench.run.results import LATEST, RESULTS, read_results
from policybench.serve.command import READY
from policybench.serve.server import SERVED_MODEL

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
EXAMPLE_MARKER = "<!-- readme-example: my_policy.py -->"
EXAMPLE_MODULE = "my_policy"
LOOP_MARKER = "<!-- readme-example: my_loop.py -->"
SPECS_MARKER = "<!-- readme-example: my_specs.py -->"
GUIDES = REPO / "docs" / "guides"
README_MOST_LINES = 250
SERVER_START_TIMEOUT_S = 60.0


def readme() -> str:
    return README.read_text()


def readme_section(heading: str, text: str | None = None) -> str:
    """The text under `heading` (a full heading line), up to the next heading, of `text`
    (default: the README)."""
    text = readme() if text is None else text
    start = text.index(f"\n{heading}\n")
    following = re.search(r"\n#{2,6} ", text[start + 1 :])  # not a code comment
    return text[start : start + 1 + following.start()] if following else text[start:]


def example_source(marker: str = EXAMPLE_MARKER, text: str | None = None) -> str:
    """The fenced python block that follows `marker` in `text` (default: the README)."""
    text = readme() if text is None else text
    match = re.search(re.escape(marker) + r"\n```python\n(.*?)\n```", text, re.S)
    assert match, f"no ```python block right after {marker}"
    return match.group(1) + "\n"


@pytest.fixture
def example(tmp_path: Path) -> ModuleType:
    """The README's example written to tmp_path/my_policy.py, and imported here to read it."""
    path = tmp_path / f"{EXAMPLE_MODULE}.py"
    path.write_text(example_source())
    spec = importlib.util.spec_from_file_location(f"readme_{EXAMPLE_MODULE}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def user_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a user's shell with my_policy.py on the import path; a plain run
    even when this suite runs under xdist."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    path = [str(tmp_path), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def run_reach(tmp_path: Path, *policy_args: str, tasks: str = "reach") -> list[dict]:
    """The README's MetaWorld benchmark on reach-v3 (or the `tasks` -k selects), one rollout
    each; the records it wrote."""
    report_dir = tmp_path / "reports"
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(REPO / "benchmarks" / "test_metaworld.py"),
        "-k",
        tasks,
        "--rollouts",
        "1",
        "-p",
        "no:cacheprovider",
        *policy_args,
        "--report-dir",
        str(report_dir),
    ]
    run = subprocess.run(
        command, cwd=REPO, env=user_env(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, f"{' '.join(command)} failed:\n{run.stdout}\n{run.stderr}"
    results = read_results(report_dir / LATEST / RESULTS)
    assert not results.problems
    assert results.records, f"no rollout was recorded:\n{run.stdout}"
    return list(results.records)


def assert_ran_without_error(records: list[dict]) -> None:
    outcomes = [record[keys.OUTCOME] for record in records]
    assert outcomes and all(
        outcome in (OutcomeKind.SOLVED, OutcomeKind.UNSOLVED) for outcome in outcomes
    ), [(record[keys.OUTCOME], record[keys.REASON]) for record in records]


def test_readme_example_policy_runs_in_process_on_metaworld_reach(example, tmp_path):
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    records = run_reach(tmp_path, f"--policy={EXAMPLE_MODULE}:MODEL")
    assert_ran_without_error(records)
    assert {record[keys.POLICY][keys.POLICY_NAME] for record in records} == {example.MODEL.name}


def test_readme_trajectory_specs_hold_metaworlds_experts_to_them(tmp_path):
    """The README's specs, as a plugin module given with -p, on every MetaWorld MT10 task: each
    record keeps both specs' margins, and the experts keep them."""
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    (tmp_path / "my_specs.py").write_text(example_source(SPECS_MARKER))
    records = run_reach(tmp_path, "-p", "my_specs", tasks="v3")
    assert len(records) == 10
    assert_ran_without_error(records)
    for record in records:
        margins = {name: judged["margin"] for name, judged in record[keys.SPECS].items()}
        assert set(margins) == {
            "hand in workspace [-0.5, 0.3, 0]-[0.5, 1, 0.5]",
            "action rate <= 1000/s",
        }
        assert all(margin > 0 for margin in margins.values()), margins


def test_readme_example_policy_served_by_policybench_serve_runs_as_openpi(example, tmp_path):
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    serve = [sys.executable, "-m", "policybench.cli", "serve"]
    serve += [f"--policy={EXAMPLE_MODULE}:MODEL", "--eval", "metaworld-mt10", "--port", "0"]
    server = subprocess.Popen(
        serve, cwd=REPO, env=user_env(tmp_path), stdout=subprocess.PIPE, text=True
    )
    try:
        url = await_serving(server)
        records = run_reach(tmp_path, "--policy=openpi", "--policy-url", url)
    finally:
        server.kill()
        server.wait()
    assert_ran_without_error(records)
    served = {record[keys.POLICY][SERVED_MODEL][keys.POLICY_NAME] for record in records}
    assert served == {example.MODEL.name}


def test_readme_own_loop_example_records_each_episode_into_a_run_with_its_report(tmp_path):
    pytest.importorskip("gym_pusht", reason="needs pip install 'policybench[pusht]'")
    loop_guide = (GUIDES / "your-loop.md").read_text()
    (tmp_path / "my_loop.py").write_text(example_source(LOOP_MARKER, loop_guide))
    command = [sys.executable, "my_loop.py"]
    run = subprocess.run(
        command, cwd=tmp_path, env=user_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, f"python my_loop.py failed:\n{run.stdout}\n{run.stderr}"
    run_dir = tmp_path / "reports" / LATEST
    results = read_results(run_dir / RESULTS)
    assert not results.problems
    assert [record[keys.SCENE][keys.SEED] for record in results.records] == [0, 1, 2]
    assert {record[keys.POLICY][keys.POLICY_NAME] for record in results.records} == {"random"}
    assert_ran_without_error(list(results.records))
    assert (run_dir / "summary.json").is_file() and (run_dir / "index.html").is_file()


def await_serving(server: subprocess.Popen[str]) -> str:
    """The URL a starting `policybench serve` announces (it is killed if it announces none)."""
    timer = threading.Timer(SERVER_START_TIMEOUT_S, server.kill)
    timer.start()
    try:
        line = server.stdout.readline()
    finally:
        timer.cancel()
    assert line.startswith(READY), f"policybench serve did not start: {line!r}"
    return re.search(r"ws://\S+", line).group(0)


def table_options(section: str) -> set[str]:
    """The options named in the first cell of a table's rows (`| `--name ARG` | ...`)."""
    return set(re.findall(r"^\| `(--[a-z][a-z-]*)", section, re.M))


def help_options(command: list[str], group: str = "") -> set[str]:
    """The options a command's --help lists (only those of `group`, a heading line's start,
    when given: pytest's help lists each plugin's group up to a blank line)."""
    text = subprocess.run(
        [sys.executable, *command, "--help"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    if group:
        text = text[text.index(f"\n{group}") :]
        text = text[: text.find("\n\n")]
    return set(re.findall(r"^ {2}(--[a-z][a-z-]*)", text, re.M)) - {"--help"}


def test_the_options_guide_lists_every_pytest_option_of_the_plugin():
    registered = help_options(["-m", "pytest", "-p", "no:cacheprovider"], group="policybench:")
    documented = table_options((GUIDES / "options.md").read_text())
    assert len(registered) >= 20
    assert registered <= documented, f"not in the README's table: {sorted(registered - documented)}"
    assert documented <= registered, f"not registered: {sorted(documented - registered)}"


def test_the_commands_guide_serve_table_lists_every_serve_option():
    registered = help_options(["-m", "policybench.cli", "serve"])
    documented = table_options((GUIDES / "commands.md").read_text())
    assert registered == documented


def test_the_readme_is_a_page_that_leads_to_the_site():
    lines = readme().splitlines()
    assert len(lines) <= README_MOST_LINES, len(lines)
    for heading in ("## Two commands", "## Quickstart: your own policy", "## Documentation"):
        assert heading in lines


def test_the_why_a_rollout_failed_script_reads_a_runs_first_unsolved_rollout(example, tmp_path):
    """The guide's script, run as written after the README's quickstart run, names the rollout
    and prints its trace's last steps."""
    pytest.importorskip("metaworld", reason="needs pip install 'policybench[metaworld]'")
    records = run_reach(tmp_path, f"--policy={EXAMPLE_MODULE}:MODEL", tasks="reach or push")
    unsolved = [r for r in records if r[keys.OUTCOME] != OutcomeKind.SOLVED.value]
    assert unsolved, "the example solves push-v3 now: pick a task it does not"
    guide = (GUIDES / "why-a-rollout-failed.md").read_text()
    script = re.search(r"```python\n(# why\.py.*?)\n```", guide, re.S).group(1)
    (tmp_path / "why.py").write_text(script + "\n")
    done = subprocess.run(
        [sys.executable, "why.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(unsolved[0][keys.NODEID])
    assert "share of steps at an action bound" in done.stdout and "state/state" in done.stdout


def test_readme_links_to_files_that_exist():
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme())
    assert links, "the README links to no file"
    missing = [link for link in links if not (REPO / link).exists()]
    assert not missing
