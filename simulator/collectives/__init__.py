"""NCCL-style collectives: channel graphs per algorithm (``pipelines``), NCCL's tuner constants
(``tuning``), the closed form and algorithm/protocol selection (``cost``), flows for the engine's fabric
(``algorithms``) and the ``simulator collective`` command (``commands``)."""
from .algorithms import COLLECTIVES, CollectivePlan, Flow, lower_collective
from .cost import BUSBW_FACTOR, Estimate, estimate

__all__ = ["BUSBW_FACTOR", "COLLECTIVES", "CollectivePlan", "Estimate", "Flow", "estimate", "lower_collective"]
