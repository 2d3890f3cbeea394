import pytest

from simulator.specs import PlanSpec
from simulator.workload import memory
from simulator.workload.transformer import (Collective, Compute, embedding_backward, embedding_forward, head_backward,
                                            head_forward, layer_backward, layer_forward, make_shard, optimizer_step)

from conftest import tiny_model


def test_gpt2_large_parameter_count(gpt2_large):
    assert memory.total_params(gpt2_large) == pytest.approx(774.03e6, rel=1e-3)  # HF gpt2-large: 774,030,080


def test_gpt3_175b_parameter_count():
    from simulator.loading import load_workload

    assert memory.total_params(load_workload("gpt3-175b")) == pytest.approx(175e9, rel=0.01)


def test_llama3_8b_parameter_count():
    from simulator.loading import load_workload

    assert memory.total_params(load_workload("llama3-8b")) == pytest.approx(8.03e9, rel=0.01)


def _flops(steps):
    return sum(s.kernel.flops for s in steps if isinstance(s, Compute) and s.kernel.family == "gemm")


def test_layer_gemm_flops_match_megatron_formula(gpt2_large):
    sh = make_shard(gpt2_large, PlanSpec(micro_batch_size=2, global_batch_size=2, dtype="fp32"))
    b, s, h = 2, 1024, 1280
    fwd = 24 * b * s * h * h + 4 * b * s * s * h  # Narayanan et al. 2021, per layer forward
    assert _flops(layer_forward(sh)) == pytest.approx(fwd)
    assert _flops(layer_backward(sh)) == pytest.approx(2 * fwd)


def test_tensor_parallel_splits_flops_and_adds_two_all_reduces_each_way(gpt2_large):
    sh1 = make_shard(gpt2_large, PlanSpec(dtype="fp32"))
    sh4 = make_shard(gpt2_large, PlanSpec(tp=4, dtype="fp32"))
    assert _flops(layer_forward(sh4)) == pytest.approx(_flops(layer_forward(sh1)) / 4)
    for steps in (layer_forward(sh4), layer_backward(sh4)):
        comms = [s for s in steps if isinstance(s, Collective)]
        assert len(comms) == 2 and all(c.size_bytes == 1024 * 1280 * 4 for c in comms)
    assert not any(isinstance(s, Collective) for s in layer_forward(sh1))


def test_flash_attention_for_mixed_precision_only():
    m = tiny_model()
    ops = lambda p: {s.kernel.op for s in layer_forward(make_shard(m, p)) if isinstance(s, Compute)}  # noqa: E731
    assert "flash_attn" in ops(PlanSpec(dtype="bf16")) and "softmax" in ops(PlanSpec(dtype="fp32"))
    assert "flash_attn" in ops(PlanSpec(dtype="fp32", attention="flash"))


def test_unfused_attention_backward_has_the_masks_gradient():
    # masked_fill's backward zeroes the masked scores' gradient: one kernel over the scores, as forward
    m = tiny_model()
    for plan, n in ((PlanSpec(dtype="fp32"), 1), (PlanSpec(dtype="bf16"), 0)):
        sh = make_shard(m, plan)
        fwd = [s.kernel for s in layer_forward(sh) if isinstance(s, Compute) and s.kernel.op == "masked_fill"]
        bwd = [s.kernel for s in layer_backward(sh) if isinstance(s, Compute) and s.kernel.op == "masked_fill"]
        assert len(fwd) == len(bwd) == n and fwd == bwd


def test_fused_softmax_attention_is_one_kernel_each_way_where_unfused_runs_three():
    # Megatron's FusedScaleMaskSoftmax: scale, mask and softmax in one kernel, causal for a decoder
    for arch, op in (("decoder", "softmax_causal"), ("encoder", "softmax")):
        m = tiny_model(architecture=arch)
        plan = PlanSpec(dtype="fp16", attention="fused-softmax")
        sh = make_shard(m, plan)
        fwd = [s.kernel.op for s in layer_forward(sh) if isinstance(s, Compute) and s.kernel.family != "gemm"]
        bwd = [s.kernel.op for s in layer_backward(sh) if isinstance(s, Compute) and s.kernel.family != "gemm"]
        assert fwd.count(op) == 1 and "masked_fill" not in fwd and "flash_attn" not in fwd
        assert bwd.count(f"{op}_bwd") == 1 and "masked_fill" not in bwd and "mul" not in bwd
        unfused = make_shard(m, plan.model_copy(update=dict(attention="unfused")))
        # the same GEMMs and the same attention dropout; only the softmax's passes differ
        gemms = lambda steps: [s.kernel for s in steps if isinstance(s, Compute) and s.kernel.family == "gemm"]  # noqa: E731
        assert gemms(layer_forward(sh)) == gemms(layer_forward(unfused))
        assert gemms(layer_backward(sh)) == gemms(layer_backward(unfused))
        sel = make_shard(m, plan.model_copy(update=dict(recompute="selective")))
        assert [s.kernel.op for s in layer_backward(sel) if s.name == "recompute.attn.softmax"] == [op]


