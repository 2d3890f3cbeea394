"""Composition root: the only module that wires loading, lowering, predictor, topology and engine."""
from __future__ import annotations

from typing import Optional

from .engine import run
from .errors import ConfigError
from .parallel import check_plan, lower
from .predictor import get_predictor
from .predictor.base import Predictor
from .report.metrics import breakdowns, critical
from .result import SimulationResult, StageMemory
from .specs import ClusterSpec, PlanSpec, WorkloadSpec
from .topology import build_topology
from .workload import memory
from .workload.transformer import make_shard

DEFAULT_PREDICTOR = "roofline"


def default_predictor() -> str:
    """The tile MLP when its weights are shipped, else roofline."""
    from .predictor import available_predictors

    return "mlp" if "mlp" in available_predictors() else DEFAULT_PREDICTOR


def _predictor(predictor: str | Predictor) -> Predictor:
    return get_predictor(predictor) if isinstance(predictor, str) else predictor


def simulate(cluster: ClusterSpec, workload: WorkloadSpec, plan: PlanSpec,
             predictor: str | Predictor = DEFAULT_PREDICTOR, collapse: bool = True,
             keep_trace: bool = False) -> SimulationResult:
    """Simulate one training step. Raises InfeasiblePlan / ConfigError / PredictorError for bad input."""
    check_plan(plan, cluster, workload)
    pred = _predictor(predictor)
    try:
        topo = build_topology(cluster)
    except ValueError as exc:
        raise ConfigError(cluster.name, "intra_node", cluster.intra_node.kind, str(exc)) from None
    program = lower(plan, workload, cluster, pred, collapse=collapse)
    trace = run(program, topo)
    rows = breakdowns(trace)
    top = critical(rows)
    flash = make_shard(workload, plan).flash
    mem = tuple(StageMemory(s, memory.stage_memory(workload, plan, s, flash)) for s in range(plan.pp))
    return SimulationResult(
        cluster=cluster.name, workload=workload.name, gpu=cluster.gpu.name, num_gpus=plan.num_gpus,
        plan=plan.model_dump(), predictor=pred.name, step_time_s=trace.end_s, compute_s=top.compute_s,
        exposed_comm_s=top.exposed_comm_s, bubble_s=top.idle_s,
        tokens_per_step=plan.global_batch_size * workload.seq_len,
        model_flops_per_step=memory.model_flops_per_step(workload, plan.global_batch_size),
        peak_flops_per_gpu=cluster.gpu.peak_flops_per_s[plan.dtype], memory=mem,
        gpu_memory_bytes=cluster.gpu.memory_bytes, price_per_gpu_hour_usd=cluster.price_per_gpu_hour_usd,
        ranks=tuple(rows), events=trace.events, trace=trace if keep_trace else None,
    )


def program_for(cluster: ClusterSpec, workload: WorkloadSpec, plan: PlanSpec,
                predictor: str | Predictor = DEFAULT_PREDICTOR, collapse: bool = True):
    """The lowered Program (for debugging and golden tests)."""
    check_plan(plan, cluster, workload)
    return lower(plan, workload, cluster, _predictor(predictor), collapse=collapse)


def simulate_files(cluster: str, workload: str, plan: dict, predictor: str = DEFAULT_PREDICTOR,
                   nodes: Optional[int] = None, seq_len: Optional[int] = None, keep_trace: bool = False) -> SimulationResult:
    """``simulate`` from names/paths and raw plan values (what the CLI calls)."""
    from .loading import load_cluster, load_plan, load_workload

    return simulate(load_cluster(cluster, nodes), load_workload(workload, seq_len), load_plan(plan), predictor,
                    keep_trace=keep_trace)
