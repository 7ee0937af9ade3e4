"""A reports folder more than one person writes to (a team's `reports/` on a shared machine, NFS,
a CI cache) cannot be turned against the user who runs `history` or `report html` in it: a link
planted where policybench writes leaves its target untouched and the command names it; a run
folder that links out is not read; a FIFO, a device or a huge file neither hangs nor exhausts a
reader; a malformed run is skipped with one line naming its file and field; a store with a
trigger is not trusted. Real files, real links, real FIFOs, on this machine."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from policybench.cli import main
from policybench.report.history import STORE
from policybench.run.files import Refused, make_folder, read_json, write_file
from policybench.run.layout import OutsideRun, inside
from policybench.run.results import read_results
from tests.test_shards import BENCHMARK, ENVS

VICTIM_TEXT = "export PATH=/usr/bin  # the victim's own file\n"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run (the toy reach and slow Evals, 2 rollouts each), made once."""
    folder = tmp_path_factory.mktemp("template")
    (folder / "envs.py").write_text(ENVS)
    (folder / "test_point.py").write_text(BENCHMARK)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--rollouts", "2", "--report-dir", "runs", "test_point.py"],
        cwd=folder, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [run] = [p for p in (folder / "runs").iterdir() if not p.is_symlink()]
    return run


@pytest.fixture
def reports(template: Path, tmp_path: Path) -> Path:
    """A reports folder holding a copy of the template run, as `run-a`."""
    shutil.copytree(template, tmp_path / "reports" / "run-a", symlinks=True)
    return tmp_path / "reports"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "home" / ".bashrc"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def history(folder: Path) -> int:
    return main(["history", str(folder)])


@pytest.mark.parametrize("name", ["index.html", STORE])
def test_history_writes_through_no_link_planted_in_the_folder(reports, victim, name, capsys):
    (reports / name).symlink_to(victim)
    code = history(reports)
    said = capsys.readouterr()
    assert victim.read_text() == VICTIM_TEXT
    if name == STORE:  # the store is an index: the link is removed and the store rebuilt
        assert code == 0
        assert f"removed {reports / STORE}: it is not a regular file" in said.err
        assert not (reports / STORE).is_symlink() and (reports / "index.html").is_file()
    else:
        assert code == 2
        assert f"refused to write {reports / name}: it is a symbolic link" in said.err
        assert said.err.count("\n") == 1  # one line, no traceback


@pytest.mark.parametrize(
    "name", ["index.html", "rollouts", "rollouts/00000.html", "rollouts/rollout_plots.js"]
)
def test_report_html_writes_through_no_link_planted_in_the_run(reports, victim, name, capsys):
    run = reports / "run-a"
    shutil.rmtree(run / "rollouts")
    (run / "index.html").unlink()
    target = victim.parent if name == "rollouts" else victim
    if "/" in name:
        (run / "rollouts").mkdir()
    (run / name).symlink_to(target)
    before = sorted(os.listdir(victim.parent))
    assert main(["report", "html", str(run)]) == 2
    said = capsys.readouterr().err
    assert f"{run / name}: it is a symbolic link" in said, said
    assert victim.read_text() == VICTIM_TEXT
    assert sorted(os.listdir(victim.parent)) == before  # nothing written into a linked folder


def test_the_writer_replaces_nothing_but_a_regular_file(tmp_path, victim):
    (tmp_path / "fifo").mkfifo() if hasattr(Path, "mkfifo") else os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Refused, match="it is a FIFO"):
        write_file(tmp_path / "fifo", "x")
    (tmp_path / "folder").symlink_to(victim.parent)
    with pytest.raises(Refused, match="it is a symbolic link, not a folder"):
        make_folder(tmp_path / "folder")
    write_file(tmp_path / "plain.txt", "one")
    write_file(tmp_path / "plain.txt", "two")  # a regular file is replaced whole
    assert (tmp_path / "plain.txt").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_run_folder_that_links_out_of_the_folder_is_not_read(reports, template, capsys):
    private = reports.parent / "private"
    private.mkdir(mode=0o700)
    secret = private / "secret-run"
    shutil.copytree(template, secret, symlinks=True)
    info = json.loads((secret / "run.json").read_text())
    info["command"] = "pytest --token=SECRET-TOKEN"
    (secret / "run.json").write_text(json.dumps(info))
    (reports / "linked-run").symlink_to(secret)
    assert history(reports) == 0
    assert capsys.readouterr().out.startswith(f"{reports}: 1 runs (1 read")
    assert "SECRET-TOKEN" not in (reports / "index.html").read_text()
    assert b"SECRET-TOKEN" not in (reports / STORE).read_bytes()


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