def test_fused_softmax_attention_moves_fewer_bytes_than_unfused():
    def attention_bytes(attention):
        sh = make_shard(tiny_model(), PlanSpec(dtype="bf16", attention=attention))
        return sum(s.kernel.bytes for s in layer_forward(sh) + layer_backward(sh) if isinstance(s, Compute))

    assert attention_bytes("fused-softmax") < attention_bytes("unfused")


def test_no_dropout_kernels_at_probability_zero():
    def dropouts(model, plan):
        sh = make_shard(model, plan)
        steps = embedding_forward(sh) + layer_forward(sh) + layer_backward(sh) + embedding_backward(sh)
        return [s.name for s in steps if isinstance(s, Compute) and s.kernel.op.startswith("dropout")]

    fp32 = PlanSpec(dtype="fp32")  # unfused attention: the attention dropout is a kernel of its own
    assert len(dropouts(tiny_model(), fp32)) == 2 * (1 + 2 + 1)  # embedding, two hidden, attention; each way
    assert dropouts(tiny_model(hidden_dropout=0.0), fp32) == ["attn.dropout", "attn.dropout_bwd"]
    assert len(dropouts(tiny_model(attention_dropout=0.0), fp32)) == 2 * 3
    assert dropouts(tiny_model(hidden_dropout=0.0, attention_dropout=0.0), fp32) == []


def test_activation_memory_without_dropout_drops_masks_and_dropout_outputs():
    s, h, a, t = 128, 256, 8, 2
    p = PlanSpec(tp=t, dtype="bf16")
    for hidden, attention, replicated, per_score in ((0.1, 0.1, 10, 5), (0.0, 0.1, 8, 5), (0.1, 0.0, 10, 2)):
        m = tiny_model(hidden_dropout=hidden, attention_dropout=attention)
        assert memory.activation_bytes_per_layer(m, p, flash=False) == pytest.approx(
            s * h * (replicated + 24 / t + per_score * a * s / (h * t)))


def test_activation_memory_of_gqa_and_swiglu_layers():
    # what tensor parallelism splits: Q, K, V and the projection's input; SwiGLU's gate, up and product
    m = tiny_model(activation="swiglu", kv_heads=2, ffn_hidden=700, hidden_dropout=0.0, attention_dropout=0.0)
    s, h = 128, 256
    split = 2 + 2 * 2 / 8 + 2 * 2 / 8 + 2 + 3 * 2 * 700 / h
    assert memory.activation_bytes_per_layer(m, PlanSpec(tp=4), flash=True) == pytest.approx(s * h * (8 + split / 4))


def test_swiglu_rmsnorm_rope_variants():
    m = tiny_model(activation="swiglu", norm="rmsnorm", position_embedding="rope", kv_heads=2, bias=False)
    ops = [s.kernel.op for s in layer_forward(make_shard(m, PlanSpec())) if isinstance(s, Compute)]
    assert {"swiglu", "rmsnorm", "rope"} <= set(ops)


def test_norm_backward_is_input_then_weight_gradient_kernels():
    # LayerNorm lowers to Megatron's fused kernel; RMSNorm has one kind
    for norm, kernel in (("layernorm", "layernorm_fused"), ("rmsnorm", "rmsnorm")):
        m = tiny_model(norm=norm)
        ops = [s.kernel.op for s in layer_backward(make_shard(m, PlanSpec(dtype="fp32"))) if isinstance(s, Compute)]
        assert ops.count(f"{kernel}_bwd") == 2 and ops.count("norm_weight_bwd") == 2
        assert ops[ops.index(f"{kernel}_bwd") + 1] == "norm_weight_bwd"
        # torch's unfused softmax backward multiplies grad by output before its row kernel
        assert ops[ops.index("softmax_bwd") - 1] == "mul"


def test_loss_all_reduces_only_with_tp():
    m = tiny_model()
    assert not any(isinstance(s, Collective) for s in head_forward(make_shard(m, PlanSpec())))
    assert sum(isinstance(s, Collective) for s in head_forward(make_shard(m, PlanSpec(tp=2)))) == 3


def test_optimizer_step_kernels():
    steps = optimizer_step(1000, "bf16")
    assert [s.kernel.op for s in steps] == ["reduce", "adam"] and steps[1].kernel.shape == (1000,)


def test_memory_mixed_precision_bytes_per_param():
    m = tiny_model()
    p = PlanSpec(dtype="bf16")
    est = memory.stage_memory(m, p, 0, flash=True)
    n = memory.total_params(m)
    assert (est.weights_bytes, est.gradients_bytes, est.optimizer_bytes) == (2 * n, 4 * n, 12 * n)


def test_memory_activations_korthikanti(gpt2_large):
    p = PlanSpec(micro_batch_size=1, global_batch_size=1, dtype="bf16")
    s, h, a = 1024, 1280, 20
    assert memory.activation_bytes_per_layer(gpt2_large, p, flash=False) == pytest.approx(s * h * (34 + 5 * a * s / h))


