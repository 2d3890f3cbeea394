"""Builders for the fabric between nodes: NICs into rail or leaf switches, leaves into a spine.

Rail-optimised (DGX SuperPOD): NIC i of every node goes to rail switch ``rail{i}``; same-rail traffic is one
switch hop, cross-rail traffic climbs to the ``spine``. Fat tree: the NICs of ``nodes_per_leaf`` nodes share
``leaf{j}``. A leaf's uplink carries its downlink total divided by the oversubscription. NICs sit on the PCIe
switch of the GPUs they serve (GPUDirect RDMA); with ``transport: socket`` they hang off the CPU socket,
since TCP stages every byte in host memory, and every byte a GPU moves between nodes passes its rank's
proxy thread: ``n{k}.proxy{rank}.in -> .out`` (``links.SOCKET_PROXY_*``), entered from the NIC's socket
(sends) or from the NIC (receives), so that a rank's sends and receives share one budget.
"""
from __future__ import annotations

import networkx as nx

from ..specs import ClusterSpec
from .links import PCIE_EFFICIENCY, SOCKET_PROXY_ONE_WAY_BYTES_PER_S, SOCKET_PROXY_TOTAL_BYTES_PER_S
from .nodes import gpus_per_switch, link, pcie_bandwidth


def nic_gpus(cluster: ClusterSpec, nic: int) -> list[int]:
    """Local indices of the GPUs NIC ``nic`` serves (NICs spread evenly; a GPU may have several NICs)."""
    g, nics = cluster.gpus_per_node, cluster.inter_node.nics_per_node
    if nics >= g:
        return [nic * g // nics]
    return [i for i in range(g) if i * nics // g == nic]


def nic_attachment(cluster: ClusterSpec, node: int, nic: int) -> str:
    """The graph node a NIC hangs off: its GPUs' PCIe switch, or the CPU socket for socket transport."""
    local = nic_gpus(cluster, nic)[0]
    if cluster.inter_node.transport == "socket":
        per_socket = cluster.gpus_per_node // cluster.intra_node.cpu_sockets
        return f"n{node}.cpu{local // per_socket}"
    return f"n{node}.pcie{local // gpus_per_switch(cluster)}"


def proxy(rank: int, node: int) -> tuple[str, str]:
    """The (entry, exit) graph nodes of rank ``rank``'s socket proxy thread."""
    return f"n{node}.proxy{rank}.in", f"n{node}.proxy{rank}.out"


def _add_proxies(g: nx.DiGraph, cluster: ClusterSpec, node: int, nic: str, cpu: str, host_cap: float) -> None:
    """Every GPU of ``node`` reaches ``nic`` (on socket ``cpu``) only through its own proxy."""
    for local in range(cluster.gpus_per_node):
        p_in, p_out = proxy(node * cluster.gpus_per_node + local, node)
        for a, b, cap, kind in ((cpu, p_in, SOCKET_PROXY_ONE_WAY_BYTES_PER_S, "cpu"),
                                (nic, p_in, SOCKET_PROXY_ONE_WAY_BYTES_PER_S, "cpu"),
                                (p_in, p_out, SOCKET_PROXY_TOTAL_BYTES_PER_S, "cpu"),
                                (p_out, nic, host_cap, "pcie"), (p_out, cpu, host_cap, "pcie")):
            g.add_edge(a, b, capacity_bytes_per_s=cap, latency_s=0.0, kind=kind)


def nic_capacity(cluster: ClusterSpec) -> float:
    inter = cluster.inter_node
    return inter.nic_bandwidth_bytes_per_s * inter.efficiency


def add_network(g: nx.DiGraph, cluster: ClusterSpec) -> None:
    inter = cluster.inter_node
    nic_cap = nic_capacity(cluster)
    host_cap = pcie_bandwidth(cluster) * PCIE_EFFICIENCY
    downlinks: dict[str, float] = {}
    for node in range(cluster.nodes):
        for i in range(inter.nics_per_node):
            nic = f"n{node}.nic{i}"
            if inter.transport == "socket":
                _add_proxies(g, cluster, node, nic, nic_attachment(cluster, node, i), host_cap)
            else:
                link(g, nic_attachment(cluster, node, i), nic, host_cap, 0.0, "pcie")
            leaf = f"rail{i}" if inter.topology == "rail_optimized" else f"leaf{node // inter.nodes_per_leaf}"
            link(g, nic, leaf, nic_cap, inter.latency_s / 2, "net")
            downlinks[leaf] = downlinks.get(leaf, 0.0) + nic_cap
    if len(downlinks) > 1:
        for leaf, down in downlinks.items():
            link(g, leaf, "spine", down / inter.oversubscription, 0.0, "net")
