"""Routes between GPUs: a path of directed edges over the topology graph, chosen the way NCCL does.

Inside a node (NCCL paths.cc): an NVLink path if one exists, either direct, through the NVSwitch, or
through one intermediate GPU ("NVB", NCCL stages the data in that GPU's memory); otherwise the PCIe tree.
With GPU peer-to-peer the PCIe path turns at the lowest common switch; without it (``gpu_p2p: false``)
it goes up to the CPU and back down, through host memory (NCCL's SHM transport) and each GPU's staging
edge (see ``nodes._staged``). Between nodes: source
GPU -> its NIC -> shortest path over the switch fabric -> destination NIC -> destination GPU. Ties break
by node insertion order (deterministic).
"""
from __future__ import annotations

import math
from typing import Iterable, Optional

import networkx as nx

from .graph import Topology
from .network import nic_attachment, proxy

Edge = tuple[str, str]


def _path_edges(nodes: list[str]) -> tuple[Edge, ...]:
    return tuple(zip(nodes[:-1], nodes[1:]))


def _inverse_capacity(u: str, v: str, data: dict) -> float:
    """Edge weight: fewest hops first (NCCL prefers a direct link to a path through another GPU), then the
    fastest links."""
    return 1.0 + 1e6 / data["capacity_bytes_per_s"]


def _nvlink_path(topo: Topology, src: str, dst: str, via: Optional[frozenset]) -> Optional[list[str]]:
    g = topo.graph

    def node_ok(v: str) -> bool:
        if v in (src, dst) or v.endswith(".nvswitch"):
            return True
        return v.startswith("gpu") and (via is None or v in via)

    sub = nx.subgraph_view(g, filter_node=node_ok, filter_edge=lambda u, v: g.edges[u, v]["kind"] == "nvlink")
    try:
        path = nx.shortest_path(sub, src, dst, weight=_inverse_capacity)
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return None
    gpus_between = [v for v in path[1:-1] if v.startswith("gpu")]
    return path if len(gpus_between) <= 1 else None  # NCCL allows one intermediate GPU (PATH_NVB)


def _host_path(topo: Topology, node: int, src: str, dst: str) -> list[str]:
    """Shortest path over node ``node``'s PCIe switches and CPU sockets (no other GPU, no other NIC)."""
    prefix = (f"n{node}.pcie", f"n{node}.cpu")
    sub = nx.subgraph_view(topo.graph, filter_node=lambda v: v in (src, dst) or v.startswith(prefix),
                           filter_edge=lambda u, v: topo.graph.edges[u, v]["kind"] in ("pcie", "cpu"))
    return nx.shortest_path(sub, src, dst, weight=_inverse_capacity)


def _pcie_path(topo: Topology, node: int, src: str, dst: str) -> list[str]:
    if topo.cluster.intra_node.gpu_p2p:
        return _host_path(topo, node, src, dst)
    up = _host_path(topo, node, src, f"n{node}.cpu{_socket(topo, src)}")
    return up + _host_path(topo, node, up[-1], dst)[1:]


def _socket(topo: Topology, gpu: str) -> int:
    c = topo.cluster
    return (int(gpu[3:]) % c.gpus_per_node) // (c.gpus_per_node // c.intra_node.cpu_sockets)


def _leaf(topo: Topology, nic: str) -> str:
    return next(v for v in topo.graph.successors(nic) if v.startswith(("rail", "leaf")))


def _network(topo: Topology, src_nic: str, dst_nic: str) -> list[str]:
    """NIC -> its leaf (rail) switch -> the spine if the other NIC hangs off another leaf -> NIC. The
    two-tier fabric's only shortest paths, found directly: a graph search over thousands of NICs is slow."""
    a, b = _leaf(topo, src_nic), _leaf(topo, dst_nic)
    return [src_nic, a, dst_nic] if a == b else [src_nic, a, "spine", b, dst_nic]


def _memo(topo: Topology, key: tuple, compute) -> tuple[Edge, ...]:
    cached = topo._routes.get(key)
    if cached is None:
        cached = topo._routes[key] = _path_edges(compute())
    return cached


