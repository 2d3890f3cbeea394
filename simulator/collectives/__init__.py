"""NCCL-style collectives: algorithms that turn a collective call into flows over the topology."""
from .algorithms import COLLECTIVES, CollectivePlan, Flow, lower_collective

__all__ = ["COLLECTIVES", "CollectivePlan", "Flow", "lower_collective"]
