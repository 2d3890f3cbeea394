"""The closed form: time of a collective call = latency + size / algorithm bandwidth, per candidate
(algorithm, protocol), and NCCL-style selection of the fastest candidate.

Per candidate (NCCL tuning.cc structure, network-model.md 2.4 and 6.2-6.3):
* bandwidth: the Simple-protocol payload rate of the algorithm's channel graph on the idle fabric
  (``pipelines``), times the protocol's wire efficiency (LL 0.5, LL128 0.92; a ring's LL128 really
  sustains 0.64 of Simple, ``tuning.LL128_RING_SUSTAINED``, while the tuner selects with 0.92), capped for
  LL by NCCL's llMaxBw; trees carry NCCL's 0.92 (and /3.8 for LL, 7/9 or 120/128 for LL128; one-node
  Simple chains run at the graph's rate, ``_tree``); NVLS runs at the switch's reduction efficiency.
  Pipelines that lose their fill and drain (host-memory staging, GA100 NVLink) take D steps of S/n longer
  (``topology.links.ring_fill_steps``).
* latency: NCCL's formulas and constants (``tuning``), scaled by the cluster's hop latencies.

The flow model (``algorithms``) moves exactly these bytes at these rates, so on an idle fabric the two
paths agree; under contention the fabric shares the links.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

from ..topology import Topology
from ..topology.links import ring_fill_steps
from ..topology.routing import route, route_latency_s
from . import tuning
from .pipelines import ChannelGraph, by_node, graph_for, ring, solve

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv")
ALGORITHMS = ("ring", "tree", "nvls", "hierarchical", "p2p")

#: nccl-tests busbw factor per collective (network-model.md section 1)
BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


@dataclass(frozen=True)
class Phase:
    """One step of a candidate: ``latency_s`` then the channel graph's flows at ``algbw_bytes_per_s``.
    ``wire`` is the protocol's payload fraction (bytes on the wire = payload / wire)."""

    graph: ChannelGraph
    latency_s: float
    algbw_bytes_per_s: float
    wire: float = 1.0
    tuner_bytes_per_s: Optional[float] = None  # the bandwidth NCCL's tuner believes (None: the real one)
    tuner_latency_s: Optional[float] = None  # the latency NCCL's tuner believes (None: the real one)


@dataclass(frozen=True)
class Candidate:
    algorithm: str
    protocol: str
    phases: tuple[Phase, ...]

    def time_s(self, size_bytes: float) -> float:
        return sum(p.latency_s + size_bytes / p.algbw_bytes_per_s for p in self.phases)

    def tuner_time_s(self, size_bytes: float) -> float:
        """The time NCCL's tuner predicts (what it selects by), which can differ from the real time."""
        scale = tuning.tree_correction(self.protocol, size_bytes) if self.algorithm == "tree" else 1.0
        return sum((p.latency_s if p.tuner_latency_s is None else p.tuner_latency_s)
                   + size_bytes / ((p.tuner_bytes_per_s or p.algbw_bytes_per_s) * scale) for p in self.phases)


@dataclass(frozen=True)
class Estimate:
    """The closed-form answer for one call: the chosen candidate and its time."""

    collective: str
    group: tuple[int, ...]
    size_bytes: float
    candidate: Optional[Candidate]
    time_s: float

    @property
    def algorithm(self) -> str:
        return self.candidate.algorithm if self.candidate else "none"

    @property
    def protocol(self) -> str:
        return self.candidate.protocol if self.candidate else "none"

    @property
    def algbw_bytes_per_s(self) -> float:
        return self.size_bytes / self.time_s if self.time_s > 0 else math.inf

    @property
    def busbw_bytes_per_s(self) -> float:
        return self.algbw_bytes_per_s * BUSBW_FACTOR[self.collective](len(self.group))

    @property
    def channels(self) -> int:
        return max((p.graph.channels for p in self.candidate.phases), default=0) if self.candidate else 0


def _scales(topo: Topology) -> tuple[float, float]:
    c = topo.cluster
    inter = c.inter_node.latency_s / tuning.REFERENCE_INTER_LATENCY_S if c.inter_node else 1.0
    return c.intra_node.latency_s / tuning.REFERENCE_INTRA_LATENCY_S, inter


