"""Builders for the fabric between nodes: NICs into rail or leaf switches, leaves into a spine.

Rail-optimised (DGX SuperPOD): NIC i of every node goes to rail switch ``rail{i}``; same-rail traffic is one
switch hop, cross-rail traffic climbs to the ``spine``. Fat tree: the NICs of ``nodes_per_leaf`` nodes share
``leaf{j}``. A leaf's uplink carries its downlink total divided by the oversubscription. NICs sit on the PCIe
switch of the GPUs they serve (GPUDirect RDMA); with ``transport: socket`` they hang off the CPU socket,
since TCP stages every byte in host memory.
"""
from __future__ import annotations

import networkx as nx

from ..specs import ClusterSpec
from .links import PCIE_EFFICIENCY
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
            link(g, nic_attachment(cluster, node, i), nic, host_cap, 0.0, "pcie")
            leaf = f"rail{i}" if inter.topology == "rail_optimized" else f"leaf{node // inter.nodes_per_leaf}"
            link(g, nic, leaf, nic_cap, inter.latency_s / 2, "net")
            downlinks[leaf] = downlinks.get(leaf, 0.0) + nic_cap
    if len(downlinks) > 1:
        for leaf, down in downlinks.items():
            link(g, leaf, "spine", down / inter.oversubscription, 0.0, "net")
