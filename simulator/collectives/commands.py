"""``simulator collective``: an nccl-tests-style sweep of one collective on a cluster, from the closed form
(or, with ``--model flow``, from the flow model in the SimPy fabric); with ``--compare``, beside an nccl-tests log."""
from __future__ import annotations

import argparse
import json
import math
import re

from ..errors import ConfigError
from .cost import BUSBW_FACTOR, COLLECTIVES, estimate
from .nccl_tests import compare_summary, read_nccl_tests

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40}
MAX_SIZES = 64


def parse_size(text: str) -> int:
    """``8``, ``1K``, ``128M``, ``8G`` (binary multiples, as nccl-tests' -b/-e) -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise ConfigError("command line", "--sizes", text, "expected a byte count such as 2048, 1K, 64M or 8G")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < 1 or value != int(value):
        raise ConfigError("command line", "--sizes", text, "sizes must be whole, positive byte counts")
    return int(value)


def parse_sizes(spec: str) -> list[int]:
    """``LO:HI`` (x2 steps from LO up to HI) or a comma-separated list of byte counts."""
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 2:
            raise ConfigError("command line", "--sizes", spec, "a range is LO:HI, e.g. 1K:8G")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        if hi < lo:
            raise ConfigError("command line", "--sizes", spec, "the range's end is below its start")
        sizes = [lo * 2**i for i in range(int(math.log2(hi / lo) + 1e-9) + 1)]
    else:
        sizes = [parse_size(s) for s in spec.split(",") if s.strip()]
    if not sizes or len(sizes) > MAX_SIZES:
        raise ConfigError("command line", "--sizes", spec, f"give between 1 and {MAX_SIZES} sizes")
    return sizes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collective", help="time one collective over a range of sizes (nccl-tests style)")
    p.add_argument("--cluster", required=True, help="cluster name (topologies/) or YAML path")
    p.add_argument("--op", default="all_reduce", help=f"collective: {' | '.join(COLLECTIVES)} (default all_reduce)")
    p.add_argument("--gpus", type=int, required=True, help="ranks in the communicator")
    p.add_argument("--nodes", type=int, help="spread the ranks evenly over this many nodes")
    p.add_argument("--sizes", help="LO:HI in x2 steps (1K:8G) or a list (2048,10240); default 8:1G")
    p.add_argument("--compare", metavar="LOG", help="an nccl-tests log of this collective on this cluster: its "
                   "sizes, and beside the model's times the measured (out-of-place) ones and the error")
    p.add_argument("--algo", help="force an algorithm: ring | tree | nvls | hierarchical | p2p")
    p.add_argument("--proto", help="force a protocol: LL | LL128 | Simple")
    p.add_argument("--model", default="closed", help="closed (the closed form, default) | flow (SimPy fabric)")
    p.add_argument("--json", metavar="FILE|-", help="write the rows as JSON (algbw, busbw in GB/s as nccl-tests)")
    p.set_defaults(handler=_collective)


def group_for(cluster, gpus: int, nodes: int | None) -> tuple[int, ...]:
    """The communicator: ``gpus`` ranks, filling nodes in order, or spread evenly over ``nodes`` nodes."""
    g = cluster.gpus_per_node
    if nodes is None:
        return tuple(range(gpus))
    if gpus % nodes or gpus // nodes > g:
        raise ConfigError("command line", "--gpus", gpus, f"cannot spread evenly over {nodes} nodes of {g} GPUs")
    return tuple(k * g + i for k in range(nodes) for i in range(gpus // nodes))


def _load(args: argparse.Namespace):
    from ..loading import load_cluster
    from ..topology import build_topology

    if args.op not in COLLECTIVES:
        raise ConfigError("command line", "--op", args.op, f"unknown collective (known: {', '.join(COLLECTIVES)})")
    if args.gpus is None or args.gpus < 1:
        raise ConfigError("command line", "--gpus", args.gpus, "must be at least 1")
    if args.nodes is not None and args.nodes < 1:
        raise ConfigError("command line", "--nodes", args.nodes, "must be at least 1")
    if args.model not in ("closed", "flow"):
        raise ConfigError("command line", "--model", args.model, "expected closed or flow")
    cluster = load_cluster(args.cluster)
    nodes = args.nodes or -(-args.gpus // cluster.gpus_per_node)
    if nodes != cluster.nodes:
        if nodes > 1 and cluster.inter_node is None:
            raise ConfigError("command line", "--gpus", args.gpus,
                              f"{cluster.name} has {cluster.gpus_per_node} GPUs per node and no inter_node network")
        if args.nodes is None and nodes > cluster.nodes:
            raise ConfigError("command line", "--gpus", args.gpus,
                              f"needs {nodes} nodes of {cluster.gpus_per_node} GPUs; {cluster.name} has {cluster.nodes}")
        cluster = load_cluster(args.cluster, nodes)
    group = group_for(cluster, args.gpus, args.nodes)
    if args.op == "send_recv":
        group = (group[0], group[-1]) if len(group) > 1 else group
    try:
        return cluster, build_topology(cluster), group
    except ValueError as exc:
        raise ConfigError(cluster.name, "intra_node.kind", cluster.intra_node.kind, str(exc)) from None


def rows_for(topo, op: str, group: tuple[int, ...], sizes: list[int], algorithm=None, protocol=None,
             model: str = "closed") -> list[dict]:
    """One row per size. ``paths`` counts the independent routes the model spreads the collective over
    (one per NIC rail across nodes; one through an NVSwitch, which carries the full bandwidth): not
    NCCL's channel count, which also splits work that shares a route."""
    rows = []
    for size in sizes:
        try:
            est = estimate(topo, op, group, size, algorithm, protocol)
        except ValueError as exc:
            raise ConfigError("command line", "--algo/--proto", f"{algorithm}/{protocol}", str(exc)) from None
        time_s = est.time_s
        if model == "flow":
            from ..engine.runner import run_calls
            from .algorithms import lower_collective

            time_s = run_calls(topo, [lower_collective(topo, op, group, size, algorithm, protocol)])[0]
        # A one-GPU "collective" moves nothing and takes no time: its bandwidths are undefined (JSON
        # null, "-" in the table), not infinite (``Infinity`` / ``NaN`` are not JSON).
        algbw = size / time_s / 1e9 if time_s > 0 else None
        rows.append(dict(size_bytes=size, time_s=time_s, algbw=algbw,
                         busbw=None if algbw is None else algbw * BUSBW_FACTOR[op](len(group)),
                         algorithm=est.algorithm, protocol=est.protocol, paths=est.channels))
    return rows


