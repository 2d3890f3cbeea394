"""Usable bandwidth of each kind of link: line rate x the fraction NCCL-style transfers reach.

All figures are per direction. Sources are digested in ``shared/docs/network-model.md`` (sections 3 and 4):

* NVLink line rate per link: 20 GB/s (NVLink 1), 25 GB/s (NVLink 2-4), 50 GB/s (NVLink 5).
* NVLink efficiency per generation = measured NCCL ring all-reduce bus bandwidth / line rate:
  NVLink 2: DGX-1 V100 134.5 of 150 GB/s and one link 22.6 of 25 (vTrain nccl-tests) -> 0.90;
  NVLink 3: DGX A100 230-235 of 300 (stas00, nccl-tests#175) -> 0.78 (RTX 3090 bridge: 45.6 of 56.25, Aceso);
  NVLink 4: DGX H100/H200 365-370 of 450 (nccl#1455, stas00) -> 0.815;
  NVLink 5: HGX B200 673-695 of 900 (stas00, nccl#2140) -> 0.756.
  NVLink 1 has no measurement here: NCCL's own constant (18 of 20 -> 0.90, topo.h SM60).
* Pipelined algorithms (rings, chains, trees) can lose part of every loop to filling and draining their
  pipeline, which makes small rings slower per byte (``ring_fill_steps`` below; ``collectives.cost``).
* PCIe: x1 line rate after encoding per generation; NCCL models Gen3/4/5 x16 as 12/24/48 GB/s (topo.h),
  i.e. 0.76 of line rate, which the A100 PCIe pairs' cross-pair all-reduce reproduces (23.7 of 31.5 GB/s).
* PCIe without peer-to-peer (GeForce cards, "CNS" chipsets): NCCL's SHM transport stages every hop in
  host memory, and a GPU's sends and receives share one budget of about 0.66 of the PCIe line rate:
  RTX 2080 / Titan RTX Gen3 boxes in Aceso's profiles move 10.4 GB/s one way (point-to-point; Aceso writes
  9.9 MiB/ms) and 4-5 GB/s each way at once (rings, all-to-all).
* CPU socket interconnect: one Skylake-class UPI link by default, 10.4 GT/s x 2 bytes = 20.8 GB/s per direction
  (two-socket Xeon Scalable servers have two or three). NCCL's search assumes 10 GB/s (topo.h), but that is what
  it plans with, not what the link carries: the 8-GPU all-to-alls of Aceso's RTX 2080 / Titan RTX boxes (four
  GPUs per socket, host-staged) move 12.4 GB/s each way between the sockets (6.2 GB/s of S / t, half of every
  GPU's bytes crossing); at 10 GB/s they came out 1.24x slow (17 % MAPE), at 13-20.8 GB/s the GPUs' staging
  budget binds instead (10.5 %, median 1.00).
* NCCL's socket transport (TCP, no RDMA): one proxy thread per rank drives all of that rank's connections
  (NCCL_SOCKET_NTHREADS / NSOCKS_PERTHREAD default to none / one outside AWS and GCP), so a rank's traffic
  between nodes is capped by what one thread copies: ``SOCKET_PROXY_*`` below.
* NICs: 0.94 of line rate for RDMA (HDR 23.5 of 25 GB/s, NDR 46-48.5 of 50: SimAI, nccl-tests#290).
"""
from __future__ import annotations

NVLINK_LINK_BYTES_PER_S = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 50e9}
NVLINK_EFFICIENCY = {1: 0.90, 2: 0.90, 3: 0.78, 4: 0.815, 5: 0.756}
PCIE_EFFICIENCY = 0.76
#: PCIe x1 line rate per direction by generation (bytes/s), after encoding overhead.
PCIE_LANE_BYTES_PER_S = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
#: Host-memory staging (no GPU peer-to-peer): both directions together reach this fraction of the line rate.
SHM_EFFICIENCY = 0.66
#: A ring's pipeline does not always stream across its loops: each loop (channels x ranks x chunk bytes) can
#: lose some chunk-times filling and draining, D extra steps of S/n per call in all, so that
#: time = S (f + D/n) / B and small rings are slower per byte. Through host-memory staging D = 0.45, fitted on
#: Aceso's RTX 2080 and Titan RTX all-reduce (busbw 4.07 / 4.95 / 5.27 GB/s at 2 / 4 / 8 GPUs, within 5%);
#: unfitted, it gives their all-gather and reduce-scatter 3.6 / 4.5 / 4.9 GB/s against measured fast modes
#: of 3.1-3.7 / 4.4 / 4.8.
SHM_RING_FILL_STEPS = 0.45
CPU_INTERCONNECT_BYTES_PER_S = 20.8e9
#: One rank's socket proxy: one way, and its sends and receives together. Fitted on Vidur's two DGX A100s over
#: one 200 Gb/s TCP port with one GPU per node: send/recv 7.65-7.8 GB/s from 2 MiB on, a 2-rank all-reduce
#: 5.8-5.9 GB/s each way at once (11.7 both ways), far below the 23.5 GB/s port. A different host shows the
#: same one-way rate: Vidur's A100 PCIe hosts on 25 GbE send 7-9 GB/s (the sender's time) while the message
#: still fits the connection's buffers.
SOCKET_PROXY_ONE_WAY_BYTES_PER_S = 7.7e9
SOCKET_PROXY_TOTAL_BYTES_PER_S = 11.7e9


def gpu_family(gpu_name: str) -> str:
    """Die family where it changes NCCL's behaviour: ``ga100`` for A100/A800/A30, else ``other``."""
    name = gpu_name.upper()
    return "ga100" if name.startswith(("A100", "A800", "A30")) else "other"


#: D on NVLink per GPU family (see SHM_RING_FILL_STEPS). GA100 (A100/A800/A30): 0.33, fitted on vTrain's DGX
#: A100 nccl-tests at 1 GiB (busbw 197 / 222 / 229 GB/s at 2 / 4 / 8 GPUs) with the NVLink 3 efficiency of
#: 0.78 that the RTX 3090 bridge (GA102, 45.6 of 56.25 GB/s at 2 GPUs, no fill) and A100 point-to-point
#: show: Vidur's DGX A100 send/recv 227-244 GB/s, Aceso's A100-40 247 GB/s, of 300. Volta (vTrain DGX-1: 0.90
#: of line rate at 2 and 8 GPUs) and Hopper (nccl#1455: ring busbw flat at 365-370 GB/s over 2-8 GPUs)
#: show none.
FAMILY_RING_FILL_STEPS = {"ga100": 0.33}


def nvlink_efficiency(generation: int) -> float:
    return NVLINK_EFFICIENCY.get(generation, 0.80)


def ring_fill_steps(gpu_name: str, staged: bool) -> float:
    """D of a pipelined ring, chain or tree: host-memory staging's, else the GPU family's on NVLink, else 0."""
    if staged:
        return SHM_RING_FILL_STEPS
    return FAMILY_RING_FILL_STEPS.get(gpu_family(gpu_name), 0.0)


def nvlink_per_link_bytes_per_s(generation: int, total_bytes_per_s: float, links: int) -> float:
    """Line rate of one link: the GPU's total over its link count (falls back to the generation's rate)."""
    if links > 0 and total_bytes_per_s > 0:
        return total_bytes_per_s / links
    return NVLINK_LINK_BYTES_PER_S.get(generation, 25e9)


def pcie_line_bytes_per_s(generation: int, lanes: int) -> float:
    return PCIE_LANE_BYTES_PER_S[generation] * lanes
