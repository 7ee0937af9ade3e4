"""A person in the loop of an attended rollout: stages its scene and gives its verdict. The run's
operator desk (`desk`) takes the rollouts' requests; a terminal prompt or a web page answers."""

from policybench.operator.base import Judgement, Operator, OperatorError, Request, Verdict

__all__ = ["Judgement", "Operator", "OperatorError", "Request", "Verdict"]
