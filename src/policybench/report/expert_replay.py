"""The Eval's expert replayed on a rollout's kept observations, when a diagnosis reads it: its
action at each observation the policy saw, added to the rollout's trace file (so the rollout's
page plots it, and a later report reads it instead of replaying again). What it costs: the
expert's own cost a step, over the unsolved sampled rollouts of the Evals and tasks diagnosed,
paid once, after the run (record/shadow.py keeps the observations while it runs)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.policy.base import Model
from policybench.record.rollout_trace import EXPERT_ACTION, KEPT_OBSERVATIONS, add_expert_actions
from policybench.record.shadow import read_kept, replay
from policybench.run.layout import inside

# What makes the expert of the Eval a kept file names (its `expert` entry: the Eval's name, its
# `module:attribute`, the folder of its module), or raises LookupError: a run's own plugin gives
# one that imports only what the run itself ran; a report of a folder given none replays nothing.
ExpertOf = Callable[[Mapping[str, Any]], Model]


def with_expert(
    run_dir: Path, trace_name: str, trace: dict[str, Any], expert_of: ExpertOf
) -> dict[str, Any]:
    """`trace` (its arrays read, the file `trace_name` in `run_dir`) with the expert's actions,
    replayed and written into its file where it kept observations for them and has none yet;
    as it was otherwise. Why a replay could not be made is said in the file's left-out names."""
    kept_name = trace.get(KEPT_OBSERVATIONS)
    if EXPERT_ACTION in trace["arrays"] or not isinstance(kept_name, str):
        return trace
    path = inside(run_dir, trace_name)
    try:
        kept = read_kept(inside(run_dir, kept_name))
        actions, why_not = replay(expert_of(kept.expert), kept)
    except (ValueError, LookupError) as error:
        actions, why_not = None, str(error)
    try:
        add_expert_actions(path, actions, why_not)
    except (OSError, ValueError) as error:  # a folder it cannot write: the replay still counts
        print(f"policybench: cannot add the expert's actions to {path}: {error}", file=sys.stderr)
    if actions is None or actions.shape[0] != trace[keys.STEPS]:
        return trace
    return {**trace, "arrays": {**trace["arrays"], EXPERT_ACTION: actions.T}}
