"""A run's results logged to the trackers people already use (`--log-to`, `evaluate(log_to=)`):
Weights & Biases, MLflow, TensorBoard and Trackio, each an optional extra. Fed from the run's folder
(summary.json, run.json), never from a layer: each Eval's success with its interval, the overall
rate, the per-task table, the run's verdict, and the report folder as an artifact (W&B: the
rollout videos too). A tracker's run already open in this process (a training loop's
`wandb.run`, `mlflow.active_run()`) is logged into; else one is opened under `name` (default: the
run's id) and closed again. TensorBoard writes event files under `$POLICYBENCH_TENSORBOARD_DIR`
(default: the run folder's `tensorboard/`); Trackio, local-first, its own store (`$TRACKIO_DIR`),
under the project `$TRACKIO_PROJECT` (default `policybench`)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.run.arms import ARMS
from policybench.run.layout import SUMMARY, VIDEOS, verdict_line

TRACKERS = ("wandb", "mlflow", "tensorboard", "trackio")
EXTRAS = {"wandb": "wandb", "mlflow": "mlflow", "tensorboard": "tensorboard", "trackio": "trackio"}
PREFIX = "policybench"  # every key logged starts with it
TENSORBOARD_DIR = "POLICYBENCH_TENSORBOARD_DIR"
TASK_COLUMNS = ("eval", "task", "rollouts", "solved", "errors", "success", "low", "high")


@dataclass(frozen=True)
class Logged:
    """What a run gives a tracker."""

    name: str
    run_dir: Path
    scalars: dict[str, float]
    tasks: list[list[Any]]  # rows of TASK_COLUMNS
    verdict: str
    videos: list[Path]

    @classmethod
    def of(cls, run_dir: Path, name: str | None = None) -> Logged:
        summary = json.loads((run_dir / SUMMARY).read_text())
        if ARMS in summary:  # an A/B run: each arm's rows, under the arm's name
            rows = [(f"{arm[keys.ARM]}/", arm) for arm in summary[ARMS]]
        else:
            rows = [("", summary)]
        scalars: dict[str, float] = {}
        tasks: list[list[Any]] = []
        for prefix, found in rows:
            for row in [*found["evals"], found["overall"]]:
                key = f"{PREFIX}/{prefix}{row[keys.EVAL]}"
                scalars.update(_rates(key, row))
            tasks += [
                [f"{prefix}{row[keys.EVAL]}", row[keys.TASK], row["rollouts"], row["solved"],
                 row["errors"], row["success_rate"], *(row["interval"] or (None, None))]
                for row in found["tasks"]
            ]  # fmt: skip
        videos = sorted((run_dir / VIDEOS).glob("*.mp4")) if (run_dir / VIDEOS).is_dir() else []
        verdict = verdict_line(summary) or "-"
        return cls(name or run_dir.name, run_dir, scalars, tasks, verdict, videos)


def _rates(key: str, row: dict[str, Any]) -> dict[str, float]:
    low, high = row["interval"] or (None, None)
    found = {f"{key}/rollouts": float(row["rollouts"]), f"{key}/errors": float(row["errors"])}
    if row["success_rate"] is not None:
        found |= {f"{key}/success": row["success_rate"], f"{key}/success_low": low}
        found |= {f"{key}/success_high": high}
    return found


def check_trackers(names: Sequence[str]) -> None:
    """ValueError naming the extra to install for each tracker asked that is not installed."""
    import importlib.util

    unknown = [name for name in names if name not in TRACKERS]
    if unknown:
        raise ValueError(f"no tracker {unknown[0]!r}; known: {', '.join(TRACKERS)}")
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        extras = ",".join(EXTRAS[name] for name in missing)
        raise ValueError(
            f"logging to {', '.join(missing)} needs it installed: pip install "
            f"'policybench[{extras}]'"
        )


def log_run(
    run_dir: Path, to: Sequence[str], name: str | None = None, step: int | None = None
) -> list[str]:
    """Logs the run in `run_dir` to each tracker of `to`, with the verdict its summary.json
    records; a line per tracker saying where."""
    logged = Logged.of(run_dir, name)
    return [LOGGERS[tracker](logged, step) for tracker in dict.fromkeys(to)]


def _wandb(logged: Logged, step: int | None) -> str:
    import wandb

    opened = wandb.run is None
    run = (
        wandb.init(
            project=os.environ.get("WANDB_PROJECT", PREFIX), name=logged.name, job_type="evaluation"
        )
        if opened
        else wandb.run
    )
    try:
        table = wandb.Table(columns=list(TASK_COLUMNS), data=logged.tasks)
        videos = {f"{PREFIX}/videos/{path.stem}": wandb.Video(str(path)) for path in logged.videos}
        run.log({**logged.scalars, f"{PREFIX}/tasks": table, **videos}, step=step)
        run.summary[f"{PREFIX}/verdict"] = logged.verdict
        artifact = wandb.Artifact(
            f"{PREFIX}-report-{logged.run_dir.name}", type="policybench-report"
        )
        artifact.add_dir(str(logged.run_dir))
        run.log_artifact(artifact)
        where = f"wandb: run {run.name} ({run.dir})"
    finally:
        if opened:
            run.finish()
    return where


def _mlflow(logged: Logged, step: int | None) -> str:
    import mlflow

    opened = mlflow.active_run() is None
    run = mlflow.start_run(run_name=logged.name) if opened else mlflow.active_run()
    try:
        mlflow.log_metrics(_mlflow_keys(logged.scalars), step=step)
        mlflow.log_dict(
            [dict(zip(TASK_COLUMNS, row, strict=True)) for row in logged.tasks],
            f"{PREFIX}/tasks.json",
        )
        mlflow.set_tag(f"{PREFIX}.verdict", logged.verdict)
        mlflow.log_artifacts(str(logged.run_dir), f"{PREFIX}-report")
        where = f"mlflow: run {run.info.run_id} ({mlflow.get_tracking_uri()})"
    finally:
        if opened:
            mlflow.end_run()
    return where


def _mlflow_keys(scalars: dict[str, float]) -> dict[str, float]:
    """MLflow's metric names: letters, digits and `_-./ ` (an Eval's name passes as it is)."""
    return {key.replace(":", "_"): value for key, value in scalars.items()}


def _tensorboard(logged: Logged, step: int | None) -> str:
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    where = Path(os.environ.get(TENSORBOARD_DIR) or logged.run_dir / "tensorboard") / logged.name
    writer = EventFileWriter(str(where))
    at, now = step or 0, time.time()
    values = [summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in logged.scalars.items()]
    writer.add_event(
        event_pb2.Event(wall_time=now, step=at, summary=summary_pb2.Summary(value=values))
    )
    header = "| " + " | ".join(TASK_COLUMNS) + " |\n|" + "---|" * len(TASK_COLUMNS) + "\n"
    table = header + "".join("| " + " | ".join(map(str, row)) + " |\n" for row in logged.tasks)
    for tag, text in ((f"{PREFIX}/tasks", table), (f"{PREFIX}/verdict", logged.verdict),
                      (f"{PREFIX}/report", str(logged.run_dir / "index.html"))):  # fmt: skip
        tensor = tensor_pb2.TensorProto(
            dtype=7,  # DT_STRING
            string_val=[text.encode()],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[]),
        )
        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text")
        )
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=metadata)
        writer.add_event(
            event_pb2.Event(wall_time=now, step=at, summary=summary_pb2.Summary(value=[value]))
        )
    writer.close()
    return f"tensorboard: {where}"


def _trackio(logged: Logged, step: int | None) -> str:
    import trackio
    from trackio import context_vars

    project = os.environ.get("TRACKIO_PROJECT", PREFIX)
    opened = context_vars.current_run.get() is None  # a training loop's run is logged into
    chatter = io.StringIO()  # trackio prints its dashboard hints: the terminal has ours
    with contextlib.redirect_stdout(chatter):
        if opened:
            config = {f"{PREFIX}/verdict": logged.verdict, f"{PREFIX}/report": str(logged.run_dir)}
            trackio.init(project=project, name=logged.name, config=config, embed=False,
                         auto_log_cpu=False, auto_log_gpu=False)  # fmt: skip
        try:
            table = trackio.Table(columns=list(TASK_COLUMNS), data=logged.tasks)
            trackio.log({**logged.scalars, f"{PREFIX}/tasks": table}, step=step)
            run = context_vars.current_run.get()
            where = f"trackio: project {project}, run {run.name if run else logged.name}"
        finally:
            if opened:
                trackio.finish()
    return f"{where} ({trackio.utils.TRACKIO_DIR})"


LOGGERS = {"wandb": _wandb, "mlflow": _mlflow, "tensorboard": _tensorboard, "trackio": _trackio}
