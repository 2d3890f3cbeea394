"""NCCL's tuning constants and latency formulas (src/graph/tuning.cc, NCCL 2.30), as digested in
shared/docs/network-model.md section 2.4. Latencies are NCCL's microseconds for a fabric whose per-hop
latency is the reference (1 us inside a node, 5 us between nodes); a cluster with other ``latency_us``
values scales them proportionally, so a zero-latency fabric has zero-latency collectives.

Tried and not kept (stop 44): on a slower fabric, NCCL's network step plus only the extra wire latency (20 us
TCP: 17 + 15 us per Simple step) instead of the whole step scaled (17 x 4 = 68 us), and the proxy overhead on
intra-node steps unscaled. Vidur's 2-node TCP DGX A100 with one GPU per node fits it (a 2-rank all-reduce from
0.5 MiB: measured 71 us + S / 5.9 GB/s, the model's Simple 162 us + S / 5.8 GB/s; below 1 MiB 33.8 -> 15.7 %,
4 GPUs 13.6 -> 7.6 %), but its 8- and 16-GPU groups, already too fast, got faster (16 GPUs from 1 MiB 27.0 ->
36.5 %): that system's MAPE went 19.0 -> 19.3 % below 1 MiB and 13.5 -> 16.2 % from 1 MiB.
"""
from __future__ import annotations

import math

PROTOCOLS = ("LL", "LL128", "Simple")
REFERENCE_INTRA_LATENCY_S = 1e-6
REFERENCE_INTER_LATENCY_S = 5e-6

#: base latency (us) per algorithm and protocol (tuning.cc baseLat)
BASE_LATENCY_US = {
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
}
#: per-hop hardware latency (us) per link class, algorithm and protocol (tuning.cc hwLat)
HOP_LATENCY_US = {
    "nvlink": {"ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}, "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
               "nvls": {"Simple": 25.0}},
    "pcie": {"ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}, "tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}},
    "net": {"ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}, "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}},
}
#: send/recv of at most this many bytes run LL, larger ones Simple (NCCL_P2P_LL_THRESHOLD, enqueue.cc)
P2P_LL_THRESHOLD_BYTES = 16384
#: network proxy "post" overhead per step (us), x3 for Simple (NCCL_NET_OVERHEAD, Intel CPU default)
NET_OVERHEAD_US = 1.0

#: payload fraction of the wire: LL sends 4 B of data per 8 B store; LL128 120 of 128 B (model: 0.92)
WIRE_EFFICIENCY = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
#: What an LL128 ring really sustains, as a fraction of the Simple protocol's payload rate; NCCL's tuner
#: believes 0.92 (its 120/128 payload) and selects with that. The difference is the SMs' flag-polled 128-byte
#: stores, not the wire. Fitted (0.60-0.70 in steps) on vTrain's DGX A100 nccl-tests, where NCCL runs LL128
#: between 4 and 22 MiB at 5-8 GPUs (measured slope at 7-8 GPUs: 160 GB/s bus bandwidth, Simple's 228):
#: 1-10 MiB MAPE 12.3 -> 6.7 %. The data it was not fitted on moves with it: vTrain's DGX-1 V100 1-10 MiB
#: 13.6 -> 8.5 %, Vidur's DGX A100 >= 1 MiB 11.5 -> 10.1 %. Trees keep NCCL's LL128 factors (no measured
#: LL128 tree); Hopper's LL128 (a higher per-channel cap in tuning.cc) has no mid-size ring data here.
LL128_RING_SUSTAINED = 0.64
#: LL bus bandwidth cap (bytes/s): single node per architecture, multi-node (2 nodes, more) on Intel CPUs
LL_MAX_BUSBW_SINGLE = {"pascal": 39e9, "volta": 39e9, "turing": 39e9, "ampere": 87.7e9, "ada": 87.7e9,
                       "hopper": 141e9, "blackwell": 282e9}
