"""A person in the loop of an attended rollout: stages its scene and gives its verdict. The run's
operator desk (`desk`) takes the rollouts' requests; a terminal prompt or a web page answers."""

from policybench.operator.base import Ask, Operator, OperatorError, Request

__all__ = ["Ask", "Operator", "OperatorError", "Request"]