def test_1f1b_holds_fewer_activations_than_gpipe():
    m = tiny_model()
    g = memory.stage_memory(m, PlanSpec(pp=2, global_batch_size=8, schedule="gpipe"), 0, True)
    f = memory.stage_memory(m, PlanSpec(pp=2, global_batch_size=8, schedule="1f1b"), 0, True)
    assert f.activations_bytes * 4 == g.activations_bytes


def test_model_flops_per_step(gpt2_large):
    # Narayanan eq. 3: 72 B s l h^2 (1 + s/(6h) + V/(12 h l))
    b, s, l, h, v = 4, 1024, 36, 1280, 50257
    expected = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * h * l))
    assert memory.model_flops_per_step(gpt2_large, 4) == pytest.approx(expected)


def test_full_recompute_reruns_the_layer_forward_before_its_backward(gpt2_large):
    plan = PlanSpec(tp=2, micro_batch_size=2, global_batch_size=2, dtype="fp16", attention="unfused")
    plain, full = (layer_backward(make_shard(gpt2_large, plan.model_copy(update=dict(recompute=r))))
                   for r in ("none", "full"))
    fwd = layer_forward(make_shard(gpt2_large, plan))
    assert _flops(full) == pytest.approx(_flops(plain) + _flops(fwd))
    assert [s.name for s in full[:len(fwd)]] == ["recompute." + s.name for s in fwd]
    # the rerun forward repeats its two tensor-parallel all-reduces
    assert sum(isinstance(s, Collective) for s in full) == 4


def test_selective_recompute_reruns_the_attention_core_unless_flash(gpt2_large):
    plan = PlanSpec(micro_batch_size=2, global_batch_size=2, dtype="fp16", attention="unfused", recompute="selective")
    names = [s.name for s in layer_backward(make_shard(gpt2_large, plan))]
    rerun = [n for n in names if n.startswith("recompute.")]
    assert rerun == ["recompute.attn." + n for n in ("score", "mask", "softmax", "dropout", "context")]
    assert names.index("recompute.attn.context") < names.index("attn.context.dgrad_p")
    flash = plan.model_copy(update=dict(attention="flash"))
    assert not any(s.name.startswith("recompute.") for s in layer_backward(make_shard(gpt2_large, flash)))


def test_recompute_shrinks_activation_memory(gpt2_large):
    base = PlanSpec(pp=2, micro_batch_size=4, global_batch_size=32, dtype="fp16")
    acts = {r: memory.stage_memory(gpt2_large, base.model_copy(update=dict(recompute=r)), 0, flash=False)
            .activations_bytes for r in ("none", "selective", "full")}
    assert acts["full"] < acts["selective"] < acts["none"]
    # full: each of 2 in-flight micro-batches keeps 18 layer inputs of 2sbh bytes, plus one layer recomputed
    layer = memory.activation_bytes_per_layer(gpt2_large, base, flash=False)
    assert acts["full"] == pytest.approx(2 * 18 * 2 * 1024 * 4 * 1280 + layer - 2 * 1024 * 4 * 1280)


def test_unfused_loss_makes_fp32_passes_over_the_logits(gpt2_large):
    """Megatron's cross entropy: six fp32 passes forward (cast, max, subtract, exp, sum, divide), two backward,
    each over tokens x vocab / tp; the fused default reads the logits once each way."""
    plan = PlanSpec(tp=2, micro_batch_size=2, global_batch_size=2, dtype="bf16")
    fused, unfused = (make_shard(gpt2_large, plan.model_copy(update=dict(loss=x))) for x in ("fused", "unfused"))
    loss = lambda steps: [s.kernel for s in steps if isinstance(s, Compute) and s.name.startswith("loss.")]  # noqa: E731
    assert [k.op for k in loss(head_forward(fused))] == ["cross_entropy"]
    fwd, bwd = loss(head_forward(unfused)), loss(head_backward(unfused))
    assert [k.op for k in fwd] == ["copy", "reduce", "add_scalar", "exp", "reduce", "div_scalar"]
    assert [k.op for k in bwd] == ["mul_scalar", "copy"]
    logits = 2 * 1024 * (gpt2_large.vocab // 2)
    assert all(k.dtype == "fp32" and k.shape == (2 * 1024, gpt2_large.vocab // 2) for k in fwd + bwd)
    assert sum(k.bytes for k in fwd) == pytest.approx(4 * logits * (2 + 1 + 2 + 2 + 1 + 2))
    # the tensor-parallel all-reduces of the vocab-parallel loss are there either way
    assert sum(isinstance(s, Collective) for s in head_forward(unfused)) == 3
    fp32 = make_shard(gpt2_large, plan.model_copy(update=dict(loss="unfused", dtype="fp32")))
    assert [k.op for k in loss(head_forward(fp32)) + loss(head_backward(fp32))] == [
        "reduce", "add_scalar", "exp", "reduce", "div_scalar", "mul_scalar"]  # fp32 logits: no casts