LL_MAX_BUSBW_MULTI = (39e9, 20.4e9)
#: tree bandwidth factors relative to Simple (tuning.cc): Simple x0.92; LL /3.8; LL128 x7/9 (one node) or
#: x120/128 (multi-node) of the x0.92 figure
TREE_SIMPLE = 0.92
TREE_LL = 1 / 3.8
TREE_LL128 = {True: 7 / 9, False: 120 / 128}
#: tuning.cc's treeCorrectionFactor: the tuner rates a tree all-reduce of S bytes at this fraction of its
#: bandwidth, indexed by floor(log2(S / 64)) (64 B .. 512 MiB; 1.0 from 512 MiB on). It only steers the
#: choice: Aceso's 4-GPU chain boxes switch from ring to tree speed exactly where it rises (RTX 3090 between
#: 126 and 128 MiB, 0.8 -> 0.9; V100 within 64-128 MiB, 0.7 -> 0.8), and so do the model's, although its
#: RTX 3090 ring and chain rates are off (algorithm bandwidth 3.7 / 4.7 GB/s against a measured 3.2 / 6.3).
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0,) * 11 + (.8,) + (.7,) * 11,
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
#: tuning.cc converts a tree's bus bandwidth to algorithm bandwidth with a ratio of 0.5 (rings: n / (2(n-1)))
TREE_ALGBW_RATIO = 0.5
#: Simple-protocol calls through an NVSwitch take longer than tuning.cc's latency table says: a cost per call
#: and one per step (each step's flag and fence round trip through the switch); LL/LL128 calls do not (Vidur's
#: small DGX A100 all-reduces). The excess over NCCL's ring latency grows with the group: vTrain's DGX A100
#: nccl-tests at 4-64 MiB, 29 us at 2 GPUs to 43 us at 8, Vidur's DGX A100 all-reduce 34-67 us from 2 to 8;
#: direct NVLink shows none (vTrain's DGX-1: within +-10 us), the bridged A100 PCIe pair 9-14 us. Fitted on
#: those two sources (stop 34, grid over both constants: mean MAPE >= 1 MiB of the two 4.4 %, where one
#: per-call 35 us gave 5.3 %); NVLS pays a step per peer in each of its two phases, as a ring does. The held-out
#: stas00 HGX H200 NVLS curve (16 MiB-1 GiB) sits 47-121 us above NCCL's 25 us. NCCL's table only has to rank
#: candidates, so a cost common to a protocol's calls through a switch is not in it; the tuner below selects
#: without it.
NVSWITCH_SIMPLE_CALL_US = 20.0
NVSWITCH_SIMPLE_STEP_US = 3.0
#: NVLS: fraction of the GPU's usable NVLink bandwidth the switch reduction reaches (tuning.cc nvlsEfficiency
#: 0.85 on Hopper; 0.80 on Blackwell from HGX B200 NVLS 778-838 GB/s at 6-8 GPUs vs ring 680, stas00)
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.80}


def ll_max_busbw(architecture: str, nodes: int) -> float:
    if nodes <= 1:
        return LL_MAX_BUSBW_SINGLE.get(architecture, 39e9)
    return LL_MAX_BUSBW_MULTI[0] if nodes == 2 else LL_MAX_BUSBW_MULTI[1]


def tree_correction(protocol: str, size_bytes: float) -> float:
    """The factor NCCL's tuner applies to a tree all-reduce's bandwidth for a call of ``size_bytes``."""
    log_size = (int(size_bytes) >> 6).bit_length() - 1
    table = TREE_CORRECTION[protocol]
    return table[log_size] if 0 <= log_size < len(table) else 1.0


def ll128_allowed(architecture: str, intra_kind: str, nodes: int) -> bool:
    """LL128 needs 128-byte store atomicity: NVLink inside the node (Volta and later); across nodes only
    on Hopper and later (enqueue.cc / init.cc defaults)."""
    if intra_kind != "nvlink" or architecture == "pascal":
        return False
    return nodes == 1 or architecture in ("hopper", "blackwell")


def p2p_protocol(size_bytes: float) -> str:
    return "LL" if size_bytes <= P2P_LL_THRESHOLD_BYTES else "Simple"


def hop_latency_us(kind: str, protocol: str) -> float:
    """tuning.cc's per-hop latency of a ring step over a ``kind`` link ("nvlink" | "pcie" | "net")."""
    return _hop(kind, "ring", protocol)


def _hop(kind: str, algorithm: str, protocol: str) -> float:
    table = HOP_LATENCY_US[kind]
    return table.get(algorithm, table["ring"])[protocol]


def _net_overhead_us(protocol: str) -> float:
    return NET_OVERHEAD_US * (3 if protocol == "Simple" else 1)


def ring_latency_s(protocol: str, steps: int, inter_steps: int, intra_kind: str, ppn: int,
                   intra_scale: float, inter_scale: float) -> float:
    """base + (steps - inter_steps) * intraLat + inter_steps * interLat (tuning.cc, ring)."""
    intra = _hop(intra_kind, "ring", protocol) * intra_scale
    inter = 0.0
    if inter_steps:
        intra = max(intra, _net_overhead_us(protocol) * inter_scale)
        inter = (_hop("net", "tree" if ppn == 1 else "ring", protocol) + _net_overhead_us(protocol)) * inter_scale
    base = BASE_LATENCY_US["ring"][protocol] * intra_scale
    return (base + (steps - inter_steps) * intra + inter_steps * inter) * 1e-6


def tree_latency_s(protocol: str, ppn: int, nodes: int, intra_kind: str, intra_scale: float,
                   inter_scale: float) -> float:
    """base + 2 * ((ppn - 1) * intraLat + log2(nodes) * interLat) (tuning.cc, tree)."""
    intra = _hop(intra_kind, "tree", protocol) * intra_scale
    inter = (_hop("net", "tree", protocol) + _net_overhead_us(protocol)) * inter_scale
    base = BASE_LATENCY_US["tree"][protocol] * intra_scale
    return (base + 2 * ((ppn - 1) * intra + math.log2(nodes) * inter)) * 1e-6


def nvls_latency_s(intra_scale: float) -> float:
    return HOP_LATENCY_US["nvlink"]["nvls"]["Simple"] * intra_scale * 1e-6
