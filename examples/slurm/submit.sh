#!/bin/bash
# Runs a sharded evaluation on SLURM: the shard array, then the merge once every shard has
# ended. From the repository root:
#   examples/slurm/submit.sh ws://gpu-node:8000                    # shard.sbatch as written
#   examples/slurm/submit.sh ws://gpu-node:8000 --array=0-3 --cpus-per-task=4 --mem=16G
# Options after the URL go to the shard array's sbatch and override shard.sbatch's #SBATCH lines.
set -euo pipefail

export POLICY_URL="${1:?usage: examples/slurm/submit.sh POLICY_URL [SBATCH_OPTION...]}"
shift
here="$(dirname "$0")"
mkdir -p logs
array="$(sbatch --parsable "$@" "$here/shard.sbatch")"
array="${array%%;*}"  # --parsable prints "id" or "id;cluster"
merge="$(sbatch --parsable --dependency="afterany:$array" --export="ALL,ARRAY_JOB_ID=$array" \
    "$here/merge.sbatch")"
merge="${merge%%;*}"
echo "shards: job $array; merge: job $merge; merged report: reports/$array/merged/index.html"
