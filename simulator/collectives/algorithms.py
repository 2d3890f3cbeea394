"""Collective calls -> flows: the detailed path, for the engine's fabric (where concurrent calls share links).

``lower_collective`` picks the same candidate as the closed form (``cost.estimate``) and expands each of
its phases into flows: every hop of every pipeline becomes one flow carrying its slice of the buffer
(divided by the protocol's wire efficiency) with a rate cap equal to its rate on the idle fabric. Alone on
the fabric every flow runs at its cap, so a call takes exactly the closed-form time; when other traffic
shares its links, max-min sharing slows it down.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..topology import Topology
from ..topology.routing import Edge
from .cost import COLLECTIVES, Estimate, Phase, estimate


@dataclass(frozen=True)
class Flow:
    """Bytes over a routed path. ``cap_bytes_per_s``: the flow's rate on an idle fabric (its channel's share)."""

    edges: tuple[Edge, ...]
    size_bytes: float
    cap_bytes_per_s: float = math.inf

    @property
    def src(self) -> int:
        return int(self.edges[0][0][3:]) if self.edges and self.edges[0][0].startswith("gpu") else -1

    @property
    def dst(self) -> int:
        return int(self.edges[-1][1][3:]) if self.edges and self.edges[-1][1].startswith("gpu") else -1


@dataclass(frozen=True)
class FlowPhase:
    latency_s: float
    flows: tuple[Flow, ...]


@dataclass(frozen=True)
class CollectivePlan:
    """Phases run one after the other: wait ``latency_s``, then move the flows."""

    estimate: Estimate
    phases: tuple[FlowPhase, ...]

    @property
    def latency_s(self) -> float:
        return sum(p.latency_s for p in self.phases)

    @property
    def flows(self) -> tuple[Flow, ...]:
        return tuple(f for p in self.phases for f in p.flows)

    @property
    def time_s(self) -> float:
        return self.estimate.time_s


def phase_flows(phase: Phase, size_bytes: float) -> tuple[Flow, ...]:
    """The flows of one phase. Hop rates scale by (protocol bandwidth / Simple channel-graph bandwidth)."""
    graph = phase.graph
    scale = phase.algbw_bytes_per_s / graph.algbw_bytes_per_s
    flows = []
    for pipe, rates, share in zip(graph.pipelines, graph.rates, graph.slices):
        for hop, rate in zip(pipe.hops, rates):
            if hop and share > 0:
                flows.append(Flow(hop, size_bytes * share * pipe.weight / phase.wire, rate * scale / phase.wire))
    return tuple(flows)


def lower_collective(topo: Topology, collective: str, group: tuple[int, ...], size_bytes: float,
                     algorithm: Optional[str] = None, protocol: Optional[str] = None) -> CollectivePlan:
    """The flows of one call on ``group`` (``size_bytes`` as in nccl-tests: the all-gather output, the
    reduce-scatter input, the per-rank all-to-all send buffer; ``group = (src, dst)`` for send_recv)."""
    est = estimate(topo, collective, tuple(group), size_bytes, algorithm, protocol)
    if est.candidate is None:
        return CollectivePlan(est, ())
    phases = tuple(FlowPhase(p.latency_s, phase_flows(p, size_bytes)) for p in est.candidate.phases)
    return CollectivePlan(est, phases)


__all__ = ["COLLECTIVES", "CollectivePlan", "Flow", "FlowPhase", "lower_collective"]
