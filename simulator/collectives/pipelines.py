"""Channel graphs: how each algorithm moves a collective's bytes over the topology.

A channel graph is a set of pipelines. A pipeline is one NCCL channel (or several identical ones merged):
flows over routed edge paths that move one slice of the buffer, each flow carrying ``weight`` bytes per
byte of that slice. Pipelines of one ``part`` share one buffer (their slices add up to it); different
parts work on different buffers at the same time (e.g. every node's ring in a hierarchical all-reduce).
Rates come from max-min sharing of the idle fabric (``topology.sharing``), or from the ring search.

Shapes (network-model.md section 2.2):
* ring: per channel a ring through every rank; inside a node NCCL's search packs as many rings as the
  NVLink links allow (direct links: greedy widest-ring packing; NVSwitch or PCIe: one ring order);
  across nodes one channel per NIC, entering and leaving every node through that NIC's rail (PXN).
* tree: two complementary binary trees over nodes, a chain inside each node; every edge carries the
  slice up (reduce) and down (broadcast).
* nvls: every GPU sends and receives (1 + 1/n) of the buffer through the NVSwitch.
* chain: a ring without its closing hop (broadcast, reduce).
* p2p: one flow per (source, destination) pair, each at its own pace (send/recv, all-to-all).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional

from ..topology import Topology
from ..topology.routing import Edge, between_nics, from_nic, path_kind, route, to_nic
from ..topology.sharing import max_min_rates

Path = tuple[Edge, ...]
MAX_RINGS = 16
MAX_SEARCH_RANKS = 8


@dataclass(frozen=True)
class Pipeline:
    hops: tuple[Path, ...]
    weight: float
    part: int = 0
    lockstep: bool = True
    rate: Optional[float] = None  # preassigned by the ring search


@dataclass(frozen=True)
class ChannelGraph:
    """Pipelines with their isolated rates. ``algbw_bytes_per_s`` is the Simple-protocol payload rate of
    the whole collective; ``kinds`` the link classes its hops cross (for NCCL's latency tables)."""

    algorithm: str
    pipelines: tuple[Pipeline, ...]
    rates: tuple[tuple[float, ...], ...]
    slices: tuple[float, ...]
    algbw_bytes_per_s: float
    kinds: frozenset

    @property
    def channels(self) -> int:
        return len(self.pipelines)


def by_node(topo: Topology, group: tuple[int, ...]) -> list[list[int]]:
    nodes: dict[int, list[int]] = {}
    for r in group:
        nodes.setdefault(topo.node_of(r), []).append(r)
    return [sorted(v) for _, v in sorted(nodes.items())]


def _capacity(topo: Topology) -> dict:
    cap = topo.cache.get("capacity")
    if cap is None:
        cap = topo.cache["capacity"] = {(u, v): d["capacity_bytes_per_s"] for u, v, d in topo.graph.edges(data=True)}
    return cap


def solve(topo: Topology, algorithm: str, pipelines: list[Pipeline]) -> ChannelGraph:
    """Rates of every hop on the idle fabric, then each part's slices so that its pipelines finish together."""
    flows, caps, owner = [], [], []
    for p, pipe in enumerate(pipelines):
        for hop in pipe.hops:
            flows.append(hop)
            caps.append(pipe.rate if pipe.rate is not None else math.inf)
            owner.append(p)
    rates = max_min_rates(flows, _capacity(topo), caps) if flows else []
    per_pipe: list[list[float]] = [[] for _ in pipelines]
    for p, r in zip(owner, rates):
        per_pipe[p].append(r)
    speed = []  # slice bytes per second of each pipeline
    for pipe, rs in zip(pipelines, per_pipe):
        if pipe.lockstep:
            rs[:] = [min(rs)] * len(rs)
        speed.append(min(rs) / pipe.weight)
    parts: dict[int, float] = {}
    for pipe, s in zip(pipelines, speed):
        parts[pipe.part] = parts.get(pipe.part, 0.0) + s
    slices = tuple(s / parts[pipe.part] for pipe, s in zip(pipelines, speed))
    kinds = frozenset(path_kind(topo, hop) for pipe in pipelines for hop in pipe.hops if hop)
    return ChannelGraph(algorithm, tuple(pipelines), tuple(tuple(r) for r in per_pipe), slices,
                        min(parts.values()), kinds)


# ---- ring orders inside a node -------------------------------------------------------------------------

def _route_classes(topo: Topology, members: list[int]) -> tuple[bool, bool]:
    """(every pair has an NVLink route, some pair is joined by a direct GPU-GPU link)."""
    direct = any(topo.graph.has_edge(f"gpu{a}", f"gpu{b}") for a in members for b in members if a != b)
    if not direct:
        return False, False
    nvlink = all(path_kind(topo, route(topo, a, b, members)) == "nvlink" for a in members for b in members if a != b)
    return nvlink, direct


def _usage_matrix(topo: Topology, cycles: list[tuple[int, ...]], members: list[int]):
    """Cycles x edges matrix of how many hops of each cycle cross each edge, and the edges' capacities."""
    import numpy as np

    index: dict[Edge, int] = {}
    rows = []
    for order in cycles:
        row: dict[int, int] = {}
        for a, b in zip(order, order[1:] + order[:1]):
            for e in route(topo, a, b, members):
                j = index.setdefault(e, len(index))
                row[j] = row.get(j, 0) + 1
        rows.append(row)
    use = np.zeros((len(cycles), len(index)))
    for i, row in enumerate(rows):
        for j, k in row.items():
            use[i, j] = k
    cap = _capacity(topo)
    return use, np.array([cap[e] for e in index])


def _widest(use, left):
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(use > 0, left[None, :] / use, np.inf)
    return share.min(axis=1)


def _pack(use, cap, speed: float, spread: bool) -> list[int]:
    """NCCL's search at one speed (search.cc): add rings of ``speed`` while one still fits, taking the
    widest ring or (``spread``) the one through the least used links."""
    import numpy as np

    left, chosen = cap.copy(), []
    for _ in range(MAX_RINGS):
        width = _widest(use, left)
        fits = width >= speed * (1 - 1e-9)
        if not fits.any():
            break
        if spread:
            score = np.where(fits, (use * (left / cap)[None, :]).sum(axis=1) / use.sum(axis=1), -1.0)
        else:
            score = width
        best = int(score.argmax())
        chosen.append(best)
        left = left - speed * use[best]
    return chosen


def ring_search(topo: Topology, members: list[int]) -> list[tuple[tuple[int, ...], Optional[float]]]:
    """Ring orders (with preassigned rates when packed) for the GPUs of one node.

    NVSwitch or PCIe only: one ring in rank order (every order is equivalent on a switch; PCIe trees number
    GPUs by locality), replicated, which is what NCCL's same-channel search settles on (PCIe boxes reach
    one direction's worth of bandwidth). Direct NVLink links between every pair (DGX-1, HGX-4): rings packed
    at the best of a few speeds (the widest ring's rate / 1..4), like NCCL's speed ladder. Mixed NVLink and
    PCIe (bridged pairs): the single widest ring.
    """
    key = ("rings", tuple(members))
    if key in topo.cache:
        return topo.cache[key]
    n = len(members)
    nvlink, direct = _route_classes(topo, members) if 2 < n <= MAX_SEARCH_RANKS else (False, False)
    if not direct:
        out = [(tuple(members), None)]
    else:
        cycles = [tuple(members[:1]) + p for p in itertools.permutations(members[1:])]
        linked = lambda a, b: topo.graph.has_edge(f"gpu{a}", f"gpu{b}")  # noqa: E731
        direct_only = [c for c in cycles if all(linked(a, b) for a, b in zip(c, c[1:] + c[:1]))]
        cycles = direct_only or cycles  # NCCL uses a path through another GPU only where no link exists
        use, cap = _usage_matrix(topo, cycles, members)
        widest = float(_widest(use, cap).max())
        if not nvlink:
            out = [(cycles[int(_widest(use, cap).argmax())], None)]
        else:
            packs = [(len(c) * widest / k, widest / k, c) for k in (1, 2, 3, 4) for spread in (False, True)
                     for c in [_pack(use, cap, widest / k, spread)]]
            total, speed, chosen = max(packs, key=lambda t: (round(t[0] / 1e6), t[1]))  # most, then fewest rings
            out = [(cycles[i], speed) for i in chosen]
    topo.cache[key] = out
    return out


# ---- algorithm builders --------------------------------------------------------------------------------

def _ring_hops(topo: Topology, order: tuple[int, ...], members: list[int], closed: bool) -> tuple[Path, ...]:
    pairs = list(zip(order, order[1:] + order[:1]))
    return tuple(route(topo, a, b, members) for a, b in (pairs if closed else pairs[:-1]))


def _cross(topo: Topology, exit_rank: int, entry_rank: int, next_rank: int, nic_index: int) -> Path:
    """Exit GPU -> (over NVLink to the entry GPU, PXN) -> NIC -> rail -> NIC -> next node's entry GPU."""
    src_nic = f"n{topo.node_of(entry_rank)}.nic{nic_index}"
    dst_nic = f"n{topo.node_of(next_rank)}.nic{nic_index}"
    lead: Path = ()
    start = exit_rank
    if exit_rank != entry_rank and path_kind(topo, route(topo, exit_rank, entry_rank)) == "nvlink":
        lead, start = route(topo, exit_rank, entry_rank), entry_rank
    return lead + to_nic(topo, start, src_nic) + between_nics(topo, src_nic, dst_nic) + from_nic(topo, dst_nic, next_rank)


def _nic_channels(topo: Topology, nodes: list[list[int]]) -> list[tuple[int, list[int]]]:
    """(NIC index, entry rank on every node) per channel: one channel per NIC serving node 0's members.
    A socket-transport NIC hangs off the CPU, as far from one GPU as from another, so its channels enter
    each node through every member in turn, each with its own proxy thread (Vidur's two DGX A100s on one
    TCP port: 5.9 GB/s ring bus bandwidth at 1 GPU per node, 21.4 at 4, the port's rate)."""
    nics = dict.fromkeys(topo.nic_index(n) for r in nodes[0] for n in topo.nics_of(r))
    inter = topo.cluster.inter_node
    if len(nodes) > 1 and inter is not None and inter.transport == "socket":
        width = min(len(m) for m in nodes)
        return [(idx, [m[j] for m in nodes]) for idx in nics for j in range(width)]
    out = []
    for idx in nics:
        entries = []
        for k, members in enumerate(nodes):
            served = [r for r in members if f"n{topo.node_of(r)}.nic{idx}" in topo.nics_of(r)]
            entries.append(served[0] if served else members[len(out) % len(members)])
        out.append((idx, entries))
    return out or [(0, [m[0] for m in nodes])]


def _node_orders(topo: Topology, nodes: list[list[int]]) -> list[tuple[int, ...]]:
    return [ring_search(topo, m)[0][0] for m in nodes]


def _rotate(order: tuple[int, ...], first: int) -> tuple[int, ...]:
    i = order.index(first)
    return order[i:] + order[:i]


def ring(topo: Topology, group: tuple[int, ...], weight: float) -> list[Pipeline]:
    nodes = by_node(topo, group)
    if len(nodes) == 1:
        members = nodes[0]
        return [Pipeline(_ring_hops(topo, order, members, True), weight, rate=rate)
                for order, rate in ring_search(topo, members)]
    orders = _node_orders(topo, nodes)
    pipes = []
    for nic, entries in _nic_channels(topo, nodes):
        hops: list[Path] = []
        seqs = [_rotate(o, e) for o, e in zip(orders, entries)]
        for k, seq in enumerate(seqs):
            hops += _ring_hops(topo, seq, nodes[k], False)
            nxt = (k + 1) % len(nodes)
            hops.append(_cross(topo, seq[-1], seq[0], seqs[nxt][0], nic))
        pipes.append(Pipeline(tuple(hops), weight))
    return pipes


def chain(topo: Topology, group: tuple[int, ...], root: int) -> list[Pipeline]:
    """Pipelined chains from ``root`` along each ring (broadcast, reduce: every hop carries the buffer)."""
    pipes = []
    for pipe in ring(topo, group, 1.0):
        hops = list(pipe.hops)
        starts = [h[0][0] for h in hops]
        i = starts.index(f"gpu{root}") if f"gpu{root}" in starts else 0
        hops = hops[i:] + hops[:i]
        pipes.append(Pipeline(tuple(hops[:-1]), 1.0, rate=pipe.rate))
    return pipes


def _btree_parents(n: int, mirror: bool) -> dict[int, int]:
    """Child -> parent of a balanced binary tree over 0..n-1 (in-order layout); ``mirror`` flips the
    indices, so that leaves of one tree are interior in the other (NCCL trees.cc double binary tree)."""
    parents: dict[int, int] = {}

    def build(lo: int, hi: int, parent: Optional[int]) -> None:
        if lo >= hi:
            return
        mid = (lo + hi) // 2
        if parent is not None:
            parents[mid] = parent
        build(lo, mid, mid)
        build(mid + 1, hi, mid)

    build(0, n, None)
    if not mirror:
        return parents
    return {n - 1 - c: n - 1 - p for c, p in parents.items()}


def tree(topo: Topology, group: tuple[int, ...]) -> list[Pipeline]:
    nodes = by_node(topo, group)
    orders = _node_orders(topo, nodes)
    pipes = []
    for nic, entries in _nic_channels(topo, nodes):
        chains = [_rotate(o, e) for o, e in zip(orders, entries)]
        for t in (0, 1):
            hops: list[Path] = []
            for k, seq in enumerate(chains):
                for a, b in zip(seq, seq[1:]):
                    hops += [route(topo, b, a, nodes[k]), route(topo, a, b, nodes[k])]
            for child, parent in sorted(_btree_parents(len(nodes), bool(t)).items()):
                c, p = chains[child][0], chains[parent][0]
                hops += [_cross(topo, c, c, p, nic), _cross(topo, p, p, c, nic)]
            pipes.append(Pipeline(tuple(hops), 1.0))
    return pipes


def nvls(topo: Topology, group: tuple[int, ...], limit: float) -> list[Pipeline]:
    """Every GPU sends and receives (1 + 1/n) of the buffer through its NVSwitch ports, at ``limit``
    (bytes/s per direction per GPU) at most."""
    n = len(group)
    sw = f"n{topo.node_of(group[0])}.nvswitch"
    hops = tuple(h for r in group for h in (((f"gpu{r}", sw),), ((sw, f"gpu{r}"),)))
    return [Pipeline(hops, 1 + 1 / n, rate=limit)]


def p2p(topo: Topology, pairs: list[tuple[int, int]], weight: float) -> list[Pipeline]:
    return [Pipeline(tuple(route(topo, a, b) for a, b in pairs), weight, lockstep=False)]


def graph_for(topo: Topology, algorithm: str, group: tuple[int, ...], weight: float = 1.0,
              limit: float = math.inf) -> ChannelGraph:
    """The solved channel graph of ``algorithm`` over ``group`` (memoised on the topology)."""
    key = ("graph", algorithm, group, weight, limit)
    cached = topo.cache.get(key)
    if cached is None:
        cached = topo.cache[key] = solve(topo, algorithm, BUILDERS[algorithm](topo, group, weight, limit))
    return cached


BUILDERS = {
    "ring": lambda topo, group, w, lim: ring(topo, group, w),
    "chain": lambda topo, group, w, lim: chain(topo, group, group[0]),
    "tree": lambda topo, group, w, lim: tree(topo, group),
    "nvls": lambda topo, group, w, lim: nvls(topo, group, lim),
    "all_to_all": lambda topo, group, w, lim: p2p(topo, [(a, b) for a in group for b in group if a != b], w),
    "p2p": lambda topo, group, w, lim: p2p(topo, [(group[0], group[1])], w),
}
