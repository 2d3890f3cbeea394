"""Builds the directed graph of a cluster: one node per GPU, switch, CPU socket and NIC.

Every physical link is two directed edges, each with ``capacity_bytes_per_s`` (usable bandwidth per
direction = line rate x efficiency), ``latency_s`` and ``kind``. Node names: ``gpu{rank}``,
``n{node}.nvswitch``, ``n{node}.pcie{i}`` (PCIe switches), ``n{node}.cpu{s}`` (sockets / root complexes),
``n{node}.nic{i}``, ``rail{i}`` / ``leaf{j}``, ``spine``; with socket transport ``n{node}.proxy{rank}.in`` /
``.out`` (a GPU's proxy thread between its CPU and the NIC). The builders live in ``nodes`` (inside a node)
and ``network`` (between nodes); link efficiencies and their sources in ``links``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from ..specs import ClusterSpec
from .links import NVLINK_EFFICIENCY, PCIE_EFFICIENCY, PCIE_LANE_BYTES_PER_S  # noqa: F401 (re-exported)
from .network import add_network, nic_gpus
from .nodes import add_node_fabric, intra_bandwidth, pcie_bandwidth  # noqa: F401 (re-exported)


@dataclass
class Topology:
    """The cluster graph plus the lookups routing needs. Routes and collective channel graphs are
    memoised here (``_routes``, ``cache``) since they depend only on the graph."""

    cluster: ClusterSpec
    graph: nx.DiGraph
    _routes: dict = field(default_factory=dict, repr=False)
    cache: dict = field(default_factory=dict, repr=False)

    def node_of(self, rank: int) -> int:
        return rank // self.cluster.gpus_per_node

    def local(self, rank: int) -> int:
        return rank % self.cluster.gpus_per_node

    def nics_of(self, rank: int) -> list[str]:
        """The NICs serving GPU ``rank`` (several when a node has more NICs than GPUs)."""
        inter = self.cluster.inter_node
        if inter is None:
            return []
        local, node = self.local(rank), self.node_of(rank)
        return [f"n{node}.nic{i}" for i in range(inter.nics_per_node) if local in nic_gpus(self.cluster, i)]

    def nic_of(self, rank: int) -> str:
        return self.nics_of(rank)[0]

    def nic_index(self, nic: str) -> int:
        return int(nic.rsplit("nic", 1)[1])


def build_topology(cluster: ClusterSpec) -> Topology:
    """The cluster's graph. Raises ValueError for a fabric the GPU cannot have (no NVLink)."""
    g = nx.DiGraph()
    for node in range(cluster.nodes):
        add_node_fabric(g, cluster, node)
    if cluster.nodes > 1:
        add_network(g, cluster)
    return Topology(cluster, g)
