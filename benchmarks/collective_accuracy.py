"""Accuracy of the collective model against measured NCCL times, beside a plain alpha-beta baseline.

Usage: python benchmarks/collective_accuracy.py [--data DIR] [--out benchmarks/results]

Measurements (read from ../shared/data, never copied; units converted here, once per source):
* Vidur (MLSys'24) network/{a100_dgx, a100_pairwise_nvlink}/{all_reduce, send_recv}: torch.distributed,
  median of CUDA-event times (ms), size in bytes.
* vTrain (MICRO'24) trace/{a100, v100}/AR_GPU{2..8}: nccl-tests all-reduce, out-of-place time (ns).
* Aceso profiles in Sailor: prim_*_{all_reduce, all_gather, reduce_scatter, all_to_all}_{n}gpus.csv
  (size in MB = MiB: the sizes are the models' tensors, e.g. GPT-Neo 2048 x 2560 x 2 B = "10"; time ms) and
  p2p_intra_node.csv (MiB/ms by size in MiB), for five GPU boxes.
* Published bus bandwidths (shared/docs/network-model.md section 3): the anchors.

Each source's timing method adds its own overhead to the NCCL kernel time the model predicts; it is
modelled here (never in the simulator) with a few constants per source, fitted over all of that source's
systems at once (``fit_harness``): vTrain's nccl-tests drive all GPUs from one process (a launch floor of
a + n x c per call); Vidur's torch timing adds a constant; Aceso's host clock around each torch call adds
a constant per operation (torch wraps each collective differently: the list forms of all_gather and
reduce_scatter launch extra copy kernels and flatten or split the lists, all_to_all groups a send and a
receive per peer; send/recv is a separate bandwidth script), and the list collectives copy the gathered
output / scattered input, or for all_to_all the rank's own chunk (bytes / memory bandwidth). Vidur's
send/recv times the sender, which finishes a buffer ahead of the receiver (``sender_s``). Both the model
and the baseline get the same harness. The clusters are the shipped topologies/*.yaml; the boxes behind
Aceso and Vidur are inferred from the data (see each YAML's comment).
"""
from __future__ import annotations

import argparse
import csv
import functools
import gzip
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.collectives import tuning  # noqa: E402
from simulator.collectives.cost import BUSBW_FACTOR, estimate  # noqa: E402
from simulator.loading import load_cluster  # noqa: E402
from simulator.topology import build_topology, route  # noqa: E402
from simulator.topology.links import gpu_family  # noqa: E402
from simulator.topology.routing import bottleneck_bytes_per_s, route_latency_s  # noqa: E402

from collective_anchors import ANCHOR_SIZE, anchors, held_out, mid_size_curve  # noqa: E402

DECADES = [(0, 1e4, "<10K"), (1e4, 1e5, "10K-100K"), (1e5, 1e6, "100K-1M"), (1e6, 1e7, "1M-10M"),
           (1e7, 1e8, "10M-100M"), (1e8, 1e9, "100M-1G"), (1e9, math.inf, ">=1G")]
MIB = 2**20


@dataclass(frozen=True)
class Point:
    system: str
    source: str  # vidur | vtrain | aceso
    cluster: str
    nodes: int
    op: str
    group: tuple[int, ...]
    size_bytes: float  # nccl-tests convention
    time_s: float
    copy_bytes: float = 0.0  # bytes the harness copies on the device (Aceso list collectives)


# ---- loaders: one per source, units converted here -------------------------------------------------------

def _vidur(data: Path) -> list[Point]:
    out = []
    boxes = {"a100_dgx": ("dgx-a100", "dgx-a100-2node-200gbe"),
             "a100_pairwise_nvlink": ("a100-pcie-nvlink-pairs", "a100-pcie-nvlink-pairs")}
    for box, (intra, multi) in boxes.items():
        for op in ("all_reduce", "send_recv"):
            path = data / "vidur" / "network" / box / f"{op}.csv.gz"
            with gzip.open(path, "rt") as fh:
                for row in csv.DictReader(fh):
                    n, ppn = int(row["num_workers"]), int(row["devices_per_node"])
                    nodes = n // ppn
                    name = intra if nodes == 1 else multi
                    g = load_cluster(name).gpus_per_node
                    group = tuple(k * g + i for k in range(nodes) for i in range(ppn))
                    if op == "send_recv":
                        group = (group[0], group[-1])
                    system = f"vidur {box}" + ("" if nodes == 1 else " (2 nodes)")
                    out.append(Point(system, "vidur", name, nodes, op, group, float(row["size"]),
                                     float(row[f"time_stats.{op}.median"]) * 1e-3))
    return out


