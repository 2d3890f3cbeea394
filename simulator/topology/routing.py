"""Routes between GPUs: a path of directed edges over the topology graph.

Inside a node: NVLink whenever it connects the two GPUs (as NCCL's P2P transport does), else the
fewest PCIe hops. Between nodes: source GPU ->
its NIC -> shortest path over the switch fabric -> destination NIC -> destination GPU, so inter-node
traffic never detours through other GPUs. Ties break by node insertion order (deterministic).
"""
from __future__ import annotations

import networkx as nx

from .graph import Topology

Edge = tuple[str, str]


def _path_edges(nodes: list[str]) -> tuple[Edge, ...]:
    return tuple(zip(nodes[:-1], nodes[1:]))


#: Hop cost by link kind: any number of NVLink hops beats one PCIe hop.
HOP_COST = {"nvlink": 1.0, "pcie": 1000.0, "network": 1000.0}


def _hop_cost(u: str, v: str, data: dict) -> float:
    return HOP_COST[data["kind"]]


def _intra(topo: Topology, src: str, dst: str) -> list[str]:
    allowed = lambda v: not (".nic" in v)  # noqa: E731 -- NICs are not a way between two local GPUs
    sub = nx.subgraph_view(topo.graph, filter_node=allowed)
    return nx.shortest_path(sub, src, dst, weight=_hop_cost)


def _network(topo: Topology, src_nic: str, dst_nic: str) -> list[str]:
    allowed = lambda v: not v.startswith("gpu") and not v.endswith((".host", ".nvswitch"))  # noqa: E731
    sub = nx.subgraph_view(topo.graph, filter_node=allowed)
    return nx.shortest_path(sub, src_nic, dst_nic, weight=_hop_cost)


def route(topo: Topology, src_rank: int, dst_rank: int) -> tuple[Edge, ...]:
    """Directed edges from GPU ``src_rank`` to GPU ``dst_rank`` (empty for the same GPU)."""
    key = (src_rank, dst_rank)
    cached = topo._routes.get(key)
    if cached is not None:
        return cached
    src, dst = f"gpu{src_rank}", f"gpu{dst_rank}"
    if src_rank == dst_rank:
        edges: tuple[Edge, ...] = ()
    elif topo.node_of(src_rank) == topo.node_of(dst_rank):
        edges = _path_edges(_intra(topo, src, dst))
    else:
        a, b = topo.nic_of(src_rank), topo.nic_of(dst_rank)
        edges = ((src, a),) + _path_edges(_network(topo, a, b)) + ((b, dst),)
    topo._routes[key] = edges
    return edges


def route_latency_s(topo: Topology, edges: tuple[Edge, ...]) -> float:
    return sum(topo.graph.edges[e]["latency_s"] for e in edges)