def _simple_switch_latency_s(topo: Topology, graph: ChannelGraph, protocol: str, steps: int) -> float:
    """Real latency of a Simple-protocol call of ``steps`` steps through an NVSwitch beyond NCCL's tuner table
    (``tuning.NVSWITCH_SIMPLE_CALL_US`` + steps x ``tuning.NVSWITCH_SIMPLE_STEP_US``); zero elsewhere."""
    if protocol != "Simple" or not _crosses_nvswitch(graph):
        return 0.0
    return (tuning.NVSWITCH_SIMPLE_CALL_US + steps * tuning.NVSWITCH_SIMPLE_STEP_US) * _scales(topo)[0] * 1e-6


def _crosses_nvswitch(graph: ChannelGraph) -> bool:
    return any(v.endswith(".nvswitch") for pipe in graph.pipelines for hop in pipe.hops for _, v in hop)


def _shape(topo: Topology, group: tuple[int, ...], graph: ChannelGraph) -> tuple[int, int, str]:
    nodes = len(by_node(topo, group))
    intra = "nvlink" if graph.kinds <= {"nvlink", "net"} and "nvlink" in graph.kinds else "pcie"
    if graph.kinds == {"net"}:
        intra = "nvlink"  # one GPU per node: no intra-node hop
    return nodes, len(group) // nodes, intra


def _pipelined(topo: Topology, graph: ChannelGraph, n: int) -> float:
    """The Simple-protocol payload rate of a ring, chain or tree over ``n`` ranks: its graph's rate, less the
    pipeline's fill and drain where the transport loses it (``topology.links.ring_fill_steps``): D steps
    of S/n per call, time = S (w + D/n) / B for a graph moving w bytes per byte of the buffer (its weight).
    Host-memory staging loses it anywhere; GA100 on its NVLink-only graphs."""
    staged = any(".stage" in v for pipe in graph.pipelines for hop in pipe.hops for _, v in hop)
    d = ring_fill_steps(topo.cluster.gpu.name, staged) if staged or graph.kinds == {"nvlink"} else 0.0
    w = graph.pipelines[0].weight if graph.pipelines else 1.0
    return graph.algbw_bytes_per_s * w / (w + d / n)


def _protocols(topo: Topology, algorithm: str, base: float, busbw_factor: float, nodes: int,
               intra: str) -> list[tuple[str, float, float]]:
    """(protocol, payload bandwidth, wire efficiency) for a ring, chain or tree with Simple rate ``base``."""
    arch = topo.cluster.gpu.architecture
    ll_cap = tuning.ll_max_busbw(arch, nodes) / busbw_factor
    ll128_ok = tuning.ll128_allowed(arch, intra, nodes)
    if algorithm == "tree":
        simple = base * tuning.TREE_SIMPLE
        out = [("LL", min(simple * tuning.TREE_LL, ll_cap), 0.5)]
        if ll128_ok:
            out.append(("LL128", simple * tuning.TREE_LL128[nodes == 1], tuning.WIRE_EFFICIENCY["LL128"]))
        return out + [("Simple", simple, 1.0)]
    out = [("LL", min(base * 0.5, ll_cap), 0.5)]
    if ll128_ok:
        out.append(("LL128", base * tuning.WIRE_EFFICIENCY["LL128"], tuning.WIRE_EFFICIENCY["LL128"]))
    return out + [("Simple", base, 1.0)]


def _ring_like(topo: Topology, collective: str, group: tuple[int, ...], algorithm: str) -> list[Candidate]:
    n = len(group)
    f = BUSBW_FACTOR[collective](n)
    if algorithm == "chain":
        graph = graph_for(topo, "chain", group)
        base = _pipelined(topo, graph, n)
    else:
        graph = graph_for(topo, "ring", group, f)
        base = _pipelined(topo, graph, n)
    nodes, ppn, intra = _shape(topo, group, graph)
    steps = {"all_reduce": 2 * (n - 1)}.get(collective, n - 1)
    inter = {"all_reduce": 2 * (nodes - 1)}.get(collective, nodes - 1)
    si, sn = _scales(topo)
    out = []
    for proto, bw, wire in _protocols(topo, "ring", base, f, nodes, intra):
        lat = tuning.ring_latency_s(proto, steps, inter, intra, ppn, si, sn)
        real = lat + _simple_switch_latency_s(topo, graph, proto, steps - inter)
        real_bw = base * tuning.LL128_RING_SUSTAINED if proto == "LL128" else bw
        out.append(Candidate("ring", proto, (Phase(graph, real, real_bw, wire, tuner_bytes_per_s=bw,
                                                   tuner_latency_s=lat),)))
    return out


