"""The Kubernetes example without a cluster: its manifests validate, strictly, against the
Kubernetes API schemas of the oldest version it supports and of the newest the validator knows
(offline), and `run.sh --dry-run` prints exactly the objects it would create, in order. That
they run is shown by tests/test_shards.py, which plays each pod's command as the kubelet would;
no Kubernetes API server runs here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

kubernetes_validate = pytest.importorskip("kubernetes_validate")
yaml = pytest.importorskip("yaml")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
MANIFESTS = ("shards.yaml", "merge.yaml")  # in the order run.sh creates them
OLDEST = "1.29.0"  # shards.yaml's per-index retries need 1.29 (its header says so)


@pytest.mark.parametrize("version", [OLDEST, kubernetes_validate.latest_version()])
@pytest.mark.parametrize("manifest", MANIFESTS)
def test_each_manifest_is_a_valid_object_of_the_kubernetes_api(manifest, version):
    (document,) = yaml.safe_load_all((EXAMPLE / manifest).read_text())
    kubernetes_validate.validate(document, version, strict=True)


def test_a_typo_in_a_manifest_fails_validation():
    (document,) = yaml.safe_load_all((EXAMPLE / "shards.yaml").read_text())
    document["spec"]["backofLimitPerIndex"] = document["spec"].pop("backoffLimitPerIndex")
    with pytest.raises(kubernetes_validate.ValidationError, match="backofLimitPerIndex"):
        kubernetes_validate.validate(document, OLDEST, strict=True)


def test_the_dry_run_prints_exactly_the_objects_run_sh_creates():
    done = subprocess.run(
        ["bash", str(EXAMPLE / "run.sh"), "--dry-run"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    printed = [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]
    expected = [yaml.safe_load((EXAMPLE / name).read_text()) for name in MANIFESTS]
    assert printed == expected
    assert [(o["kind"], o["metadata"]["name"]) for o in printed] == [
        ("Job", "policybench-shards"),
        ("Job", "policybench-merge"),
    ]