def _vtrain(data: Path) -> list[Point]:
    out = []
    for gpu, name in (("a100", "dgx-a100"), ("v100", "dgx1-v100")):
        for n in range(2, 9):
            path = data / "vtrain" / "trace" / gpu / f"AR_GPU{n}_1M_1024M_LUT"
            for row in list(csv.reader(path.open()))[1:]:
                out.append(Point(f"vtrain {gpu}", "vtrain", name, 1, "all_reduce", tuple(range(n)), float(row[0]),
                                 float(row[3]) * 1e-9))
    return out


ACESO_BOXES = {"A100-40": "hgx-a100-8gpu-40gb", "V100-16": "v100x4-power9", "RTX-2080": "rtx2080ti-x8-pcie",
               "RTX-3090": "rtx3090x4-nvlink-pairs", "Titan-RTX": "titan-rtx-x8-pcie"}
#: (Aceso folder, GPU count) measured on another box than the folder's smaller groups (see the YAML).
ACESO_BOXES_BY_COUNT = {("RTX-3090", 8): "rtx3090x8-pcie"}


def _aceso(data: Path) -> list[Point]:
    out = []
    for gpu, box in ACESO_BOXES.items():
        base = data / "sailor" / "aceso" / gpu / "profiled-data-fp16"
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            for n in (2, 4, 8):
                name = ACESO_BOXES_BY_COUNT.get((gpu, n), box)
                per_node = load_cluster(name).gpus_per_node
                times: dict[float, list[float]] = {}
                for path in sorted(base.glob(f"prim_*_{op}_{n}gpus.csv")):
                    for row in list(csv.reader(path.open()))[1:]:
                        mb, ms = float(row[0]), float(row[1])
                        if 0 < mb < 1e5 and ms < 1e5:  # 1e9 / 1e6 rows mark sizes that failed
                            times.setdefault(mb, []).append(ms)
                for mb, ms in sorted(times.items()):
                    size = mb * MIB
                    # torch list collectives: all_gather(list, t) gathers n x t and copies it out;
                    # reduce_scatter(t, list) copies the list in. all_to_all(list, list) sends and receives
                    # each tensor in place (ncclSend / ncclRecv per peer), and the rank's own 1/n of it is a
                    # copy in device memory: with the whole output copied instead, the 2-GPU all-to-alls of
                    # the A100, V100 and RTX 3090 boxes came out 1.2-1.33x slow at large sizes.
                    total, copy = {"all_gather": (n * size, n * size), "reduce_scatter": (size, size),
                                   "all_to_all": (size, size / n)}.get(op, (size, 0.0))
                    out.append(Point(f"aceso {gpu}", "aceso", name, -(-n // per_node), op, tuple(range(n)), total,
                                     sorted(ms)[len(ms) // 2] * 1e-3, copy))
        p2p = list(csv.reader((base / "p2p_intra_node.csv").open()))
        for mb, gbps in zip(p2p[0], p2p[1]):
            out.append(Point(f"aceso {gpu}", "aceso", box, 1, "send_recv", (0, 1), float(mb) * MIB,
                             float(mb) / float(gbps) * 1e-3))
    return out


# ---- models ------------------------------------------------------------------------------------------------

_TOPOS: dict[tuple[str, int], object] = {}


def topo_for(name: str, nodes: int):
    key = (name, nodes)
    if key not in _TOPOS:
        _TOPOS[key] = build_topology(load_cluster(name, nodes))
    return _TOPOS[key]


def model_s(p: Point) -> float:
    return estimate(topo_for(p.cluster, p.nodes), p.op, p.group, p.size_bytes).time_s


def alpha_beta_s(p: Point) -> float:
    """A plain alpha-beta ring over the same graph: alpha = steps x the slowest hop's latency,
    beta = 1 / the slowest hop's capacity (no protocols, channels, NCCL constants or efficiencies)."""
    topo = topo_for(p.cluster, p.nodes)
    n, g = len(p.group), p.group
    if p.op in ("send_recv", "all_to_all"):
        hops = [route(topo, a, b) for a in g for b in g if a != b]
        steps = 1
    else:
        hops = [route(topo, a, b) for a, b in zip(g, g[1:] + g[:1])]
        steps = {"all_reduce": 2 * (n - 1)}.get(p.op, n - 1)
    alpha = steps * max(route_latency_s(topo, h) for h in hops)
    beta = 1.0 / min(bottleneck_bytes_per_s(topo, h) for h in hops)
    return alpha + BUSBW_FACTOR[p.op](n) * p.size_bytes * beta


def harness_s(p: Point, kernel_s: float, h: dict) -> float:
    """The measured time the source's timing method would report for a kernel of ``kernel_s``."""
    if p.source == "vtrain":
        return max(kernel_s, h["vtrain_floor_s"] + len(p.group) * h["vtrain_launch_s"])
    if p.source == "vidur":
        if p.op == "send_recv":
            kernel_s = sender_s(p, kernel_s, h)
        return kernel_s + h[f"vidur_{p.op}_s"]
    mem = topo_for(p.cluster, p.nodes).cluster.gpu.memory_bandwidth_bytes_per_s
    return kernel_s + h[f"aceso_{p.op}_s"] + 2 * p.copy_bytes / (mem * h["aceso_copy_efficiency"])


def sender_s(p: Point, kernel_s: float, h: dict) -> float:
    """The sender's time of a send that takes ``kernel_s`` to arrive: NCCL's sender finishes once its last
    byte is in the connection's buffers, up to a buffer ahead of the receiver; until they fill it writes at its
    own side's rate, then at the route's. Two transports give the sender a side of its own: sockets (the GPU
    hands its bytes to its proxy; ``vidur_buffer_bytes`` of buffers) and NCCL's P2P read over GA100 NVLink
    (NCCL's default there: the sender copies into its own FIFO and the receiver pulls; ``vidur_p2p_buffer_bytes``
    ahead, copied at ``vidur_copy_Bps``). Same time where both sides run at one rate (a proxy-bound network)."""
    rates = _sender_rates(p.cluster, p.nodes, p.group)
    if rates is None:
        return kernel_s
    handoff_s, r_own, r = rates
    if handoff_s is None:  # P2P read
        handoff_s, r_own, buffer_bytes = kernel_s - p.size_bytes / r, h["vidur_copy_Bps"], h["vidur_p2p_buffer_bytes"]
    else:
        buffer_bytes = h["vidur_buffer_bytes"]
    return max(handoff_s + p.size_bytes / r_own, kernel_s - buffer_bytes / r)


@functools.cache
def _sender_rates(cluster: str, nodes: int, group: tuple[int, ...]):
    """(hand-off latency, sender-side rate, route rate) of a send across nodes whose sender side is the
    faster; (None, None, route rate) of a P2P-read send (GA100 over NVLink only); else None (computed once per
    route: the harness fit calls ``sender_s`` for every grid value)."""
    topo = topo_for(cluster, nodes)
    edges = route(topo, *group)
    kinds = [topo.graph.edges[e]["kind"] for e in edges]
    if set(kinds) == {"nvlink"} and gpu_family(topo.cluster.gpu.name) == "ga100":  # compute capability 8.0
        return None, None, bottleneck_bytes_per_s(topo, edges)
    own = edges[:kinds.index("net")] if "net" in kinds else edges
    r_own, r = bottleneck_bytes_per_s(topo, own), bottleneck_bytes_per_s(topo, edges)
    if "net" not in kinds or r_own <= r * (1 + 1e-9):
        return None
    return route_latency_s(topo, own) + tuning.NET_OVERHEAD_US * 3 * 1e-6, r_own, r  # NCCL's Simple proxy post


_US = [i * 5e-6 for i in range(0, 61)]
GRID = {"vtrain_floor_s": [i * 2e-6 for i in range(0, 31)], "vtrain_launch_s": [i * 1e-6 for i in range(0, 21)],
        **{f"vidur_{op}_s": [i * 2e-6 for i in range(0, 51)] for op in ("all_reduce", "send_recv")},
        **{f"aceso_{op}_s": _US for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")},
        "aceso_copy_efficiency": [0.3 + 0.05 * i for i in range(15)],
        "vidur_buffer_bytes": [i * MIB / 4 for i in range(33)],
        "vidur_copy_Bps": [240e9 + 20e9 * i for i in range(14)],
        "vidur_p2p_buffer_bytes": [i * 2 * MIB for i in range(33)]}


def fit_harness(points: list[Point], kernel: list[float]) -> dict:
    """Per source, the harness constants minimising the mean of that source's MAPE cells (each system's
    messages below and from 1 MiB, the issue's targets), by coordinate grid search."""
    h = {k: v[0] for k, v in GRID.items()}
    for _ in range(3):
        for key, values in GRID.items():
            source = key.split("_")[0]
            cells: dict[tuple, list] = {}
            for p, k in zip(points, kernel):
                if p.source == source:
                    cells.setdefault((p.system, p.size_bytes < MIB), []).append((p, k))
            h[key] = min(values, key=lambda v: sum(
                _mape([harness_s(p, k, dict(h, **{key: v})) for p, k in sel], [p.time_s for p, _ in sel])
                for sel in cells.values()))
    return h


def _mape(pred: list[float], meas: list[float]) -> float:
    return 100.0 * sum(abs(a - b) / b for a, b in zip(pred, meas)) / max(len(meas), 1)


# ---- report -------------------------------------------------------------------------------------------------

def summarise(points, model, base, raw) -> dict:
    systems: dict[str, dict] = {}
    for p, m, b, r in zip(points, model, base, raw):
        s = systems.setdefault(p.system, {"decades": {}, "small": [], "large": []})
        label = next(lbl for lo, hi, lbl in DECADES if lo <= p.size_bytes < hi)
        s["decades"].setdefault(label, []).append((m, b, r, p.time_s))
        s["small" if p.size_bytes < MIB else "large"].append((m, b, r, p.time_s))
    out = {}
    for name, s in sorted(systems.items()):
        def stats(rows):
            meas = [t for *_, t in rows]
            return {"n": len(rows), "model": _mape([x[0] for x in rows], meas),
                    "alpha_beta": _mape([x[1] for x in rows], meas), "model_raw": _mape([x[2] for x in rows], meas)}
        out[name] = {"decades": {lbl: stats(s["decades"][lbl]) for _, _, lbl in DECADES if lbl in s["decades"]},
                     "below_1MiB": stats(s["small"]), "from_1MiB": stats(s["large"])}
    return out


#: The least share of a system's MAPE (points) a group needs to be listed under "Where the error is".
MIN_SHARE_PP = 1.5


def contributors(points, model, min_share_pp: float = MIN_SHARE_PP) -> list[dict]:
    """Where each system's MAPE comes from: per (system, size half, op, GPUs) the points, their MAPE, the
    points of the system's MAPE in that half they carry (``share_pp``; a half's shares add up to its MAPE)
    and their median predicted / measured; the groups carrying at least ``min_share_pp``, largest first."""
    groups: dict[tuple, list[float]] = {}
    for p, m in zip(points, model):
        half = "<1 MiB" if p.size_bytes < MIB else ">=1 MiB"
        groups.setdefault((p.system, half, p.op, len(p.group)), []).append(m / p.time_s)
    sizes: dict[tuple, int] = {}
    for (system, half, *_), r in groups.items():
        sizes[system, half] = sizes.get((system, half), 0) + len(r)
    rows = [{"system": system, "sizes": half, "op": op, "gpus": n, "n": len(r),
             "mape": _mape(r, [1.0] * len(r)), "share_pp": 100.0 * sum(abs(x - 1) for x in r) / sizes[system, half],
             "median_ratio": sorted(r)[len(r) // 2]} for (system, half, op, n), r in groups.items()]
    return sorted((r for r in rows if r["share_pp"] >= min_share_pp), key=lambda r: -r["share_pp"])


def markdown(summary: dict, harness: dict, anchor_rows: list[dict], curve_rows: list[dict],
             held_rows: list[dict], contributor_rows: list[dict]) -> str:
    lines = ["# Collective model accuracy", "",
             "MAPE (%) of predicted vs measured call time, per system and message-size decade (bytes);",
             "each cell: model / alpha-beta baseline (n = points). `raw` = the model without the timing-harness",
             "overhead. Regenerate: `python benchmarks/collective_accuracy.py`.", "",
             "| system | <1 MiB: model / a-b (raw) | >=1 MiB: model / a-b (raw) | " + " | ".join(l for *_, l in DECADES) + " |",
             "|---|---|---|" + "---|" * len(DECADES)]
    for name, s in summary.items():
        def cell(st):
            return f"{st['model']:.1f} / {st['alpha_beta']:.1f} ({st['model_raw']:.1f}) n={st['n']}" if st["n"] else "-"
        dec = [f"{s['decades'][l]['model']:.1f} / {s['decades'][l]['alpha_beta']:.1f}" if l in s["decades"] else "-"
               for *_, l in DECADES]
        lines.append(f"| {name} | {cell(s['below_1MiB'])} | {cell(s['from_1MiB'])} | " + " | ".join(dec) + " |")
    lines += ["", f"Where the error is: the (system, sizes, op, GPUs) groups carrying at least {MIN_SHARE_PP:g} points of their system's",
              "MAPE in that size half (`share`: the half's shares add up to its MAPE); `ratio` = median predicted / measured.", "",
              "| system | sizes | op | GPUs | n | MAPE | share | ratio |", "|---|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {c['system']} | {c['sizes']} | {c['op']} | {c['gpus']} | {c['n']} | {c['mape']:.1f} | "
              f"{c['share_pp']:.1f} | {c['median_ratio']:.2f} |" for c in contributor_rows]
    lines += ["", "Timing-harness constants fitted per source (all its systems at once):", ""]
    lines += [f"- `{k}` = {v:.3g}" for k, v in harness.items()]
    lines += ["", NOTES]
    lines += ["", f"## Published bus bandwidth anchors (all-reduce at {ANCHOR_SIZE // 2**30} GiB)", "",
              "| anchor | measured GB/s | model GB/s | error % | source |", "|---|---|---|---|---|"]
    lines += [f"| {a['anchor']} | {a['measured_GBps']} | {a['model_GBps']} | {a['error_pct']:+.1f} | {a['source']} |"
              for a in anchor_rows]
    lines += ["", "## Held-out mid-size curve: HGX H200 all-reduce, 8 GPUs (stas00; not fitted)", "",
              "| size MiB | measured GB/s | model GB/s | algorithm | error % |", "|---|---|---|---|---|"]
    lines += [f"| {c['size_MiB']} | {c['measured_GBps']} | {c['model_GBps']} | {c['algorithm']} | {c['error_pct']:+.1f} |"
              for c in curve_rows]
    lines += ["", "## Held-out systems: all-reduce bus bandwidth (published; not fitted, not targets)", "",
              "| system | size MiB | measured GB/s | model GB/s | model's algorithm | error % | source |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {c['anchor']} | {c['size_MiB']} | {c['measured_GBps']} | {c['model_GBps']} | {c['algorithm']} | "
              f"{c['error_pct']:+.1f} | {c['source']} |" for c in held_rows]
    return "\n".join(lines) + "\n"


#: The table's notes: what the model fits and what the boxes are (kept as markdown beside this script).
NOTES = (Path(__file__).with_name("collective_notes.md")).read_text()


def data_dir(arg: str | None) -> Path:
    for cand in [arg, os.environ.get("SIMULATOR_DATA"), str(ROOT.parent / "shared" / "data")]:
        if cand and Path(cand).is_dir():
            return Path(cand)
    raise SystemExit("measured data not found: pass --data DIR or set SIMULATOR_DATA")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="the shared data folder (default: $SIMULATOR_DATA or ../shared/data)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="where to write the tables")
    args = ap.parse_args(argv)
    data = data_dir(args.data)
    points = _vidur(data) + _vtrain(data) + _aceso(data)
    kernel = [model_s(p) for p in points]
    base_kernel = [alpha_beta_s(p) for p in points]
    harness = fit_harness(points, kernel)
    model = [harness_s(p, k, harness) for p, k in zip(points, kernel)]
    base = [harness_s(p, k, harness) for p, k in zip(points, base_kernel)]
    summary = summarise(points, model, base, kernel)
    contributor_rows = contributors(points, model)
    anchor_rows, curve_rows, held_rows = anchors(topo_for), mid_size_curve(topo_for), held_out()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(summary, harness, anchor_rows, curve_rows, held_rows, contributor_rows)
    (out / "collective_accuracy.md").write_text(text)
    (out / "collective_accuracy.json").write_text(json.dumps(
        {"summary": summary, "harness": harness, "anchors": anchor_rows, "mid_size_curve": curve_rows,
         "held_out": held_rows, "contributors": contributor_rows, "points": len(points)}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