def _nic_host(topo: Topology, node: int, nic: str) -> Optional[str]:
    """The CPU socket a socket-transport NIC of ``node`` hangs off (None for RDMA NICs)."""
    if topo.cluster.inter_node.transport != "socket":
        return None
    return nic_attachment(topo.cluster, node, topo.nic_index(nic))


def to_nic(topo: Topology, rank: int, nic: str) -> tuple[Edge, ...]:
    """GPU ``rank`` -> NIC ``nic`` of its own node over PCIe (for socket transport: up to the CPU, then
    through the rank's proxy)."""
    def compute() -> list[str]:
        node = topo.node_of(rank)
        cpu = _nic_host(topo, node, nic)
        if cpu is None:
            return _host_path(topo, node, f"gpu{rank}", nic)
        return _host_path(topo, node, f"gpu{rank}", cpu) + [*proxy(rank, node), nic]
    return _memo(topo, ("to_nic", rank, nic), compute)


def from_nic(topo: Topology, nic: str, rank: int) -> tuple[Edge, ...]:
    """NIC ``nic`` -> GPU ``rank`` of the same node (not simply ``to_nic`` reversed: staging edges are one-way)."""
    def compute() -> list[str]:
        node = topo.node_of(rank)
        cpu = _nic_host(topo, node, nic)
        if cpu is None:
            return _host_path(topo, node, nic, f"gpu{rank}")
        return [nic, *proxy(rank, node)] + _host_path(topo, node, cpu, f"gpu{rank}")
    return _memo(topo, ("from_nic", nic, rank), compute)


def between_nics(topo: Topology, src_nic: str, dst_nic: str) -> tuple[Edge, ...]:
    return _memo(topo, ("nics", src_nic, dst_nic), lambda: _network(topo, src_nic, dst_nic))


def route(topo: Topology, src_rank: int, dst_rank: int, via: Optional[Iterable[int]] = None) -> tuple[Edge, ...]:
    """Directed edges from GPU ``src_rank`` to GPU ``dst_rank`` (empty for the same GPU). ``via`` limits the
    GPUs an NVLink path may pass through (NCCL only stages through GPUs of the communicator)."""
    via_set = None if via is None else frozenset(f"gpu{r}" for r in via)
    key = (src_rank, dst_rank, via_set)
    cached = topo._routes.get(key)
    if cached is not None:
        return cached
    src, dst = f"gpu{src_rank}", f"gpu{dst_rank}"
    node = topo.node_of(src_rank)
    if src_rank == dst_rank:
        edges: tuple[Edge, ...] = ()
    elif node == topo.node_of(dst_rank):
        sw = f"n{node}.nvswitch"
        if topo.graph.has_edge(src, sw):  # a non-blocking switch: always the NVLink shortest path
            edges = ((src, sw), (sw, dst))
        else:
            edges = _path_edges(_nvlink_path(topo, src, dst, via_set) or _pcie_path(topo, node, src, dst))
    else:
        a, b = topo.nic_of(src_rank), topo.nic_of(dst_rank)
        edges = to_nic(topo, src_rank, a) + between_nics(topo, a, b) + from_nic(topo, b, dst_rank)
    topo._routes[key] = edges
    return edges


def route_latency_s(topo: Topology, edges: tuple[Edge, ...]) -> float:
    return sum(topo.graph.edges[e]["latency_s"] for e in edges)


def bottleneck_bytes_per_s(topo: Topology, edges: tuple[Edge, ...]) -> float:
    return min((topo.graph.edges[e]["capacity_bytes_per_s"] for e in edges), default=math.inf)


def path_kind(topo: Topology, edges: tuple[Edge, ...]) -> str:
    """NCCL's path class for latency tables: ``net`` (crosses a NIC), ``nvlink`` or ``pcie``."""
    kinds = {topo.graph.edges[e]["kind"] for e in edges}
    if "net" in kinds:
        return "net"
    return "nvlink" if kinds == {"nvlink"} else "pcie"
