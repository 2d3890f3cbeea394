"""Builders for the fabric inside one node: NVLink (switch, mesh, pairs, DGX-1 cube mesh) and the PCIe tree.

Every node has a PCIe tree, whatever its NVLink: GPUs (and NICs) behind PCIe switches ``n{k}.pcie{i}``,
switches on CPU sockets ``n{k}.cpu{s}``, sockets joined by the CPU interconnect. NVLink adds either one
``n{k}.nvswitch`` node (non-blocking: the GPU's port bandwidth is the limit) or direct GPU-GPU edges
carrying the links' bandwidth. Edge attributes: ``capacity_bytes_per_s`` (usable, per direction),
``latency_s`` (per hop) and ``kind`` (nvlink | pcie | cpu | net).
"""
from __future__ import annotations

import networkx as nx

from ..specs import ClusterSpec
from .links import (CPU_INTERCONNECT_BYTES_PER_S, PCIE_EFFICIENCY, SHM_EFFICIENCY, nvlink_efficiency,
                    nvlink_per_link_bytes_per_s, pcie_line_bytes_per_s)

#: DGX-1 (V100) hybrid cube mesh: (gpu, gpu, links). Two quads (0-3, 4-7), each GPU with 6 NVLink-2 links;
#: NVIDIA DGX-1 system architecture whitepaper (2017), figure 4 / `nvidia-smi topo -m` on DGX-1V.
CUBE_MESH_LINKS = ((0, 3, 2), (0, 4, 2), (1, 2, 2), (1, 5, 2), (2, 3, 2), (4, 7, 2), (5, 6, 2), (6, 7, 2),
                   (0, 1, 1), (0, 2, 1), (1, 3, 1), (2, 6, 1), (3, 7, 1), (4, 5, 1), (4, 6, 1), (5, 7, 1))


def link(g: nx.DiGraph, a: str, b: str, capacity: float, latency: float, kind: str) -> None:
    """A full-duplex link: two directed edges with the same per-direction capacity."""
    g.add_edge(a, b, capacity_bytes_per_s=capacity, latency_s=latency, kind=kind)
    g.add_edge(b, a, capacity_bytes_per_s=capacity, latency_s=latency, kind=kind)


def pcie_bandwidth(cluster: ClusterSpec) -> float:
    """GPU host-link line rate per direction."""
    gpu = cluster.gpu
    return cluster.intra_node.pcie_bandwidth_bytes_per_s or pcie_line_bytes_per_s(gpu.pcie_generation, gpu.pcie_lanes)


def intra_bandwidth(cluster: ClusterSpec) -> tuple[float, float]:
    """(line rate per GPU per direction, efficiency) of the intra-node fabric's main links."""
    intra, gpu = cluster.intra_node, cluster.gpu
    if intra.kind == "pcie":
        return intra.bandwidth_bytes_per_s or pcie_bandwidth(cluster), intra.efficiency or PCIE_EFFICIENCY
    rate = intra.bandwidth_bytes_per_s or gpu.nvlink_bandwidth_bytes_per_s
    if rate <= 0:
        raise ValueError(f"{gpu.name} has no NVLink; use intra_node.kind: pcie or give bandwidth_GBps")
    return rate, intra.efficiency or nvlink_efficiency(gpu.nvlink_generation)


