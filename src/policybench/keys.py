"""Every name that is recorded in an Episode or shared between suites and policies, spelled once.

This is a leaf module: it imports nothing from policybench, so anything may import it.
"""

# Shared observation keys (what a World hands a policy, before any codec).
STATE = "state"
IMAGE = "image"
WRIST_IMAGE = "wrist_image"

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
MODEL_CALLS = "model_calls"
INFER_MS_MEAN = "infer_ms_mean"
INFER_MS_MAX = "infer_ms_max"
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
