"""ManiSkill3's other tabletop tasks, built of primitive shapes (no asset to download): PlugCharger,
PullCube, LiftPegUpright, PokeCube, PullCubeTool, RollBall, PlaceSphere, StackPyramid and the
two-robot TwoRobotPickCube and TwoRobotStackCube, on ManiSkill 3.0.1 (SAPIEN's CPU physics) in
ManiSkill's interpreter, from state, as ManiSkill's PPO baseline evaluates them
(`examples/baselines/ppo/ppo.py`'s evaluation env: its default control mode `pd_joint_delta_pos`,
the task's registered episode length, reconfigured each reset, terminations ignored, scored by
success_once). Rollout i is the episode of seed 1 + i. The two-robot tasks' actions are both
arms' 8 numbers, flattened as ppo.py flattens them. No expert ships for these (ManiSkill's motion
planners play `pd_joint_pos`)."""

from __future__ import annotations

from policybench.suites.maniskill import maniskill

LIFT_PEG_UPRIGHT = maniskill("lift_peg_upright")
PLACE_SPHERE = maniskill("place_sphere")
PLUG_CHARGER = maniskill("plug_charger")
POKE_CUBE = maniskill("poke_cube")
PULL_CUBE = maniskill("pull_cube")
PULL_CUBE_TOOL = maniskill("pull_cube_tool")
ROLL_BALL = maniskill("roll_ball")
STACK_PYRAMID = maniskill("stack_pyramid")
TWO_ROBOT_PICK_CUBE = maniskill("two_robot_pick_cube")
TWO_ROBOT_STACK_CUBE = maniskill("two_robot_stack_cube")
EVALS = (
    LIFT_PEG_UPRIGHT,
    PLACE_SPHERE,
    PLUG_CHARGER,
    POKE_CUBE,
    PULL_CUBE,
    PULL_CUBE_TOOL,
    ROLL_BALL,
    STACK_PYRAMID,
    TWO_ROBOT_PICK_CUBE,
    TWO_ROBOT_STACK_CUBE,
)
