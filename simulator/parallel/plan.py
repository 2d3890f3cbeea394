"""Feasibility of a plan on a cluster and model: every reason a plan cannot run, as InfeasiblePlan."""
from __future__ import annotations

from ..errors import InfeasiblePlan
from ..specs import ClusterSpec, PlanSpec, WorkloadSpec

#: Micro-batches per step the engine will run, one by one (GPT-3 175B on 1,024 H100s: ~75 ms each; realistic
#: steps have at most a few thousand). A global batch of 10^20 sequences otherwise ran until killed.
MAX_MICRO_BATCHES = 100_000
#: Layer passes (layers per stage x micro-batches) per step, likewise: 10^9 layers ran until killed, while a
#: 1,000-layer model (DeepNet) at 1,000 micro-batches is 10^6 (GPT-3 175B at tp8 pp8, 96 micro-batches: 1,152).
MAX_LAYER_PASSES = 1_000_000
#: Keys per row Megatron-LM's fused softmax kernels take (``FusedScaleMaskSoftmax.is_kernel_available``:
#: 16 < keys <= 16384 in current releases, at most 2048, then 4096 in earlier ones). Outside it, and in
#: fp32, Megatron runs the torch path, which is ``attention: unfused``.
FUSED_SOFTMAX_KEYS = (17, 16384)


def _reasons(plan: PlanSpec, cluster: ClusterSpec, model: WorkloadSpec) -> list[str]:
    reasons = []
    if plan.num_gpus != cluster.num_gpus:
        reasons.append(
            f"dp*tp*pp = {plan.dp}*{plan.tp}*{plan.pp} = {plan.num_gpus} but the cluster '{cluster.name}' has "
            f"{cluster.num_gpus} GPUs ({cluster.nodes} node{'s' if cluster.nodes > 1 else ''} x {cluster.gpus_per_node})")
    if model.heads % plan.tp:
        reasons.append(f"tp={plan.tp} does not divide {model.heads} attention heads")
    elif model.num_kv_heads % plan.tp:
        reasons.append(f"tp={plan.tp} does not divide {model.num_kv_heads} key/value heads")
    if model.ffn_hidden % plan.tp:
        reasons.append(f"tp={plan.tp} does not divide ffn_hidden={model.ffn_hidden}")
    if model.layers % plan.pp:
        reasons.append(f"pp={plan.pp} does not divide {model.layers} layers")
    per_step = plan.dp * plan.micro_batch_size
    if plan.global_batch_size % per_step:
        reasons.append(
            f"global batch {plan.global_batch_size} is not a multiple of dp*micro-batch = "
            f"{plan.dp}*{plan.micro_batch_size} = {per_step}")
    elif plan.num_micro_batches > MAX_MICRO_BATCHES:
        reasons.append(
            f"global batch {plan.global_batch_size} makes {plan.num_micro_batches:,} micro-batches per step "
            f"(dp*micro-batch = {per_step}); the simulator runs each one and takes at most {MAX_MICRO_BATCHES:,}")
    elif not model.layers % plan.pp and (model.layers // plan.pp) * plan.num_micro_batches > MAX_LAYER_PASSES:
        per_stage = model.layers // plan.pp
        reasons.append(
            f"{per_stage:,} layers per stage x {plan.num_micro_batches:,} micro-batches = "
            f"{per_stage * plan.num_micro_batches:,} layer passes per stage; the simulator runs each "
            f"one and takes at most {MAX_LAYER_PASSES:,}")
    if plan.attention == "fused-softmax":
        if not plan.mixed_precision:
            reasons.append(f"attention fused-softmax is a half-precision kernel, not for dtype {plan.dtype} "
                           "(Megatron runs fp32 attention unfused)")
        lo, hi = FUSED_SOFTMAX_KEYS
        if not lo <= model.seq_len <= hi:
            reasons.append(f"attention fused-softmax takes {lo}-{hi:,} keys, not seq_len {model.seq_len:,} "
                           "(Megatron falls back to attention unfused)")
    if not cluster.gpu.supports(plan.dtype):
        reasons.append(f"{cluster.gpu.name} has no {plan.dtype} support (it has {', '.join(cluster.gpu.peak_flops_per_s)})")
    return reasons


def check_plan(plan: PlanSpec, cluster: ClusterSpec, model: WorkloadSpec) -> None:
    """Raise InfeasiblePlan naming every violated constraint; return None if the plan can run."""
    reasons = _reasons(plan, cluster, model)
    if reasons:
        raise InfeasiblePlan("infeasible plan: " + "; ".join(reasons))