def _tree(topo: Topology, group: tuple[int, ...]) -> list[Candidate]:
    """Trees move the bytes their graph allows: two-node trees send half of what a ring sends over the
    network (nccl#1576). NCCL's tuner does not see that: across nodes it rates a tree at the ring channels'
    speed (the NIC's) times its 0.5 algorithm ratio (tuning.cc), so it picks trees for their latency and
    rings for bandwidth; the selection below uses that belief (Aceso's 2-node RTX 3090 all-reduce and
    Vidur's 4-GPUs-per-node groups run at ring speed). On one node the chain's own rate decides (Aceso's
    V100 and RTX 3090 4-GPU all-reduces reach the chain's bus bandwidth, not the ring's). Either way the
    tuner also scales a tree's rate by NCCL's size-dependent correction (``tuning.tree_correction``, in
    ``Candidate.tuner_time_s``), which keeps mid-size calls on rings.

    A one-node chain on Simple moves its graph's rate: NCCL's 0.92 (``tuning.TREE_SIMPLE``) is what its tuner
    believes and selects with, not what the chain runs at. Aceso's V100 box reaches 80 GB/s bus bandwidth on its
    4-GPU chain, 1.5 x 53.3 GB/s per direction over the X-bus, where its rings reach 53-55 GB/s over the same
    hop. Trees across nodes keep the 0.92 (no measurement of a large multi-node tree here)."""
    graph = graph_for(topo, "tree", group)
    nodes, ppn, intra = _shape(topo, group, graph)
    si, sn = _scales(topo)
    f = BUSBW_FACTOR["all_reduce"](len(group))
    real = _protocols(topo, "tree", _pipelined(topo, graph, len(group)), f, nodes, intra)
    believed = {}
    if nodes > 1:
        ring_busbw = _pipelined(topo, graph_for(topo, "ring", group, f), len(group)) * f
        believed = {proto: bw for proto, bw, _ in _protocols(topo, "tree", ring_busbw * tuning.TREE_ALGBW_RATIO, f,
                                                              nodes, intra)}
    out = []
    for proto, bw, wire in real:
        lat = tuning.tree_latency_s(proto, ppn, nodes, intra, si, sn)
        real_bw = bw / tuning.TREE_SIMPLE if proto == "Simple" and nodes == 1 else bw
        real_s = lat + _simple_switch_latency_s(topo, graph, proto, 2 * (ppn - 1))
        out.append(Candidate("tree", proto, (Phase(graph, real_s, real_bw, wire, believed.get(proto, bw), lat),)))
    return out


def nvls_eligible(topo: Topology, group: tuple[int, ...]) -> bool:
    """NVLink SHARP: one node's GPUs on an NVSwitch that reduces (3rd-gen NVSwitch: Hopper and later)."""
    c = topo.cluster
    if c.intra_node.kind != "nvswitch" or len(group) < 2 or len(by_node(topo, group)) > 1:
        return False
    if c.intra_node.nvls is not None:
        return c.intra_node.nvls
    return c.gpu.architecture in tuning.NVLS_EFFICIENCY


def _nvls(topo: Topology, group: tuple[int, ...]) -> list[Candidate]:
    sw = f"n{topo.node_of(group[0])}.nvswitch"
    port = min(topo.graph.edges[f"gpu{r}", sw]["capacity_bytes_per_s"] for r in group)
    limit = port * tuning.NVLS_EFFICIENCY.get(topo.cluster.gpu.architecture, 0.85)
    graph = graph_for(topo, "nvls", group, limit=limit)
    lat = tuning.nvls_latency_s(_scales(topo)[0])
    real = lat + _simple_switch_latency_s(topo, graph, "Simple", 2 * (len(group) - 1))
    return [Candidate("nvls", "Simple", (Phase(graph, real, graph.algbw_bytes_per_s, tuner_latency_s=lat),))]


