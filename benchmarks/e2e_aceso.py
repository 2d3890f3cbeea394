"""Aceso's whole-layer times (``sailor/aceso/layer_time/<GPU>.csv``) against the simulator's layer.

What the files hold, read off the per-op profiles beside them (the data README says only "whole
transformer layer forward/backward (s) by micro-batch and TP"): OPT-350M's layer (hidden 1024, 16 heads,
FFN 4096, 2,048 tokens per sequence) in fp32 under Megatron-LM, timed forward and backward with host
clocks, micro-batch 1-8, tensor parallel 1-4 (1-8 on the 8-GPU boxes). At tp 1 each forward is 0.95-0.99x
the sum of the same GPU's per-op OPT-350M fp32 profile at the same micro-batch, on all five GPUs (the per-op
harness times each op alone, so the sum carries its overhead once per op); the nearest other profile,
GPT-Neo-2.7B in fp16, is 0.76-1.39x depending on the GPU, the others 1.6-4.2x or under 0.45x.
``algo`` 0 is Megatron's tensor parallelism: the per-op profile puts the all-reduce in the projection's and
FC2's forward and in QKV's and FC1's backward. ``algo`` 1 (another split) is not the lowering's, so skipped.

Simulated: the lowering's ``layer_forward`` / ``layer_backward`` of that shard (fp32, unfused attention;
TF32 GEMMs on Ampere as in the kernel data, ``dataset.load_aceso``), on the box the collective benchmark
found for that GPU's profiles (``collective_accuracy.ACESO_BOXES``): kernels summed per segment by the
predictor, each tensor-parallel all-reduce by the closed-form collective model on ranks 0 .. tp-1. Two
things of Aceso's Megatron the generic lowering does not do, both seen in its per-op profile (aceso.py):

* the fp32 softmax runs the torch path with query-key layer scaling: one more elementwise pass (the scale)
  forward and backward;
* the profiler computes no weight gradients of the linear layers (their backward equals their forward, one
  GEMM), so the layer's backward has no ``wgrad`` GEMMs here either.

No host time per kernel (``PlanSpec.host_overhead_s``): where the layer's kernels are short (the A100 at
tp > 1) the measured times sit on the host's pace, which this source cannot tell apart from the GPU's.
The shipped weights were trained on these GPUs' per-op profiles (tp 1), so this checks the lowering and
the collectives in place, not the kernel model on unseen GPUs.
"""
from __future__ import annotations

import csv
from pathlib import Path

from collective_accuracy import ACESO_BOXES, ACESO_BOXES_BY_COUNT

from simulator.collectives.cost import estimate
from simulator.hardware import load_gpu
from simulator.loading import load_cluster
from simulator.parallel.lowering import ComputeSegment, segments
from simulator.predictor.dataset import ACESO_GPUS
from simulator.predictor.kernels import vector
from simulator.specs import WorkloadSpec
from simulator.topology import build_topology
from simulator.workload.transformer import Compute, Shard, Step, layer_backward, layer_forward

OPT_350M = WorkloadSpec(name="opt-350m", layers=24, hidden=1024, heads=16, ffn_hidden=4096, vocab=50272,
                        seq_len=2048)


def layer_cases(data: Path) -> list[dict]:
    """One dict per (GPU folder, micro-batch, tp) of Megatron's split (algo 0), times in seconds."""
    out = []
    for folder in ACESO_GPUS:
        path = data / "sailor" / "aceso" / "layer_time" / f"{folder}.csv"
        if not path.is_file():
            continue
        with path.open() as fh:
            for row in csv.DictReader(fh):
                if row["algo"] == "0":
                    out.append(dict(gpu=folder, micro_batch=int(row["mbs"]), tp=int(row["tp"]),
                                    fwd_s=float(row["fwd"]), bwd_s=float(row["bwd"])))
    return out


