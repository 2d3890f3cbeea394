"""Result types of a simulation: plain data consumed by reports, search and the CLI."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from .engine.trace import Trace
from .report.metrics import RankBreakdown
from .workload.memory import MemoryEstimate


@dataclass(frozen=True)
class StageMemory:
    stage: int
    estimate: MemoryEstimate


@dataclass(frozen=True)
class SimulationResult:
    cluster: str
    workload: str
    gpu: str
    num_gpus: int
    plan: dict
    predictor: str
    step_time_s: float
    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    tokens_per_step: int
    model_flops_per_step: float
    peak_flops_per_gpu: float
    memory: tuple[StageMemory, ...]
    gpu_memory_bytes: float
    price_per_gpu_hour_usd: Optional[float]
    ranks: tuple[RankBreakdown, ...]
    events: int
    trace: Optional[Trace] = field(default=None, compare=False, repr=False)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: useful FLOPs / (step time x GPUs x dense peak of the plan's dtype)."""
        return self.model_flops_per_step / (self.step_time_s * self.num_gpus * self.peak_flops_per_gpu)

    @property
    def peak_memory_bytes(self) -> float:
        return max(m.estimate.total_bytes for m in self.memory)

    @property
    def fits_in_memory(self) -> bool:
        return self.peak_memory_bytes <= self.gpu_memory_bytes

    @property
    def cost_per_step_usd(self) -> Optional[float]:
        if self.price_per_gpu_hour_usd is None:
            return None
        return self.price_per_gpu_hour_usd * self.num_gpus * self.step_time_s / 3600.0

    @property
    def cost_per_million_tokens_usd(self) -> Optional[float]:
        cost = self.cost_per_step_usd
        return None if cost is None else cost / self.tokens_per_step * 1e6

    def to_json(self) -> dict:
        """JSON-ready dict; ``step_time_s`` first."""
        return {
            "step_time_s": self.step_time_s,
            "compute_s": self.compute_s,
            "exposed_comm_s": self.exposed_comm_s,
            "bubble_s": self.bubble_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "model_flops_per_step": self.model_flops_per_step,
            "memory": {
                "peak_bytes_per_gpu": self.peak_memory_bytes,
                "gpu_memory_bytes": self.gpu_memory_bytes,
                "fits": self.fits_in_memory,
                "per_stage": [dict(asdict(m.estimate), stage=m.stage, total_bytes=m.estimate.total_bytes)
                              for m in self.memory],
            },
            "cost_per_step_usd": self.cost_per_step_usd,
            "cost_per_million_tokens_usd": self.cost_per_million_tokens_usd,
            "cluster": self.cluster,
            "workload": self.workload,
            "gpu": self.gpu,
            "num_gpus": self.num_gpus,
            "plan": self.plan,
            "predictor": self.predictor,
            "ranks": [asdict(r) for r in self.ranks],
            "events": self.events,
        }