@pytest.mark.parametrize("name", ["summary.json", "run.json", "results.jsonl", "status.json"])
def test_a_fifo_in_a_run_hangs_neither_history_nor_report(reports, name, capsys):
    run = reports / "run-a"
    _fifo(run / name)
    outcome: list[int | str] = []

    def call(command: list[str]) -> None:
        try:
            outcome.append(main(command))
        except SystemExit as said:  # a clear refusal (no run there) is an answer too
            outcome.append(str(said))

    for command in (["history", str(reports)], ["report", "html", str(run)]):
        worker = threading.Thread(target=call, args=(command,), daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), f"{command} hangs on a FIFO named {name}"
    said = capsys.readouterr()
    assert "Traceback" not in said.err


def test_huge_and_endless_results_are_refused_in_bounded_memory(tmp_path):
    """A link to /dev/zero, an 8 GiB sparse file and a 64 MiB line without an end: each read in
    a process whose peak memory is then measured."""
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "results.jsonl").symlink_to("/dev/zero")
    (tmp_path / "sparse").mkdir()
    with open(tmp_path / "sparse" / "results.jsonl", "wb") as file:
        file.truncate(8 << 30)
    (tmp_path / "long").mkdir()
    good = json.dumps({"eval": "e", "task": "t", "outcome": "solved", "steps": 3, "sim_s": 0.1,
                       "wall_s": 0.1})  # fmt: skip
    with open(tmp_path / "long" / "results.jsonl", "wb") as file:
        file.write(b'{"eval": "' + b"x" * (64 << 20) + b"\n" + good.encode() + b"\n")
    probe = (
        "import resource, sys; from pathlib import Path\n"
        "from policybench.run.results import read_results\n"
        "from policybench.run.files import Refused\n"
        "for folder in sys.argv[1:]:\n"
        "    try:\n"
        "        found = read_results(Path(folder) / 'results.jsonl')\n"
        "        print(folder, len(found.records), found.problems)\n"
        "    except Refused as refused:\n"
        "        print(folder, 'refused', refused)\n"
        "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n"
    )
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "results.jsonl").write_text(good + "\n")

    def read(*names: str) -> list[str]:
        folders = [str(tmp_path / name) for name in names]
        done = subprocess.run([sys.executable, "-c", probe, *folders], capture_output=True,
                              text=True, timeout=120, check=True)  # fmt: skip
        return done.stdout.splitlines()

    lines = read("zero", "sparse", "long")
    assert "refused refused to read" in lines[0] and "symbolic link" in lines[0]
    assert "refused" in lines[1] and "over the 4,294,967,296" in lines[1]
    assert lines[2].endswith("1 ('results.jsonl line 1: longer than 16,777,216 bytes, skipped',)")
    baseline = read("short")
    grown = int(lines[3].split()[1]) - int(baseline[1].split()[1])
    assert grown < 48, (lines, baseline)  # MiB: the 64 MiB line is never held whole


def test_a_trace_that_inflates_past_its_shape_is_refused(tmp_path):
    from policybench.record.rollout_trace import FORMAT, read_trace

    bomb = zlib.compress(bytes(512 << 20), 9)  # 512 MiB of zeros in about 0.5 MiB
    entry = {
        "dtype": "float32",
        "shape": [4],
        "zlib": __import__("base64").b64encode(bomb).decode(),
    }
    (tmp_path / "t.json").write_text(json.dumps({"format": FORMAT, "arrays": {"action": entry}}))
    with pytest.raises(ValueError, match="holds other than 16 bytes"):
        read_trace(tmp_path / "t.json")
    entry = {"dtype": ",f8", "shape": [1], "zlib": ""}
    (tmp_path / "t.json").write_text(json.dumps({"format": FORMAT, "arrays": {"action": entry}}))
    with pytest.raises(ValueError, match="dtype must be one of"):
        read_trace(tmp_path / "t.json")


MALFORMED = {
    "deep JSON in run.json": ("run.json", "[" * 100_000),
    "steps of 2^70": ("results.jsonl", {"steps": 2**70}),
    "a list-valued arm": ("results.jsonl", {"arm": ["a", "b"]}),
    "a scene that is a string": ("results.jsonl", {"scene": "nowhere"}),
    "a fingerprint of the wrong kind": ("run.json", {"fingerprint": {"evals": [1, 2]}}),
}


