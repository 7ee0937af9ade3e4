"""MyoSuite's own loop on one task, run in MyoSuite's interpreter by tests/test_myosuite.py:
`myosuite.utils.gym.make(TASK)`, `reset(seed=SEED)`, then the actions in ACTIONS.npy stepped one
by one; saves each observation, reward, end and `solved`.

Usage: python myosuite_reference.py TASK SEED ACTIONS.npy OUT.npz"""

import sys

import numpy as np
from myosuite.utils import gym

task, seed, actions_file, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
env = gym.make(task)
first, _ = env.reset(seed=seed)
observations, rewards, ends, solved = [first], [], [], []
for action in np.load(actions_file):
    obs, reward, terminated, truncated, info = env.step(action)
    observations.append(obs)
    rewards.append(reward)
    ends.append((terminated, truncated))
    solved.append(bool(info["solved"]))
np.savez(out, observations=np.stack(observations), rewards=np.array(rewards),
         ends=np.array(ends), solved=np.array(solved))  # fmt: skip
