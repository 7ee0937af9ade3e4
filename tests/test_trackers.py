"""`--log-to wandb|mlflow|tensorboard|trackio`: a run logs each Eval's success with its interval,
the per-task table, the verdict and the report, offline, and each test reads back what was logged:
W&B in offline mode (its run files), MLflow on a file store, TensorBoard's event files, Trackio's
local store."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_shards import BENCHMARK, ENVS

RUN = ("--rollouts", "2", "--report-dir", "runs")


@pytest.fixture
def bench(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(pytester.path / "wandb-dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (pytester.path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3's file store, opted into
    return pytester


def summary(bench: pytest.Pytester) -> dict:
    return json.loads((bench.path / "runs" / "latest" / "summary.json").read_text())


def test_pytest_help_offers_each_tracker(pytester):
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--log-to=TRACKER*"])
    said = " ".join(result.stdout.lines)
    assert all(name in said for name in ("wandb", "mlflow", "tensorboard", "trackio"))


def test_tensorboard_event_files_hold_each_evals_success_and_the_table(bench):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = bench.runpytest_subprocess(*RUN, "--log-to", "tensorboard", "--log-name", "tb-run")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["logged to tensorboard: */tensorboard/tb-run"])
    events = EventAccumulator(
        str(bench.path / "runs" / "latest" / "tensorboard" / "tb-run"), size_guidance={"tensors": 0}
    ).Reload()
    reach = next(row for row in summary(bench)["evals"] if row["eval"] == "reach")
    assert events.Scalars("policybench/reach/success")[0].value == pytest.approx(
        reach["success_rate"]
    )
    assert events.Scalars("policybench/reach/success_low")[0].value == pytest.approx(
        reach["interval"][0]
    )
    table = events.Tensors("policybench/tasks")[0].tensor_proto.string_val[0].decode()
    assert "| reach | a | 2 | 2 |" in table
    verdict = events.Tensors("policybench/verdict")[0].tensor_proto.string_val[0].decode()
    assert verdict == "passed"


READ_TRACKIO = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage

print(json.dumps({"runs": SQLiteStorage.get_runs("bench"),
                  "logs": SQLiteStorage.get_logs("bench", "tr-run"),
                  "config": SQLiteStorage.get_run_config("bench", "tr-run")}))
"""


def test_trackio_local_store_holds_the_metrics_table_and_verdict(bench, monkeypatch):
    store = bench.path / "trackio-store"
    monkeypatch.setenv("TRACKIO_DIR", str(store))  # read when trackio is imported: a subprocess
    monkeypatch.setenv("TRACKIO_PROJECT", "bench")
    result = bench.runpytest_subprocess(*RUN, "--log-to", "trackio", "--log-name", "tr-run")
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines([f"logged to trackio: project bench, run tr-run ({store})"])
    assert "Trackio project initialized" not in result.stdout.str()  # its chatter kept out
    done = subprocess.run([sys.executable, "-c", READ_TRACKIO], capture_output=True, text=True,
                          check=True)  # fmt: skip
    found = json.loads(done.stdout)
    assert found["runs"] == ["tr-run"]
    (logged,) = found["logs"]
    reach = next(row for row in summary(bench)["evals"] if row["eval"] == "reach")
    assert logged["policybench/reach/success"] == pytest.approx(reach["success_rate"])
    assert logged["policybench/reach/success_high"] == pytest.approx(reach["interval"][1])
    table = logged["policybench/tasks"]["_value"]
    assert {"eval": "reach", "task": "a", "rollouts": 2, "solved": 2}.items() <= table[0].items()
    assert found["config"]["policybench/verdict"] == "passed"


READ_MLFLOW = """
import json, sys
import mlflow

mlflow.set_tracking_uri(sys.argv[1])
[run] = mlflow.search_runs(search_all_experiments=True, output_format="list")
print(json.dumps({"name": run.info.run_name, "metrics": run.data.metrics,
                  "tags": run.data.tags, "artifacts": run.info.artifact_uri}))
"""


