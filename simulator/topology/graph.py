"""Builds the directed graph of a cluster: one node per GPU, switch, host bridge and NIC.

Every physical link is two directed edges, each with ``capacity_bytes_per_s`` (usable bandwidth per
direction = line rate x efficiency) and ``latency_s``. Node names: ``gpu{rank}``, ``n{node}.nvswitch``,
``n{node}.host`` (PCIe root/switch), ``n{node}.nic{i}``, ``rail{i}`` / ``leaf{j}``, ``spine``.

Default efficiencies (the fraction of line rate NCCL-style transfers reach), from NCCL's own
effective link constants (src/graph/topo.h, digested in shared/docs/network-model.md section 4):
NVLink 20 GB/s of 25 per link (0.80; 20.6 on NVLink 4: 0.824; 40.1 of 50 on NVLink 5: 0.802);
PCIe x16 24 of 31.5 GB/s (0.76); NICs HDR 23.5 of 25 GB/s (0.94).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from ..specs import ClusterSpec

NVLINK_EFFICIENCY = {1: 0.80, 2: 0.80, 3: 0.80, 4: 0.824, 5: 0.802}
PCIE_EFFICIENCY = 0.76
#: PCIe x1 line rate per direction by generation (bytes/s), after encoding overhead.
PCIE_LANE_BYTES_PER_S = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}


@dataclass
class Topology:
    """The cluster graph plus the lookups routing needs. Routes are memoised per GPU pair."""

    cluster: ClusterSpec
    graph: nx.DiGraph
    _routes: dict = field(default_factory=dict, repr=False)

    def node_of(self, rank: int) -> int:
        return rank // self.cluster.gpus_per_node

    def nic_of(self, rank: int) -> str:
        g, nics = self.cluster.gpus_per_node, self.cluster.inter_node.nics_per_node
        local = rank % g
        return f"n{self.node_of(rank)}.nic{local * nics // g}"


def pcie_bandwidth(cluster: ClusterSpec) -> float:
    """GPU host-link line rate per direction."""
    gpu = cluster.gpu
    return cluster.intra_node.pcie_bandwidth_bytes_per_s or PCIE_LANE_BYTES_PER_S[gpu.pcie_generation] * gpu.pcie_lanes


def intra_bandwidth(cluster: ClusterSpec) -> tuple[float, float]:
    """(line rate per GPU per direction, efficiency) of the intra-node fabric."""
    intra, gpu = cluster.intra_node, cluster.gpu
    if intra.kind == "pcie":
        return intra.bandwidth_bytes_per_s or pcie_bandwidth(cluster), intra.efficiency or PCIE_EFFICIENCY
    rate = intra.bandwidth_bytes_per_s or gpu.nvlink_bandwidth_bytes_per_s
    if rate <= 0:
        raise ValueError(f"{gpu.name} has no NVLink; use intra_node.kind: pcie or give bandwidth_GBps")
    return rate, intra.efficiency or NVLINK_EFFICIENCY.get(gpu.nvlink_generation, 0.80)


def _link(g: nx.DiGraph, a: str, b: str, capacity: float, latency: float, kind: str) -> None:
    """A full-duplex link: two directed edges. ``kind`` is nvlink | pcie | network (routing prefers NVLink)."""
    g.add_edge(a, b, capacity_bytes_per_s=capacity, latency_s=latency, kind=kind)
    g.add_edge(b, a, capacity_bytes_per_s=capacity, latency_s=latency, kind=kind)


def _add_node_fabric(g: nx.DiGraph, cluster: ClusterSpec, node: int) -> None:
    intra = cluster.intra_node
    n = cluster.gpus_per_node
    gpus = [f"gpu{node * n + i}" for i in range(n)]
    host = f"n{node}.host"
    pcie = pcie_bandwidth(cluster) * PCIE_EFFICIENCY
    lat = intra.latency_s
    if intra.kind != "pcie":  # NVLink parts still reach the host (and NICs) over PCIe
        for gpu in gpus:
            _link(g, gpu, host, pcie, lat / 2, "pcie")
    rate, eff = intra_bandwidth(cluster)
    if intra.kind == "nvswitch":
        for gpu in gpus:
            _link(g, gpu, f"n{node}.nvswitch", rate * eff, lat / 2, "nvlink")
    elif intra.kind == "nvlink_mesh":
        per_pair = rate * eff / max(n - 1, 1)
        for i in range(n):
            for j in range(i + 1, n):
                _link(g, gpus[i], gpus[j], per_pair, lat, "nvlink")
    elif intra.kind == "nvlink_pairs":
        for i in range(0, n, 2):
            _link(g, gpus[i], gpus[i + 1], rate * eff, lat, "nvlink")
    else:  # pcie: every GPU on one PCIe switch / root complex
        for gpu in gpus:
            _link(g, gpu, host, rate * eff, lat / 2, "pcie")
    if n == 1:
        g.add_node(gpus[0])


def _add_network(g: nx.DiGraph, cluster: ClusterSpec) -> None:
    inter = cluster.inter_node
    n = cluster.gpus_per_node
    nic_cap = inter.nic_bandwidth_bytes_per_s * inter.efficiency
    gpu_nic_cap = pcie_bandwidth(cluster) * PCIE_EFFICIENCY
    downlinks: dict[str, float] = {}
    for node in range(cluster.nodes):
        for i in range(inter.nics_per_node):
            nic = f"n{node}.nic{i}"
            for local in range(n):
                if local * inter.nics_per_node // n == i:
                    _link(g, f"gpu{node * n + local}", nic, gpu_nic_cap, 0.0, "pcie")
            leaf = f"rail{i}" if inter.topology == "rail_optimized" else f"leaf{node // inter.nodes_per_leaf}"
            _link(g, nic, leaf, nic_cap, inter.latency_s / 2, "network")
            downlinks[leaf] = downlinks.get(leaf, 0.0) + nic_cap
    if len(downlinks) > 1:
        for leaf, down in downlinks.items():
            _link(g, leaf, "spine", down / inter.oversubscription, 0.0, "network")


def build_topology(cluster: ClusterSpec) -> Topology:
    """The cluster's graph. Raises ValueError for a fabric the GPU cannot have (no NVLink)."""
    g = nx.DiGraph()
    for node in range(cluster.nodes):
        _add_node_fabric(g, cluster, node)
    if cluster.nodes > 1:
        _add_network(g, cluster)
    return Topology(cluster, g)
