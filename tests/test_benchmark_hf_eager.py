"""The e2e benchmark's Hugging Face eager lowering (benchmarks/e2e_accuracy.py): what it adds per layer."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import e2e_accuracy as e2e  # noqa: E402

from simulator.loading import load_workload  # noqa: E402
from simulator.specs import PlanSpec  # noqa: E402
from simulator.workload.transformer import make_shard  # noqa: E402


def _shard(name: str):
    model = load_workload(name, seq_len=1024)
    return make_shard(model, PlanSpec(micro_batch_size=2, global_batch_size=2, dtype="fp32")), model


def _without_norms(kernels):
    return [k for k in kernels if "layernorm" not in k.op]


def test_gpt2_gelu_new_and_score_scaling():
    sh, m = _shard("gpt2-large")
    added, removed = map(_without_norms, e2e.hf_eager_delta("gpt2", sh, train=False))
    ops = [k.op for k in added]
    assert ops.count("div_scalar") == 1 and ops.count("tanh") == 1 and len(ops) == 1 + 8
    assert [k.op for k in removed] == ["gelu"]
    assert all(k.shape == (sh.tokens, m.ffn_hidden) for k in added if k.op == "tanh")
    added, removed = map(_without_norms, e2e.hf_eager_delta("gpt2", sh, train=True))
    assert len(added) == 2 + 8 + 11 and {k.op for k in removed} == {"gelu", "gelu_bwd"}


def test_native_layernorms_replace_the_fused_ones():
    sh, m = _shard("gpt2-large")
    for train, ops in ((False, ["layernorm"]), (True, ["layernorm", "layernorm_bwd"])):
        added, removed = e2e.hf_eager_delta("bert", sh, train=train)
        assert sorted(k.op for k in added if "layernorm" in k.op) == sorted(ops * 2)
        assert sorted(k.op for k in removed if "layernorm" in k.op) == sorted(
            op.replace("layernorm", "layernorm_fused") for op in ops * 2)
        assert {k.shape for k in added + removed if "layernorm" in k.op} == {(sh.tokens, m.hidden)}


def test_opt_splits_qkv_and_bert_only_scales():
    sh, m = _shard("gpt2-large")
    added, removed = e2e.hf_eager_delta("opt", sh, train=True)
    gemm_flops = sum(k.flops for k in added if k.op == "gemm")
    assert gemm_flops == sum(k.flops for k in removed if k.op == "gemm")  # same work, three GEMMs instead of one
    added, removed = map(_without_norms, e2e.hf_eager_delta("bert", sh, train=False))
    assert [k.op for k in added] == ["div_scalar"] and removed == []
    added, removed = map(_without_norms, e2e.hf_eager_delta("bert", sh, train=True))
    assert [k.op for k in removed] == ["masked_fill"]  # the lowering's mask gradient: BERT adds its mask