def test_mlflow_file_store_holds_the_metrics_table_verdict_and_report(bench):
    result = bench.runpytest_subprocess(*RUN, "--log-to", "mlflow", "--log-name", "ml-run")
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["logged to mlflow: run * (file://*mlruns)"])
    # Read back in a process of its own: MLflow's imports change what this one's
    # importlib.metadata finds.
    uri = (bench.path / "mlruns").as_uri()
    done = subprocess.run(
        [sys.executable, "-c", READ_MLFLOW, uri], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(done.stdout.splitlines()[-1])
    assert run["name"] == "ml-run"
    overall = summary(bench)["overall"]
    assert run["metrics"]["policybench/all/success"] == pytest.approx(overall["success_rate"])
    assert run["tags"]["policybench.verdict"] == "passed"
    artifacts = Path(run["artifacts"].removeprefix("file://"))
    tasks = json.loads((artifacts / "policybench" / "tasks.json").read_text())
    assert {(t["eval"], t["task"]) for t in tasks} == {
        ("reach", "a"), ("reach", "b"), ("reach", "c"), ("slow", "far")
    }  # fmt: skip
    assert (artifacts / "policybench-report" / "index.html").is_file()


def wandb_records(path: Path):
    """The records of an offline W&B run's transaction log (`run-<id>.wandb`): LevelDB's log
    format (32 KiB blocks of records, each a 7-byte header: checksum, length, type; FULL, or
    FIRST, MIDDLE... LAST pieces) after a 7-byte file header, each record a wandb protobuf."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, block, pending = 7, 32768, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        piece = data[position + 7 : position + 7 + length]
        position += 7 + length
        pending = piece if kind in (1, 2) else pending + piece
        if kind in (1, 4) and pending:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record
            pending = b""


def test_wandb_offline_run_holds_the_summary_and_the_report_artifact(bench):
    result = bench.runpytest_subprocess(*RUN, "--log-to", "wandb", "--log-to", "tensorboard")
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["logged to wandb: run *", "logged to tensorboard: *"])
    [log] = (bench.path / "wandb-dir" / "wandb").glob("offline-run-*/run-*.wandb")
    summary_of_run, artifacts = {}, []
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "summary":
            summary_of_run.update(
                {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in record.summary.update
                }
            )
        elif kind == "artifact":
            artifacts.append((record.artifact.name, record.artifact.type))
    reach = next(row for row in summary(bench)["evals"] if row["eval"] == "reach")
    assert summary_of_run["policybench/reach/success"] == pytest.approx(reach["success_rate"])
    assert summary_of_run["policybench/reach/success_low"] == pytest.approx(reach["interval"][0])
    assert summary_of_run["policybench/verdict"] == "passed"
    run_id = (bench.path / "runs" / "latest").resolve().name
    assert (f"policybench-report-{run_id}", "policybench-report") in artifacts
    [table] = log.parent.glob("files/media/table/policybench/tasks_*.table.json")
    rows = json.loads(table.read_text())["data"]
    assert sorted((row[0], row[1]) for row in rows) == [
        ("reach", "a"), ("reach", "b"), ("reach", "c"), ("slow", "far")
    ]  # fmt: skip


def test_a_tracker_not_installed_is_a_usage_error_naming_its_extra(bench, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    from policybench.trackers import check_trackers

    with pytest.raises(ValueError, match=r"pip install 'policybench\[wandb\]'"):
        check_trackers(["wandb"])


def test_evaluate_logs_to_a_tracker_from_the_training_process(tmp_path, monkeypatch, capsys):
    """`evaluate(log_to=...)` logs from the calling process (a training loop's), at its step."""
    pytest.importorskip("gym_pusht")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import policybench
    from policybench.suites.pusht import PUSHT

    monkeypatch.setenv("POLICYBENCH_TENSORBOARD_DIR", str(tmp_path / "tb"))
    found = policybench.evaluate(
        PUSHT.scripted(), evals=["pusht"], rollouts=1, workers=0, report_dir=tmp_path / "runs",
        log_to=["tensorboard"], log_name="step-40", log_step=40,
    )  # fmt: skip
    assert found.returncode == 0, found.output[-2000:]
    assert (
        f"policybench: logged to tensorboard: {tmp_path / 'tb' / 'step-40'}"
        in capsys.readouterr().err
    )
    events = EventAccumulator(str(tmp_path / "tb" / "step-40")).Reload()
    [logged] = events.Scalars("policybench/pusht/success")
    assert (logged.step, logged.value) == (40, pytest.approx(found.success_rate("pusht")))
