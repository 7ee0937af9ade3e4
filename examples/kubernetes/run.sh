#!/bin/bash
# Runs a sharded evaluation on Kubernetes: the Indexed Job of shards, then the merge once every
# shard's pod has ended (a shard with rollout errors ends its index as failed: merge anyway).
set -euo pipefail

here="$(dirname "$0")"

ended() { # waits until job $1 is Complete or Failed
    until kubectl get "job/$1" -o jsonpath='{.status.conditions[?(@.status=="True")].type}' |
        grep -qwE 'Complete|Failed'; do
        sleep 15
    done
}

kubectl apply -f "$here/shards.yaml"
ended policybench-shards
kubectl apply -f "$here/merge.yaml"
ended policybench-merge
kubectl logs job/policybench-merge
