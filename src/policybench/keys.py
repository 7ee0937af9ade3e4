"""Every name that is recorded in an Episode or shared between suites and policies, spelled once.

This is a leaf module: it imports nothing from policybench, so anything may import it.
"""

# Shared observation keys (what a World hands a policy, before any codec).
STATE = "state"
IMAGE = "image"
WRIST_IMAGE = "wrist_image"

# What a model request carries in a run with latency (in the observation a model's source gets,
# and on the wire): the delay d of this call in control steps (the previous chunk plays on for
# d steps before this one arrives), and the actions of the current chunk still to play, `[n, D]`
# in the model's own action space (the real-time chunking prefix; `[0, 0]` before any chunk).
# Named as LeRobot's `predict_action_chunk` names them.
INFERENCE_DELAY = "inference_delay"
ACTION_PREFIX = "prev_chunk_left_over"

# Statics: what an Episode records about the rollout it ran.
EVAL = "eval"
TASK = "task"
INSTRUCTION = "instruction"
ROLLOUT_INDEX = "rollout_index"
ROLLOUT_COUNT = "rollout_count"
SCENE = "scene"
SEED = "seed"
POLICY = "policy"
POLICY_NAME = "name"
INFERENCE_LATENCY = "inference_latency"
CHUNK_ANCHOR = "chunk_anchor"
# The execution horizon s: control steps from one model call to the next, a call's delay
# included (None: a new chunk is asked for when the current one is played out).
EXECUTE_STEPS = "execute_steps"
# The digest of the latency profile a run drew its latencies from (only in such runs).
LATENCY_PROFILE = "latency_profile"
# The first chunk was computed before the clock started (only where it was).
WARM_START = "warm_start"
CONTROL_HZ = "control_hz"
TIMEOUT_S = "timeout_s"
STOP_ON_SUCCESS = "stop_on_success"
HOLD = "hold"
EVAL_SETTINGS = "eval_settings"
PACKAGES = "packages"
# How a policy's model sees the env: its codec's name and steps (in the policy's description).
CODEC = "codec"
CODEC_STEPS = "codec_steps"

# Outcome and timing of an Episode.
OUTCOME = "outcome"
REASON = "reason"
STEPS = "steps"
SIM_S = "sim_s"
WALL_S = "wall_s"
SUCCESS_STEP = "success_step"
# Whether the env said whether the task was achieved (a success key in its step info) at least
# once in the rollout; None when the rollout took no step.
SUCCESS_REPORTED = "success_reported"
SUCCESS_FROM = "success_from"  # a wrapped loop's own success rule (wrap(success=)), by name
MODEL_CALLS = "model_calls"
INFER_MS_MEAN = "infer_ms_mean"
INFER_MS_MAX = "infer_ms_max"
# Real-time figures of a rollout in a run with latency (absent without): the simulated latency
# charged to each call (ms, in call order), its mean in control steps, its 50th/95th/99th
# percentiles (ms); the share of control steps taken while a newer call was in flight (played
# from an older chunk, or held, during a delay; the wait for the first chunk aside), and the
# rate of the other steps, those played from the newest chunk (per simulated second).
CALL_LATENCY_MS = "call_latency_ms"
DELAY_STEPS_MEAN = "delay_steps_mean"
LATENCY_MS_P50 = "latency_ms_p50"
LATENCY_MS_P95 = "latency_ms_p95"
LATENCY_MS_P99 = "latency_ms_p99"
STALE_ACTION_SHARE = "stale_action_share"
FRESH_ACTION_HZ = "fresh_action_hz"
# With --execute-steps S: the model calls whose delay exceeded S control steps (a drawn or
# measured latency), each waited for by the next call.
CALLS_PAST_HORIZON = "calls_past_horizon"
# Sum and maximum of the env's per-step rewards (as lerobot-eval names them).
SUM_REWARD = "sum_reward"
MAX_REWARD = "max_reward"
NODEID = "nodeid"
# In an A/B run (two or more policies): the arm a rollout ran under (its label, or its letter
# under --blind), and how its scene was given that one arm (`--assign balanced`; absent when
# every scene ran under each arm).
ARM = "arm"
ASSIGNMENT = "assignment"
# Where and how a rollout ran: the process (xdist worker id, or "main"), that process's peak
# resident memory so far, and how many envs it had built so far (the env cache's work).
WORKER = "worker"
# The earlier attempts of a rollout that was run again after an infrastructure error (a server
# gone, a worker crashed): why each ended. The record itself is the last attempt.
RETRIED = "retried"
PEAK_RSS_MB = "peak_rss_mb"
ENVS_BUILT = "envs_built"
# Where a rollout's video lies, relative to its run directory, or why it has none.
VIDEO = "video"
VIDEO_MISSING = "video_missing"
# Where a rollout's compact trace (actions, rewards, model calls per step) lies, relative to its
# run directory: what its report page plots. Absent without steps or with --no-rollout-traces.
ROLLOUT_TRACE = "rollout_trace"

