"""The SLURM example on a real one-node SLURM cluster (munge, slurmctld and slurmd from the
distribution's packages, started here): `examples/slurm/submit.sh` as the long-runs guide gives
it, a shard cancelled mid-run and rerun with the guide's commands, and the merged run equal to the
same selection run on one machine."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_remote import free_port
from tests.test_shards import SHARDS, checkout, counts, engine_env, policy_url, unsharded

__all__ = ["checkout", "policy_url", "unsharded"]  # the module fixtures this test shares

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "slurm"
DAEMONS = ("munged", "slurmctld", "slurmd")
MISSING = [name for name in DAEMONS if shutil.which(name, path="/usr/sbin:/usr/bin") is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING) or os.geteuid() != 0,
    reason="a SLURM cluster needs root and apt-get install -y munge slurmctld slurmd slurm-client",
)


@dataclass(frozen=True)
class Cluster:
    conf: Path
    logs: Path

    def env(self, checkout: Path, **variables: str) -> dict[str, str]:
        return engine_env(checkout, SLURM_CONF=str(self.conf), **variables)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """munged, slurmctld and slurmd on this machine, on free ports, until the module ends."""
    root = tmp_path_factory.mktemp("slurm")
    for name in ("state", "spool", "munge"):
        (root / name).mkdir()
    host = socket.gethostname().split(".")[0]
    fields = {
        "HOST": host,
        "CTLD_PORT": str(free_port()),
        "SLURMD_PORT": str(free_port()),
        "DIR": str(root),
        "CPUS": str(os.cpu_count()),
        "MEMORY_MB": "2000",
    }
    conf = (Path(__file__).parent / "slurm.conf").read_text()
    for name, value in fields.items():
        conf = conf.replace(f"@{name}@", value)
    socket_path = root / "munge" / "munge.socket"
    conf += f"AuthInfo=socket={socket_path}\n"
    (root / "slurm.conf").write_text(conf)
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    munge = root / "munge"
    munged = ["/usr/sbin/munged", "--foreground", "--force", f"--socket={socket_path}"]
    munged += [f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log"]
    munged += [f"--seed-file={munge}/munged.seed"]
    started = [subprocess.Popen(munged, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)]
    try:
        wait_for(lambda: socket_path.exists(), 10, "munged's socket", root)
        for daemon in (["/usr/sbin/slurmctld", "-D", "-c", "-i"], ["/usr/sbin/slurmd", "-D"]):
            started.append(subprocess.Popen(daemon, env=env, stderr=subprocess.STDOUT))
        node_idle = lambda: "idle" in slurm(["sinfo", "-h", "-o", "%T"], env)  # noqa: E731
        wait_for(node_idle, 60, "the node to be idle", root)
        yield Cluster(root / "slurm.conf", root)
    finally:
        for process in reversed(started):
            process.terminate()
        for process in reversed(started):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def slurm(command: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    return done.stdout


def wait_for(ready, seconds: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            tails = {p.name: p.read_text()[-1500:] for p in logs.rglob("*.log")}
            pytest.fail(f"waited {seconds} s for {what}; daemon logs: {tails}")
        time.sleep(0.1)


def job(job_id: str, env: dict[str, str]) -> dict[str, str]:
    """A job's fields as `scontrol show job` prints them (JobState, ExitCode, ...)."""
    shown = slurm(["scontrol", "show", "job", job_id], env)
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def ended(job_id: str, env: dict[str, str], cluster: Cluster, seconds: float = 180) -> dict:
    states = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
    wait_for(lambda: job(job_id, env)["JobState"] in states, seconds, f"job {job_id}", cluster.logs)
    return job(job_id, env)


def test_a_slurm_array_merges_into_the_unsharded_run_after_a_failed_shard_is_rerun(
    cluster, checkout, policy_url, unsharded
):
    env = cluster.env(checkout)
    # As the long-runs guide's "Clusters" section gives it, sized for this machine.
    options = [f"--array=0-{SHARDS - 1}", "--cpus-per-task=1", "--mem=300M", "--time=00:05:00"]
    printed = slurm([str(EXAMPLE / "submit.sh"), policy_url, *options], env, cwd=checkout)
    array, merge = re.search(r"shards: job (\d+); merge: job (\d+)", printed).groups()

    # A fault: the second shard is cancelled while it runs.
    victim = f"{array}_1"
    wait_for(lambda: job(victim, env)["JobState"] != "PENDING", 60, victim, cluster.logs)
    slurm(["scancel", victim], env)
    assert ended(victim, env, cluster)["JobState"] == "CANCELLED"

    first_merge = ended(merge, env, cluster)
    assert (first_merge["JobState"], first_merge["ExitCode"]) == ("FAILED", "1:0")
    merge_log = (checkout / "logs" / f"policybench-merge-{merge}.out").read_text()
    assert "ran in no part" in merge_log or "no part is shard" in merge_log, merge_log[-2000:]

    # The guide's rerun: requeue the shard (started now rather than after SLURM's requeue
    # delay), then merge again once it has ended.
    slurm(["scontrol", "requeue", victim], env)
    slurm(["scontrol", "update", f"JobId={victim}", "StartTime=now"], env)
    again = ["sbatch", "--parsable", f"--dependency=afterany:{victim}"]
    again += [f"--export=ALL,ARRAY_JOB_ID={array}", str(EXAMPLE / "merge.sbatch")]
    second = slurm(again, env, cwd=checkout).strip().split(";")[0]
    assert ended(victim, env, cluster)["JobState"] == "COMPLETED"
    second_merge = ended(second, env, cluster)
    log = (checkout / "logs" / f"policybench-merge-{second}.out").read_text()
    assert (second_merge["JobState"], second_merge["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert counts(checkout / "reports" / array / "merged") == unsharded