def megatron_steps(sh: Shard, backward: bool) -> list[Step]:
    """The lowering's layer as Aceso's Megatron runs it in fp32 (module docstring)."""
    out: list[Step] = []
    for step in layer_backward(sh) if backward else layer_forward(sh):
        if step.name.endswith(".wgrad"):
            continue
        if step.name == "attn.mask":
            out.append(Compute("attn.scale", vector("mul_scalar", *step.kernel.shape, step.kernel.dtype)))
        out.append(step)
        if step.name == "attn.mask_bwd":
            out.append(Compute("attn.scale_bwd", vector("mul_scalar", *step.kernel.shape, step.kernel.dtype)))
    return out


def layer_time_s(steps: list[Step], predictor, cluster, topo, tp: int) -> float:
    """Compute segments by the predictor plus the collectives by the closed form, one after another (every
    tensor-parallel all-reduce waits for the GEMM before it and the next kernel for it)."""
    total = 0.0
    for seg in segments(steps, predictor, cluster):
        if isinstance(seg, ComputeSegment):
            total += seg.duration_s
        else:
            total += estimate(topo, seg.collective, tuple(range(tp)), seg.size_bytes).time_s
    return total


def aceso_layers_run(data: Path, preds: dict) -> dict:
    """Every layer case predicted forward and backward by each predictor; MAPE overall, per GPU and per GPU x TP."""
    rows = []
    for case in layer_cases(data):
        gpu = load_gpu(ACESO_GPUS[case["gpu"]])
        box = load_cluster(ACESO_BOXES_BY_COUNT.get((case["gpu"], case["tp"]), ACESO_BOXES[case["gpu"]]))
        cluster = box.model_copy(update=dict(gpu=gpu))  # the kernel data's reading of the GPU (dataset.ACESO_GPUS)
        topo = build_topology(cluster)
        sh = Shard(OPT_350M, case["micro_batch"], case["tp"], "tf32" if "tf32" in gpu.peak_flops_per_s else "fp32",
                   attention="unfused")
        row = dict(case, box=box.name)
        for name, pred in preds.items():
            for part, backward in (("fwd", False), ("bwd", True)):
                t = layer_time_s(megatron_steps(sh, backward), pred, cluster, topo, case["tp"])
                row[f"{name}_{part}_s"] = t
                row[f"{name}_{part}_err_pct"] = round(100 * (t - case[f"{part}_s"]) / case[f"{part}_s"], 2)
        rows.append(row)
    groups: dict[str, list[dict]] = {"all": rows}
    for r in rows:
        groups.setdefault(r["gpu"], []).append(r)
    for r in sorted(rows, key=lambda r: (list(ACESO_GPUS).index(r["gpu"]), r["tp"])):
        groups.setdefault(f"{r['gpu']} tp{r['tp']}", []).append(r)
    summary = {key: {"n": len(sel), **{f"{n}_{part}": sum(abs(r[f"{n}_{part}_err_pct"]) for r in sel) / len(sel)
                                       for n in preds for part in ("fwd", "bwd")}} for key, sel in groups.items()}
    return {"predictors": list(preds), "rows": rows, "mape_pct": summary}


def aceso_layers_markdown(result: dict) -> list[str]:
    names = result["predictors"]
    lines = ["", "## Aceso: one Megatron-LM layer of OPT-350M (fp32, 2,048 tokens) on five GPU boxes", "",
             "Forward and backward of one layer, micro-batch 1-8, tensor parallel 1-8, against Sailor's",
             "`layer_time` files; composition and caveats in `benchmarks/e2e_aceso.py`. MAPE per GPU and per",
             "GPU x TP; every row in `e2e_accuracy.json` (`aceso_layers.rows`).", "",
             "| GPU (box) | n | " + " | ".join(f"{n} fwd | {n} bwd" for n in names) + " |",
             "|---|---|" + "---|---|" * len(names)]
    boxes: dict[str, dict[str, None]] = {}  # per GPU folder its boxes, in order (a dict as an ordered set)
    for r in result["rows"]:
        boxes.setdefault(r["gpu"], {})[r["box"]] = None
    for key, s in result["mape_pct"].items():
        label = f"{key} ({', '.join(boxes[key])})" if key in boxes else key
        lines.append(f"| {label} | {s['n']} | " + " | ".join(f"{s[f'{n}_fwd']:.1f}% | {s[f'{n}_bwd']:.1f}%"
                                                            for n in names) + " |")
    return lines
