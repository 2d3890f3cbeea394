"""Simulation speed versus cluster size: GPT-3 175B, tp=8, pp=8, 64 micro-batches per step, data-parallel
degree growing with the GPU count on DGX H100 nodes (rail-optimised NDR fabric).

With one representative rank per pipeline stage the event count should stay flat as GPUs grow; the
wall time grows only with the routing/flow work of the larger data-parallel rings.
Usage: python benchmarks/scale_speed.py [--quick]. Writes benchmarks/results/scale_speed.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.api import program_for, simulate  # noqa: E402
from simulator.loading import cluster_from_mapping, load_workload, read_mapping, resolve_file  # noqa: E402
from simulator.specs import PlanSpec  # noqa: E402

MICRO_BATCHES = 64


def measure(gpus: int, predictor: str) -> dict:
    dp = gpus // 64
    path = resolve_file("dgx-h100-128node", "topologies", "--cluster")
    cluster = cluster_from_mapping(dict(read_mapping(path), nodes=gpus // 8), str(path))  # may exceed 128 nodes
    model = load_workload("gpt3-175b")
    plan = PlanSpec(dp=dp, tp=8, pp=8, micro_batch_size=1, global_batch_size=dp * MICRO_BATCHES, dtype="bf16")
    start = time.perf_counter()
    result = simulate(cluster, model, plan, predictor)
    wall = time.perf_counter() - start
    tasks = len(program_for(cluster, model, plan, predictor).tasks)
    return dict(gpus=gpus, dp=dp, tasks=tasks, events=result.events, wall_s=wall, step_time_s=result.step_time_s,
                mfu=result.mfu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only 64 and 512 GPUs")
    ap.add_argument("--predictor", default="roofline")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    sizes = [64, 512] if args.quick else [64, 256, 1024, 4096]
    rows = [measure(n, args.predictor) for n in sizes]
    lines = ["# Simulation speed vs cluster size", "",
             f"GPT-3 175B, tp=8 pp=8, {MICRO_BATCHES} micro-batches per step, bf16, predictor {args.predictor}; "
             f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}.",
             "Command: `python benchmarks/scale_speed.py`.", "",
             "| GPUs | dp | tasks | SimPy events | wall time | simulated step | MFU |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['gpus']} | {r['dp']} | {r['tasks']:,} | {r['events']:,} | {r['wall_s']:.2f} s | "
                     f"{r['step_time_s']:.3f} s | {100 * r['mfu']:.1f}% |")
    md = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale_speed.md").write_text(md)
    (args.out / "scale_speed.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