@pytest.mark.parametrize("what", list(MALFORMED))
def test_a_malformed_run_is_skipped_with_one_line_and_the_rest_read(reports, what, capsys):
    shutil.copytree(reports / "run-a", reports / "run-b", symlinks=True)
    name, change = MALFORMED[what]
    path = reports / "run-b" / name
    if isinstance(change, str):
        path.write_text(change)
    elif name == "results.jsonl":
        lines = path.read_text().splitlines()
        path.write_text("\n".join([json.dumps({**json.loads(lines[0]), **change}), *lines[1:]]))
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    assert history(reports) == 0
    said = capsys.readouterr()
    assert "Traceback" not in said.err and "delete it" not in said.err
    assert said.out.startswith(f"{reports}: 2 runs (2 read") or "skipped" in said.err
    if name == "results.jsonl":
        field = next(iter(change))
        assert f"run-b/results.jsonl line 1: field {field!r} should be" in said.err
    with sqlite3.connect(reports / STORE) as store:
        assert store.execute("SELECT COUNT(*) FROM runs WHERE run_id = 'run-a'").fetchone() == (1,)


def test_a_planted_store_with_a_trigger_is_not_trusted(reports, capsys):
    assert history(reports) == 0
    with sqlite3.connect(reports / STORE) as store:
        store.execute(
            "CREATE TRIGGER lie AFTER INSERT ON runs BEGIN "
            "UPDATE runs SET policy = 'attacker-policy'; END"
        )
    os.utime(reports / "run-a" / "results.jsonl")  # read again: the trigger would fire
    assert history(reports) == 0
    assert "attacker-policy" not in (reports / "index.html").read_text()
    with sqlite3.connect(reports / STORE) as store:
        assert (
            store.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall() == []
        )


def test_a_run_folder_named_as_a_script_link_is_a_relative_path(reports):
    (reports / "run-a").rename(reports / "javascript:alert(document.domain)")
    assert history(reports) == 0
    page = (reports / "index.html").read_text()
    assert 'href="./javascript%3Aalert%28document.domain%29/index.html"' in page
    assert 'href="javascript:' not in page


def test_bounded_reads_take_regular_files_only(tmp_path):
    (tmp_path / "doc.json").write_text('{"a": 1}')
    assert read_json(tmp_path / "doc.json") == {"a": 1}
    (tmp_path / "link.json").symlink_to(tmp_path / "doc.json")
    with pytest.raises(Refused, match="symbolic link"):
        read_json(tmp_path / "link.json")
    with pytest.raises(Refused, match="over the 4 bytes"):
        read_json(tmp_path / "doc.json", limit=4)
    (tmp_path / "results.jsonl").write_text('{"eval": [[[[' + "[" * 5000 + "\n")
    assert "nested too deep" in read_results(tmp_path / "results.jsonl").problems[0]


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ({"specs": {"s": 5}}, "field 'specs' should map each spec to its verdict"),
        ({"policy": [1, 2]}, "field 'policy' should be dict or null"),
        ({"control_hz": "fast"}, "field 'control_hz' should be a number or null"),
        ({"specs": {"s": {"margin": -1.0}}}, "holds a field of a kind no run writes"),
    ],
)
def test_report_html_and_merge_refuse_a_bad_field_in_one_line(reports, field, said, capsys):
    run = reports / "run-a"
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text(
        "\n".join([json.dumps({**json.loads(lines[0]), **field}), *lines[1:]]) + "\n"
    )
    outcomes = []
    for command in (["report", "html", str(run)],
                    ["report", "merge", str(run), "--out", str(reports / "merged")]):  # fmt: skip
        try:
            outcomes.append(main(command))
        except SystemExit as refused:
            outcomes.append(str(refused))
    printed = capsys.readouterr()
    shown = printed.out + printed.err + "".join(str(o) for o in outcomes)
    assert said in shown, shown
    assert "Traceback" not in shown


def test_a_file_a_record_names_is_read_only_inside_its_run(tmp_path):
    """A trace or video name that leads out of the run (a `..`, an absolute path, a link to a
    file or a folder outside) is refused, as asked for each file: its folder's real path is
    found once for the many files in it, the file itself looked at each time."""
    run, outside = tmp_path / "run", tmp_path / "secret.json"
    (run / "traces").mkdir(parents=True)
    outside.write_text("{}")
    (run / "traces" / "ok.json").write_text("{}")
    assert inside(run, "traces/ok.json") == run / "traces" / "ok.json"
    (run / "traces" / "also.json").symlink_to(run / "traces" / "ok.json")  # a link inside
    assert inside(run, "traces/also.json") == run / "traces" / "also.json"
    (run / "traces" / "out.json").symlink_to(outside)  # planted beside the good ones
    (run / "away").symlink_to(tmp_path, target_is_directory=True)
    for name in ("traces/out.json", "away/secret.json", "../secret.json", str(outside),
                 "traces\\..\\..\\secret.json", ""):  # fmt: skip
        with pytest.raises(OutsideRun):
            inside(run, name)
    assert inside(run, "traces/ok.json") == run / "traces" / "ok.json"  # still read after
