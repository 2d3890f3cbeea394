"""Distributed-training planning simulator: step time, memory, MFU and cost of a parallel plan.

The public names load on first use (PEP 562), so ``simulator collect`` runs on a GPU machine that has
only torch and numpy: importing a submodule does not pull in pydantic, simpy or networkx.
"""
from importlib import import_module

_EXPORTS = {
    "program_for": "api", "simulate": "api", "simulate_files": "api",
    "ConfigError": "errors", "InfeasiblePlan": "errors", "PredictorError": "errors", "SimulatorError": "errors",
    "load_cluster": "loading", "load_plan": "loading", "load_workload": "loading",
    "SimulationResult": "result",
    "ClusterSpec": "specs", "GpuSpec": "specs", "PlanSpec": "specs", "WorkloadSpec": "specs",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