def _tree_single_node_eligible(topo: Topology, group: tuple[int, ...]) -> bool:
    """A one-node tree is a chain; NCCL picks it (Aceso's RTX 3090 and V100 boxes) only where the ring
    crosses a CPU (host-memory staging or a socket link), never on NVLink or PCIe-switch rings."""
    graph = graph_for(topo, "ring", group, 1.0)
    edges = {e for pipe in graph.pipelines for hop in pipe.hops for e in hop}
    return any(".cpu" in u or ".cpu" in v for u, v in edges)


def hierarchical(topo: Topology, group: tuple[int, ...]) -> list[Candidate]:
    """Reduce-scatter inside each node, all-reduce across nodes per local rank, all-gather inside each
    node (ASTRA-sim's multi-dimensional default; not an NCCL algorithm, so never auto-selected)."""
    nodes = by_node(topo, group)
    ppn = len(nodes[0])
    if len(nodes) < 2 or ppn < 2 or any(len(m) != ppn for m in nodes):
        return []
    si, sn = _scales(topo)
    intra_pipes = [replace(p, part=k) for k, m in enumerate(nodes) for p in ring(topo, tuple(m), (ppn - 1) / ppn)]
    w = 2 * (len(nodes) - 1) / len(nodes) / ppn
    inter_pipes = [replace(p, part=i) for i in range(ppn) for p in ring(topo, tuple(m[i] for m in nodes), w)]
    intra = solve(topo, "ring", intra_pipes)
    inter = solve(topo, "ring", inter_pipes)
    lat_intra = tuning.ring_latency_s("Simple", ppn - 1, 0, "nvlink" if intra.kinds == {"nvlink"} else "pcie", ppn, si, sn)
    lat_inter = tuning.ring_latency_s("Simple", 2 * (len(nodes) - 1), 2 * (len(nodes) - 1), "nvlink", 1, si, sn)
    rs = Phase(intra, lat_intra, intra.algbw_bytes_per_s)
    return [Candidate("hierarchical", "Simple", (rs, Phase(inter, lat_inter, inter.algbw_bytes_per_s), rs))]


def _ll_and_simple(graph: ChannelGraph, latency_s: dict[str, float], si: float,
                   ll_cap_bytes_per_s: float) -> list[Candidate]:
    """The LL and Simple candidates of sends over ``graph`` (send/recv, all-to-all): LL at half the graph's rate
    (at most ``ll_cap_bytes_per_s``), Simple at its rate; a Simple send through an NVSwitch pays one switch step
    (``tuning.NVSWITCH_SIMPLE_STEP_US`` x ``si``, the intra-node latency scale in seconds per us)."""
    switch = tuning.NVSWITCH_SIMPLE_STEP_US * si if _crosses_nvswitch(graph) else 0.0
    ll = min(graph.algbw_bytes_per_s * tuning.WIRE_EFFICIENCY["LL"], ll_cap_bytes_per_s)
    return [Candidate("p2p", "LL", (Phase(graph, latency_s["LL"], ll, tuning.WIRE_EFFICIENCY["LL"]),)),
            Candidate("p2p", "Simple", (Phase(graph, latency_s["Simple"] + switch, graph.algbw_bytes_per_s),))]


