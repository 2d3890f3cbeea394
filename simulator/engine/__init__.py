"""SimPy engine: runs a Program (per-rank compute and comm tasks) over a topology."""
from .program import CommTask, ComputeTask, Program
from .runner import run
from .trace import Interval, Trace

__all__ = ["CommTask", "ComputeTask", "Interval", "Program", "Trace", "run"]