def gpus_per_switch(cluster: ClusterSpec) -> int:
    """GPUs behind one PCIe switch (default: a socket's GPUs for PCIe cards, one NIC's GPUs for SXM)."""
    intra, n = cluster.intra_node, cluster.gpus_per_node
    per_socket = n // intra.cpu_sockets
    if intra.gpus_per_pcie_switch:
        return max(1, min(intra.gpus_per_pcie_switch, per_socket))
    if intra.kind in ("pcie", "nvlink_pairs"):
        return per_socket
    nics = cluster.inter_node.nics_per_node if cluster.inter_node else n
    return max(1, min(per_socket, n // max(1, min(nics, n))))


def _pcie_tree(g: nx.DiGraph, cluster: ClusterSpec, node: int, gpus: list[str]) -> None:
    intra = cluster.intra_node
    lat = intra.latency_s
    if intra.kind == "pcie":
        rate, eff = intra_bandwidth(cluster)
        gpu_link = rate * eff
    else:
        gpu_link = pcie_bandwidth(cluster) * PCIE_EFFICIENCY
    per_switch = gpus_per_switch(cluster)
    per_socket = len(gpus) // intra.cpu_sockets
    for i, gpu in enumerate(gpus):
        sw = f"n{node}.pcie{i // per_switch}"
        if intra.gpu_p2p:
            link(g, gpu, sw, gpu_link, lat / 2, "pcie")
        else:
            _staged(g, gpu, sw, gpu_link, cluster, lat)
        if i % per_switch == 0:  # the switch's uplink to its socket: one x16 of the same generation
            link(g, sw, f"n{node}.cpu{i // per_socket}", gpu_link, lat / 2, "pcie")
    cpu_bw = intra.cpu_interconnect_bandwidth_bytes_per_s or CPU_INTERCONNECT_BYTES_PER_S
    for s in range(1, intra.cpu_sockets):
        link(g, f"n{node}.cpu{s - 1}", f"n{node}.cpu{s}", cpu_bw, lat, "cpu")


def _staged(g: nx.DiGraph, gpu: str, switch: str, gpu_link: float, cluster: ClusterSpec, lat: float) -> None:
    """A GPU without peer-to-peer reaches the PCIe tree through host-memory staging: what it sends and what
    it receives both cross one staging edge ``{switch}.stage{rank}.in -> .out`` of ``SHM_EFFICIENCY`` x the
    PCIe line rate, so the two directions share that budget (sjeaugey: PCIe boxes are "bounded by what
    CPU/memory can deliver, in both directions at once")."""
    stage_in, stage_out = f"{switch}.stage{gpu[3:]}.in", f"{switch}.stage{gpu[3:]}.out"
    line = pcie_line_bytes_per_s(cluster.gpu.pcie_generation, cluster.gpu.pcie_lanes)
    if cluster.intra_node.kind == "pcie" and cluster.intra_node.bandwidth_bytes_per_s:
        line = cluster.intra_node.bandwidth_bytes_per_s
    elif cluster.intra_node.pcie_bandwidth_bytes_per_s:
        line = cluster.intra_node.pcie_bandwidth_bytes_per_s
    for a, b in ((gpu, stage_in), (switch, stage_in), (stage_out, gpu), (stage_out, switch)):
        g.add_edge(a, b, capacity_bytes_per_s=gpu_link, latency_s=lat / 4, kind="pcie")
    g.add_edge(stage_in, stage_out, capacity_bytes_per_s=min(gpu_link, SHM_EFFICIENCY * line), latency_s=0.0,
               kind="pcie")


def _nvlink(g: nx.DiGraph, cluster: ClusterSpec, node: int, gpus: list[str]) -> None:
    intra, gpu = cluster.intra_node, cluster.gpu
    rate, eff = intra_bandwidth(cluster)
    lat, n = intra.latency_s, len(gpus)
    per_link = nvlink_per_link_bytes_per_s(gpu.nvlink_generation, rate, gpu.nvlink_links)
    if intra.kind == "nvswitch":
        for name in gpus:
            link(g, name, f"n{node}.nvswitch", rate * eff, lat / 2, "nvlink")
    elif intra.kind == "nvlink_mesh":
        links = intra.nvlink_links_per_pair
        pair = links * per_link if links else rate / max(n - 1, 1)
        for i in range(n):
            for j in range(i + 1, n):
                link(g, gpus[i], gpus[j], pair * eff, lat, "nvlink")
    elif intra.kind == "nvlink_pairs":
        pair = intra.nvlink_links_per_pair * per_link if intra.nvlink_links_per_pair else rate
        for i in range(0, n, 2):
            link(g, gpus[i], gpus[i + 1], pair * eff, lat, "nvlink")
    elif intra.kind == "hybrid_cube_mesh":
        for a, b, count in CUBE_MESH_LINKS:
            link(g, gpus[a], gpus[b], count * per_link * eff, lat, "nvlink")


def add_node_fabric(g: nx.DiGraph, cluster: ClusterSpec, node: int) -> None:
    """GPUs ``gpu{rank}`` of ``node`` with their NVLink fabric and PCIe tree."""
    n = cluster.gpus_per_node
    gpus = [f"gpu{node * n + i}" for i in range(n)]
    g.add_nodes_from(gpus)
    _pcie_tree(g, cluster, node, gpus)
    if cluster.intra_node.kind != "pcie":
        _nvlink(g, cluster, node, gpus)