def _send_recv(topo: Topology, group: tuple[int, ...]) -> list[Candidate]:
    """LL and Simple, chosen by size as NCCL does (``estimate``), not by its tuner. Latency: the route's hops plus,
    inside a node, the protocol's per-hop latency from tuning.cc's table for the link class (NVLink: LL 0.6 us,
    Simple 3.4 us; Vidur's A100 sends step up by 3 us at 16 KiB on both its NVSwitch and its bridged box), and
    a Simple send through an NVSwitch pays one switch step (``tuning.NVSWITCH_SIMPLE_STEP_US``, as a ring's step
    does; Vidur's NVSwitch sends take 4-7 us longer than its bridged pair's). Vidur's sends below 1 MiB, MAPE:
    NVSwitch 32.9 -> 19.3 %, bridged pair 15.8 -> 11.8 % (23.3 and 7.5 % once the benchmark's harness let a
    P2P-read sender finish a buffer ahead: ``benchmarks/collective_accuracy.py``). Sends across nodes keep the
    route's latency: adding tuning.cc's network hop (14 us for Simple) made Vidur's 2-node DGX A100 below 1 MiB
    19.1 -> 30.3 %."""
    graph = graph_for(topo, "p2p", group)
    nodes, _, intra = _shape(topo, group, graph)
    lat = route_latency_s(topo, route(topo, group[0], group[1]))
    si = _scales(topo)[0] * 1e-6 if nodes == 1 else 0.0
    latency_s = {proto: lat + tuning.hop_latency_us(intra, proto) * si for proto in ("LL", "Simple")}
    return _ll_and_simple(graph, latency_s, si, tuning.ll_max_busbw(topo.cluster.gpu.architecture, nodes))


def _all_to_all(topo: Topology, group: tuple[int, ...]) -> list[Candidate]:
    """A send and a receive per peer at once; LL where each peer's share is small enough for an LL send
    (``estimate``), with the ring's base latency of the protocol. Unvalidated below 1 MiB (Aceso's all-to-alls
    start there)."""
    n = len(group)
    graph = graph_for(topo, "all_to_all", group, 1.0 / n)
    hop = max(route_latency_s(topo, route(topo, a, b)) for a in group for b in group if a != b)
    si = _scales(topo)[0] * 1e-6
    latency_s = {proto: tuning.BASE_LATENCY_US["ring"][proto] * si + hop for proto in ("LL", "Simple")}
    ll_cap = tuning.ll_max_busbw(topo.cluster.gpu.architecture, len(by_node(topo, group))) / BUSBW_FACTOR["all_to_all"](n)
    return _ll_and_simple(graph, latency_s, si, ll_cap)


def candidates(topo: Topology, collective: str, group: tuple[int, ...]) -> list[Candidate]:
    """Every eligible (algorithm, protocol) for the call, NCCL's rules (network-model.md 2.1), memoised."""
    key = ("candidates", collective, group)
    cached = topo.cache.get(key)
    if cached is not None:
        return cached
    if collective == "send_recv":
        out = _send_recv(topo, group)
    elif collective == "all_to_all":
        out = _all_to_all(topo, group)
    elif collective in ("broadcast", "reduce"):
        out = _ring_like(topo, collective, group, "chain")
    else:
        out = _ring_like(topo, collective, group, "ring")
        if collective == "all_reduce":
            if len(by_node(topo, group)) > 1 or _tree_single_node_eligible(topo, group):
                out += _tree(topo, group)
            if nvls_eligible(topo, group):
                out += _nvls(topo, group)
            out += hierarchical(topo, group)
    topo.cache[key] = out
    return out


def estimate(topo: Topology, collective: str, group: tuple[int, ...], size_bytes: float,
             algorithm: Optional[str] = None, protocol: Optional[str] = None) -> Estimate:
    """The closed form for one call: the fastest eligible candidate (or the forced one). Hierarchical is
    not an NCCL algorithm, so it runs only when asked for."""
    group = tuple(group)
    if collective not in BUSBW_FACTOR:
        raise ValueError(f"unknown collective {collective!r}")
    if len(group) <= 1 or size_bytes <= 0:
        return Estimate(collective, group, size_bytes, None, 0.0)
    pool = [c for c in candidates(topo, collective, group)
            if (c.algorithm == algorithm if algorithm else c.algorithm != "hierarchical")
            and (protocol is None or c.protocol == protocol)]
    if not pool:
        raise ValueError(f"{algorithm or 'any algorithm'}/{protocol or 'any protocol'} is not available for "
                         f"{collective} on {len(group)} ranks of {topo.cluster.name}")
    if collective in ("send_recv", "all_to_all") and protocol is None:  # each send by its own size, as NCCL does
        per_peer = size_bytes / len(group) if collective == "all_to_all" else size_bytes
        pool = [c for c in pool if c.protocol == tuning.p2p_protocol(per_peer)]
    best = min(pool, key=lambda c: c.tuner_time_s(size_bytes))
    return Estimate(collective, group, size_bytes, best, best.time_s(size_bytes))