def _gbps(x: float | None) -> str:
    return f"{x:>12.2f}" if x is not None else f"{'-':>12}"


def format_rows(title: str, rows: list[dict]) -> str:
    measured = bool(rows) and "measured_time_s" in rows[0]
    head = (f"{'size(B)':>14} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}  {'algorithm':<12} "
            f"{'protocol':<8} paths" + (f" {'measured(us)':>13} {'error(%)':>9}" if measured else ""))
    lines = [f"# {title}", "#" + head[1:]]
    for r in rows:
        lines.append(f"{r['size_bytes']:>14} {r['time_s'] * 1e6:>12.2f} {_gbps(r['algbw'])} {_gbps(r['busbw'])}  "
                     f"{r['algorithm']:<12} {r['protocol']:<8} "
                     + (f"{r['paths']:>5} {r['measured_time_s'] * 1e6:>13.2f} {r['error_pct']:>+9.1f}" if measured
                        else f"{r['paths']}"))
    if measured:
        lines.append(compare_summary(rows))
    return "\n".join(lines)


def _collective(args: argparse.Namespace) -> int:
    from ..cli import write_output

    if args.compare and args.sizes:
        raise ConfigError("command line", "--sizes", args.sizes, "--compare takes the sizes from its log")
    measured = read_nccl_tests(args.compare) if args.compare else []
    sizes = [size for size, _ in measured] or parse_sizes(args.sizes or "8:1G")
    cluster, topo, group = _load(args)
    rows = rows_for(topo, args.op, group, sizes, args.algo, args.proto, args.model)
    for row, (_, seconds) in zip(rows, measured):
        row.update(measured_time_s=seconds, error_pct=100.0 * (row["time_s"] / seconds - 1.0))
    nodes = len({topo.node_of(r) for r in group})
    title = (f"{args.op} on {cluster.name}: {len(group)} x {cluster.gpu.name} on {nodes} node(s), "
             f"{args.model} model")
    if args.json != "-":
        print(format_rows(title, rows))
    if args.json:
        write_output(args.json, json.dumps(rows, indent=2), "--json")
    return 0
