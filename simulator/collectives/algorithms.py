"""Collective algorithms: a collective call on a group of ranks -> a latency plus concurrent flows.

Ring algorithms follow NCCL (network-model.md section 2.2): all-reduce is a reduce-scatter followed by
an all-gather around a ring, 2(n-1) steps, each rank sending 2(n-1)/n of the buffer to its successor;
all-gather and reduce-scatter take n-1 steps and send (n-1)/n of the full buffer. A ring spanning
several nodes is split into channels, one per NIC the group can use on a node, each carrying an equal
slice and entering/leaving nodes at different GPUs (so every NIC is busy). The latency term is the
number of steps times the slowest hop of the ring. Bandwidth is not computed here: the flows go to
the fabric, which shares links between everything in flight.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..topology import Topology
from ..topology.routing import route, route_latency_s


@dataclass(frozen=True)
class Flow:
    src: int
    dst: int
    size_bytes: float


@dataclass(frozen=True)
class CollectivePlan:
    latency_s: float
    flows: tuple[Flow, ...]


def _by_node(topo: Topology, group: tuple[int, ...]) -> list[list[int]]:
    nodes: dict[int, list[int]] = {}
    for r in group:
        nodes.setdefault(topo.node_of(r), []).append(r)
    return [sorted(v) for _, v in sorted(nodes.items())]


def ring_orders(topo: Topology, group: tuple[int, ...]) -> list[list[int]]:
    """One ring per channel: nodes in order, each node's members rotated by the channel index."""
    per_node = _by_node(topo, group)
    if len(per_node) == 1:
        return [per_node[0]]
    inter = topo.cluster.inter_node
    channels = max(1, min(inter.nics_per_node, min(len(m) for m in per_node)))
    rings = []
    for c in range(channels):
        ring = []
        for members in per_node:
            k = c % len(members)
            ring.extend(members[k:] + members[:k])
        rings.append(ring)
    return rings


def _ring(topo: Topology, group: tuple[int, ...], size_bytes: float, steps: int, fraction: float) -> CollectivePlan:
    n = len(group)
    if n <= 1 or size_bytes <= 0:
        return CollectivePlan(0.0, ())
    rings = ring_orders(topo, group)
    flows, hop = [], 0.0
    for ring in rings:
        for i, src in enumerate(ring):
            dst = ring[(i + 1) % n]
            flows.append(Flow(src, dst, fraction * size_bytes / len(rings)))
            hop = max(hop, route_latency_s(topo, route(topo, src, dst)))
    return CollectivePlan(steps * hop, tuple(flows))


def all_reduce(topo: Topology, group: tuple[int, ...], size_bytes: float) -> CollectivePlan:
    n = len(group)
    return _ring(topo, group, size_bytes, 2 * (n - 1), 2 * (n - 1) / n)


def all_gather(topo: Topology, group: tuple[int, ...], size_bytes: float) -> CollectivePlan:
    """``size_bytes`` is the gathered (output) size, as in nccl-tests."""
    n = len(group)
    return _ring(topo, group, size_bytes, n - 1, (n - 1) / n)


def reduce_scatter(topo: Topology, group: tuple[int, ...], size_bytes: float) -> CollectivePlan:
    """``size_bytes`` is the full (input) size, as in nccl-tests."""
    n = len(group)
    return _ring(topo, group, size_bytes, n - 1, (n - 1) / n)


def broadcast(topo: Topology, group: tuple[int, ...], size_bytes: float) -> CollectivePlan:
    """Pipelined chain from ``group[0]``: every hop carries the whole buffer concurrently."""
    if len(group) <= 1:
        return CollectivePlan(0.0, ())
    ring = ring_orders(topo, group)[0]
    start = ring.index(group[0])
    chain = ring[start:] + ring[:start]
    flows = tuple(Flow(a, b, size_bytes) for a, b in zip(chain, chain[1:]))
    lat = sum(route_latency_s(topo, route(topo, f.src, f.dst)) for f in flows)
    return CollectivePlan(lat, flows)


def all_to_all(topo: Topology, group: tuple[int, ...], size_bytes: float) -> CollectivePlan:
    """Each rank sends ``size_bytes / n`` to every other rank, all at once."""
    n = len(group)
    if n <= 1:
        return CollectivePlan(0.0, ())
    flows = tuple(Flow(a, b, size_bytes / n) for a in group for b in group if a != b)
    lat = max(route_latency_s(topo, route(topo, f.src, f.dst)) for f in flows)
    return CollectivePlan(lat, flows)


def send_recv(topo: Topology, group: tuple[int, ...], size_bytes: float) -> CollectivePlan:
    """Point-to-point: ``group = (src, dst)``."""
    src, dst = group
    return CollectivePlan(route_latency_s(topo, route(topo, src, dst)), (Flow(src, dst, size_bytes),))


COLLECTIVES: dict[str, Callable[[Topology, tuple[int, ...], float], CollectivePlan]] = {
    "all_reduce": all_reduce,
    "all_gather": all_gather,
    "reduce_scatter": reduce_scatter,
    "broadcast": broadcast,
    "all_to_all": all_to_all,
    "send_recv": send_recv,
}


def lower_collective(topo: Topology, collective: str, group: tuple[int, ...], size_bytes: float) -> CollectivePlan:
    return COLLECTIVES[collective](topo, tuple(group), size_bytes)
