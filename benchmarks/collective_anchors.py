"""Published NCCL measurements the collective model is checked against (shared/docs/network-model.md section 3):
the issue's bus-bandwidth anchors, the HGX H200 mid-size curve and further held-out systems. Nothing here is
fitted; ``collective_accuracy.py`` prints the tables."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.collectives.cost import estimate  # noqa: E402
from simulator.loading import cluster_from_mapping  # noqa: E402
from simulator.topology import build_topology  # noqa: E402

MIB = 2**20

ANCHORS = [  # (label, cluster, gpus, nodes, algorithm, measured busbw GB/s, source)
    ("DGX A100 8 GPUs, ring", "dgx-a100", 8, 1, "ring", 232.5, "stas00 234.9, nccl-tests#175 232.5"),
    ("DGX H100 8 GPUs, ring", "dgx-h100", 8, 1, "ring", 367.5, "nccl#1455 365-370"),
    ("DGX H100 8 GPUs, NVLS", "dgx-h100", 8, 1, "nvls", 480.0, "nccl-tests#212, nccl#1455"),
    ("2x DGX A100, 8x HDR, ring", "dgx-a100-2node", 16, 2, "ring", 192.0, "AddyLaddy in nccl#1576"),
    ("2x DGX H100, 8x NDR, ring", "dgx-h100-2node", 16, 2, "ring", 380.0, "nccl-tests#290: 370-390"),
    ("DGX B200 8 GPUs, ring", "dgx-b200", 8, 1, "ring", 680.0, "stas00 673-682 (not a target)"),
    ("DGX B200 8 GPUs, NVLS", "dgx-b200", 8, 1, "nvls", 838.0, "stas00, nccl#2140 (not a target)"),
    ("NDR NIC, 2-node send/recv", "dgx-h100-2node", 2, 2, "p2p", 47.5, "nccl-tests#267: 46-49 (not a target)"),
]
ANCHOR_SIZE = 8 * 2**30

MID_SIZE_CURVE = [  # (MiB, measured busbw GB/s): stas00's HGX H200 nccl-tests all-reduce, 8 GPUs (network-model.md
    (16, 220.0), (64, 347.0), (256, 436.0), (1024, 464.0)]  # 3.1); held out: nothing is fitted on it


def _hgx(gpu: str, nics: int, gbps: int, gpus_per_node: int = 8) -> dict:
    """An NVSwitch box with ``nics`` InfiniBand NICs of ``gbps`` per node on a rail-optimised fabric."""
    return {"name": f"{gpu} x{gpus_per_node}, {nics}x {gbps}G IB", "gpu": gpu, "nodes": 4,
            "gpus_per_node": gpus_per_node, "intra_node": {"kind": "nvswitch", "latency_us": 1.0},
            "inter_node": {"nics_per_node": nics, "nic_bandwidth_Gbps": gbps, "latency_us": 5.0}}


def _bridged_pair(gpu: str) -> dict:
    """Two PCIe cards joined by NVLink bridges (the catalog's bridge links for ``gpu``)."""
    return {"name": f"{gpu} x2, NVLink bridge", "gpu": gpu, "nodes": 1, "gpus_per_node": 2,
            "intra_node": {"kind": "nvlink_pairs", "latency_us": 1.0}}


#: Systems of network-model.md 3.1 and 3.3 that no constant was fitted on, all-reduce bus bandwidth:
#: (label, cluster mapping, nodes, GPUs per node used, size bytes, measured GB/s, source). The clusters are
#: written from the sources' descriptions; the model picks its own algorithm. Not here because the model was
#: fitted on them: nccl#1455's DGX H100 rings at 2-8 GPUs (NVLink 4's efficiency, and no pipeline fill on
#: Hopper: ``topology/links.py``) and stas00's HGX B200 NVLS at 6-8 GPUs (Blackwell's NVLS efficiency).
#: nccl#1455's NVLS at 5-7 GPUs is held out (Hopper's NVLS efficiency is NCCL's tuning.cc value).
HELD_OUT = [
    ("DGX H100, 5 GPUs", _hgx("H100-SXM5-80GB", 8, 400), 1, 5, 8 * 2**30, 420.0, "nccl#1455 (NVLS)"),
    ("DGX H100, 6 GPUs", _hgx("H100-SXM5-80GB", 8, 400), 1, 6, 8 * 2**30, 440.0, "nccl#1455 (NVLS)"),
    ("DGX H100, 7 GPUs", _hgx("H100-SXM5-80GB", 8, 400), 1, 7, 8 * 2**30, 460.0, "nccl#1455 (NVLS)"),
    ("H100 PCIe x2, NVLink bridge", _bridged_pair("H100-PCIE-80GB"), 1, 2, 8 * 2**30, 116.0,
     "nccl#1161 (size not given)"),
    ("HGX A100, 4x HDR per node, 2 nodes", _hgx("A100-SXM4-80GB", 4, 200), 2, 8, 8 * 2**30, 91.0,
     "nccl-tests#100 (100 theoretical)"),
    ("A100, 4x HDR per node, 3 nodes", _hgx("A100-SXM4-80GB", 4, 200), 3, 8, 8 * 2**30, 84.8,
     "nccl-tests#119: 84.8 average, 96 peak"),
    ("H100, 2 nodes x 1 GPU, 4x NDR, 32 MB", _hgx("H100-SXM5-80GB", 4, 400, 1), 2, 1, 32 * MIB, 41.0,
     "nccl-tests#232: ~41 (one GPU cannot drive 4 NICs)"),
]


def anchors(topo_for) -> list[dict]:
    rows = []
    for label, name, gpus, nodes, algo, measured, source in ANCHORS:
        topo = topo_for(name, nodes)
        op = "send_recv" if algo == "p2p" else "all_reduce"
        est = estimate(topo, op, _group(topo, nodes, gpus // nodes), ANCHOR_SIZE, algorithm=algo)
        rows.append(_row(label, measured, est, source))
    return rows


def mid_size_curve(topo_for) -> list[dict]:
    """The model's all-reduce bus bandwidth on DGX H100 (same NVLink 4 / NVSwitch as HGX H200) at mid sizes."""
    topo = topo_for("dgx-h100", 1)
    rows = []
    for mib, measured in MID_SIZE_CURVE:
        est = estimate(topo, "all_reduce", tuple(range(8)), mib * MIB)
        rows.append(dict(_row(f"{mib} MiB", measured, est, "stas00"), size_MiB=mib, algorithm=est.algorithm))
    return rows


def held_out() -> list[dict]:
    rows = []
    for label, mapping, nodes, ppn, size, measured, source in HELD_OUT:
        topo = build_topology(cluster_from_mapping(mapping, "benchmarks/collective_anchors.py", nodes=nodes))
        est = estimate(topo, "all_reduce", _group(topo, nodes, ppn), size)
        rows.append(dict(_row(label, measured, est, source), algorithm=f"{est.algorithm} {est.protocol}",
                         size_MiB=size // MIB))
    return rows


def _group(topo, nodes: int, per_node: int) -> tuple[int, ...]:
    """The first ``per_node`` GPUs of each of the first ``nodes`` nodes."""
    g = topo.cluster.gpus_per_node
    return tuple(k * g + i for k in range(nodes) for i in range(per_node))


def _row(label: str, measured: float, est, source: str) -> dict:
    model = est.busbw_bytes_per_s / 1e9
    return dict(anchor=label, measured_GBps=measured, model_GBps=round(model, 1),
                error_pct=round(100 * (model - measured) / measured, 1), source=source)

