"""Envs the tests run in an interpreter of their own (evals.py declares them). The env modules
import nothing of policybench: the env server imports them where only numpy and msgpack are."""
