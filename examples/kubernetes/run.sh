#!/bin/bash
# Runs a sharded evaluation on Kubernetes: the Indexed Job of shards, then the merge once every
# shard's pod has ended (a shard with rollout errors ends its index as failed: merge anyway).
#   examples/kubernetes/run.sh            # applies shards.yaml, waits, applies merge.yaml
#   examples/kubernetes/run.sh --dry-run  # prints the objects it would create, in order
set -euo pipefail

here="$(dirname "$0")"
dry_run=false
[ "${1:-}" = "--dry-run" ] && dry_run=true

create() { # applies manifest $1, or prints it under --dry-run
    if $dry_run; then
        echo "---"
        grep -v '^---$' "$1"
    else
        kubectl apply -f "$1"
    fi
}

ended() { # waits until job $1 is Complete or Failed
    $dry_run && return 0
    until kubectl get "job/$1" -o jsonpath='{.status.conditions[?(@.status=="True")].type}' |
        grep -qwE 'Complete|Failed'; do
        sleep 15
    done
}

create "$here/shards.yaml"
ended policybench-shards
create "$here/merge.yaml"
ended policybench-merge
$dry_run || kubectl logs job/policybench-merge
