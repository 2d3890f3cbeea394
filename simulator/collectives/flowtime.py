"""Time concurrent collective calls with the flow model: their phases' flows share the engine's fabric.

Used by ``simulator collective --model flow``, the agreement test (closed form vs flows) and the
contention examples (e.g. a pipeline send overlapping a data-parallel all-reduce on the same NICs).
"""
from __future__ import annotations

from typing import Sequence

from ..topology import Topology
from .algorithms import CollectivePlan


def flow_times_s(topo: Topology, plans: Sequence[CollectivePlan], starts_s: Sequence[float] | None = None) -> list[float]:
    """Completion time of each call (from its own start) when all run together on one fabric."""
    import simpy

    from ..engine.fabric import Fabric

    env = simpy.Environment()
    capacity = {(u, v): d["capacity_bytes_per_s"] for u, v, d in topo.graph.edges(data=True)}
    fabric = Fabric(env, capacity)
    ends = [0.0] * len(plans)
    starts = list(starts_s or [0.0] * len(plans))

    def call(i: int, plan: CollectivePlan):
        yield env.timeout(starts[i])
        for phase in plan.phases:
            if phase.latency_s > 0:
                yield env.timeout(phase.latency_s)
            flows = [(f.edges, f.size_bytes, f.cap_bytes_per_s) for f in phase.flows]
            if flows:
                yield fabric.transfer_all(flows)
        ends[i] = env.now - starts[i]

    for i, plan in enumerate(plans):
        env.process(call(i, plan))
    env.run()
    return ends


def flow_time_s(topo: Topology, plans: Sequence[CollectivePlan]) -> float:
    """When the last of ``plans`` (started together) finishes."""
    return max(flow_times_s(topo, plans), default=0.0)
