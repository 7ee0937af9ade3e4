#!/bin/bash
# Runs a sharded evaluation on SLURM: the shard array, then the merge once every shard has
# ended. From the repository root: examples/slurm/submit.sh ws://gpu-node:8000
set -euo pipefail

export POLICY_URL="${1:?usage: examples/slurm/submit.sh POLICY_URL}"
here="$(dirname "$0")"
mkdir -p logs
array="$(sbatch --parsable "$here/shard.sbatch")"
array="${array%%;*}"  # --parsable prints "id" or "id;cluster"
sbatch --dependency="afterany:$array" --export="ALL,ARRAY_JOB_ID=$array" "$here/merge.sbatch"
echo "shards: job $array; merged report: reports/$array/merged/index.html"
