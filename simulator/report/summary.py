"""SimulationResult -> a readable text summary."""
from __future__ import annotations

from ..result import SimulationResult


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}%" if whole > 0 else "  -  "


def format_summary(r: SimulationResult) -> str:
    p = r.plan
    lines = [
        f"{r.workload} on {r.cluster} ({r.num_gpus} x {r.gpu}), predictor: {r.predictor}",
        f"plan: dp={p['dp']} tp={p['tp']} pp={p['pp']} micro-batch={p['micro_batch_size']} "
        f"global-batch={p['global_batch_size']} ({p['global_batch_size'] // (p['dp'] * p['micro_batch_size'])} "
        f"micro-batches) schedule={p['schedule']} dtype={p['dtype']}"
        + (f" attention={p['attention']}" if p.get("attention", "auto") != "auto" else "")
        + (f" recompute={p['recompute']}" if p.get("recompute", "none") != "none" else "")
        + (f" loss={p['loss']}" if p.get("loss", "fused") != "fused" else "")
        + (f" host-overhead={p['host_overhead_s'] * 1e6:g}us" if p.get("host_overhead_s") else ""),
        "",
        f"step time        {_time(r.step_time_s)}",
        f"  compute        {_time(r.compute_s):>12}  {_pct(r.compute_s, r.step_time_s)}",
        f"  exposed comm   {_time(r.exposed_comm_s):>12}  {_pct(r.exposed_comm_s, r.step_time_s)}",
        f"  bubble / idle  {_time(r.bubble_s):>12}  {_pct(r.bubble_s, r.step_time_s)}",
        f"throughput       {r.tokens_per_s:,.0f} tokens/s",
        f"MFU              {100 * r.mfu:.1f}% of {r.peak_flops_per_gpu / 1e12:.1f} TFLOP/s {p['dtype']} peak per GPU",
    ]
    verdict = "fits" if r.fits_in_memory else "OUT OF MEMORY"
    lines.append(f"memory per GPU   {_gib(r.peak_memory_bytes)} of {_gib(r.gpu_memory_bytes)} ({verdict})")
    worst = max(r.memory, key=lambda m: m.estimate.total_bytes).estimate
    lines.append(f"  weights {_gib(worst.weights_bytes)}, grads {_gib(worst.gradients_bytes)}, "
                 f"optimizer {_gib(worst.optimizer_bytes)}, activations {_gib(worst.activations_bytes)}")
    if r.cost_per_step_usd is not None:
        lines.append(f"cost             ${r.cost_per_step_usd:.4f} per step, "
                     f"${r.cost_per_million_tokens_usd:.3f} per million tokens")
    return "\n".join(lines)