# Per-step trace fields.
TIME_NS = "time_ns"
COMMAND = "command"
REWARD = "reward"
SUCCESS = "success"
OBSERVATION = "obs"
WAYPOINT = "waypoint"

# Sections of a canonical trace (a golden file).
TRACE_ABOUT = "recorded_with"
TRACE_STATICS = "statics"
TRACE_RESULT = "result"
TRACE_CALLS = "calls"
TRACE_STEPS = "trace"

# An operator's verdict on a rollout, given from its recording (`policybench score`), one line of
# the run directory's verdicts.jsonl: which rollout (its item id), the verdict (`success`,
# `failure`, `unsure`), an optional note, who gave it and when (ISO 8601, UTC).
VERDICT_ROLLOUT = "rollout_id"
VERDICT = "operator_verdict"
VERDICT_NOTE = "note"
SCORER = "scorer"
SCORED_AT = "scored_at"

# An attended rollout's record (an Eval with `attended`): the scene fields a person staged (name
# -> value), the verdict its operator gave at its end (the fields of a verdict above; absent when
# the Eval is not judged or the rollout ended in error), and the wall seconds the rollout waited
# on its operator (no simulated time is charged for them).
STAGED = "staged"
OPERATOR_VERDICT = "attended_verdict"
OPERATOR_WAIT_S = "operator_wait_s"

# What a run's env proxy gives `policybench env serve` at connect (in its hello): the server's
# API key. Never recorded.
ENV_API_KEY = "api_key"

# Run settings (run.json's `settings`) of merged, resumed, sharded and wrapped runs.
# What a merged run's run.json adds to its settings: its parts, and what merging found.
PARTS, MERGE = "merged_from", "merge"
# The run setting listing every distinct command line that recorded into a run (the loops of a
# wrapped run, policybench.wrap: one per arm, say); `command` stays the one that started it.
COMMANDS = "commands"
# The run setting a wrapped loop's run.json holds to tell it from any other run of its name (a
# random token, kept by its copies): two machines' `runs/loop` are two runs, a copy is the same.
RUN_UID = "run_uid"
# The run setting listing a run's resumes (--resume), each's command, host and start, in order.
RESUMED = "resumed"
# The run setting naming the rollouts a run selected (its items after -k, --suite and --shard).
SELECTED = "selected"
# The run setting a shard's run.json records (`K/N (where it came from)`); a shard's run id ends
# with its label, e.g. 20261101-120000-shard2of4.
SHARD = "shard"
# The run setting of a run under --decide: its sequential test as given (`0.8:0.05,0.05,0.1`).
DECIDE = "decide"
# The run setting of a run under `--decide baseline`: the baseline run it was decided against
# (`run`, its directory) and, of an A/B baseline, the arm (`arm`).
DECIDE_BASELINE = "decide_baseline"
DECIDE_ORDER = "decide_order"  # run.json: the rule --decide's rollouts are decided in
# A rollout's trajectory specs: each spec's name to its margin, deciding step, time and values.
SPECS = "specs"
# A perturbed rollout's axis and level (`{"axis": "camera_pose", "level": 0.05}`; --perturb).
PERTURBATION = "perturbation"
# The trajectory specs an Eval's rollouts were held to (their reprs): part of the protocol.
TRAJECTORY_SPECS = "trajectory_specs"
# The published results a run is compared with: the run setting --published NAME records, and
# the field a policy's describe() may name its checkpoint's published entry by.
PUBLISHED = "published"
