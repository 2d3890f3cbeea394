"""Distributed-training planning simulator: step time, memory, MFU and cost of a parallel plan."""
from .api import program_for, simulate, simulate_files
from .errors import ConfigError, InfeasiblePlan, PredictorError, SimulatorError
from .loading import load_cluster, load_plan, load_workload
from .result import SimulationResult
from .specs import ClusterSpec, GpuSpec, PlanSpec, WorkloadSpec

__all__ = [
    "ClusterSpec", "ConfigError", "GpuSpec", "InfeasiblePlan", "PlanSpec", "PredictorError", "SimulationResult",
    "SimulatorError", "WorkloadSpec", "load_cluster", "load_plan", "load_workload", "program_for", "simulate",
    "simulate_files",
]
