"""A transformer's training step as ordered steps per shard: kernels and the collectives between them.

Megatron-LM tensor parallelism (Shoeybi et al. 2019, section 3): QKV and FC1 are column-parallel,
attention output projection and FC2 row-parallel, so each layer needs one all-reduce of the
activations after attention and one after the MLP in forward, and one after each column-parallel
layer's input gradient in backward. Embedding and LM head are vocabulary-parallel. The functions here
return plain step lists; ``parallel.lowering`` turns them into tasks and ranks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..predictor.kernels import Kernel, gemm, vector
from ..specs import DTYPE_BYTES, PlanSpec, WorkloadSpec


@dataclass(frozen=True)
class Compute:
    name: str
    kernel: Kernel


@dataclass(frozen=True)
class Collective:
    name: str
    collective: str  # all_reduce, ...
    axis: str  # tp | dp | pp | embedding
    size_bytes: float


Step = Union[Compute, Collective]


@dataclass(frozen=True)
class Shard:
    """What one GPU computes per micro-batch: the model, the micro-batch and the tensor-parallel degree."""

    model: WorkloadSpec
    micro_batch: int
    tp: int
    dtype: str  # compute dtype of GEMMs: fp32 | tf32 | bf16 | fp16
    attention: str  # flash | unfused | fused-softmax (PlanSpec.attention, "auto" resolved)
    recompute: str = "none"  # none | selective | full (PlanSpec.recompute)
    loss: str = "fused"  # fused | unfused (PlanSpec.loss)

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.model.seq_len

    @property
    def act_dtype(self) -> str:
        """Storage dtype of activations (tf32 is a math mode: tensors stay fp32)."""
        return "fp32" if self.dtype == "tf32" else self.dtype

    @property
    def act_bytes(self) -> int:
        return DTYPE_BYTES[self.act_dtype]

    @property
    def causal(self) -> bool:
        return self.model.architecture == "decoder"

    @property
    def flash(self) -> bool:
        return self.attention == "flash"


def make_shard(model: WorkloadSpec, plan: PlanSpec) -> Shard:
    attention = plan.attention
    if attention == "auto":
        attention = "flash" if plan.mixed_precision else "unfused"
    return Shard(model, plan.micro_batch_size, plan.tp, plan.dtype, attention, plan.recompute, plan.loss)


def prefixed(step: Step, prefix: str) -> Step:
    """``step`` renamed ``prefix + name``."""
    if isinstance(step, Compute):
        return Compute(prefix + step.name, step.kernel)
    return Collective(prefix + step.name, step.collective, step.axis, step.size_bytes)


def _linear_fwd(name: str, tokens: int, n_in: int, n_out: int, sh: Shard) -> Step:
    return Compute(name, gemm(tokens, n_out, n_in, sh.dtype, layout="nt"))


def _linear_bwd(name: str, tokens: int, n_in: int, n_out: int, sh: Shard) -> list[Step]:
    return [
        Compute(f"{name}.dgrad", gemm(tokens, n_in, n_out, sh.dtype, layout="nn")),
        Compute(f"{name}.wgrad", gemm(n_out, n_in, tokens, sh.dtype, layout="tn")),
    ]


def _v(name: str, op: str, rows: int, cols: int, sh: Shard) -> Step:
    return Compute(name, vector(op, rows, cols, sh.act_dtype))


def _dropout(name: str, backward: bool, rows: int, cols: int, sh: Shard, p: float) -> list[Step]:
    """A dropout kernel (or its backward), none at probability 0."""
    return [_v(name, "dropout_bwd" if backward else "dropout", rows, cols, sh)] if p > 0 else []


def _hidden_dropout(name: str, sh: Shard, backward: bool = False) -> list[Step]:
    return _dropout(name, backward, sh.tokens, sh.model.hidden, sh, sh.model.hidden_dropout)


def _tp_all_reduce(name: str, sh: Shard) -> list[Step]:
    if sh.tp == 1:
        return []
    return [Collective(name, "all_reduce", "tp", sh.tokens * sh.model.hidden * sh.act_bytes)]


def _norm(sh: Shard) -> str:
    """The norm's kernel: Megatron's fused LayerNorm (apex, Transformer Engine), like the lowering's other
    fused kernels; RMSNorm keeps the one kind the predictor has measured (vLLM's, PyTorch's)."""
    return "layernorm_fused" if sh.model.norm == "layernorm" else sh.model.norm


def _norm_bwd(name: str, sh: Shard) -> list[Step]:
    """A norm's backward: the input-gradient kernel, then the weight (gamma / beta) gradient's."""
    t, h = sh.tokens, sh.model.hidden
    return [_v(f"{name}_bwd", f"{_norm(sh)}_bwd", t, h, sh), _v(f"{name}.weight_bwd", "norm_weight_bwd", t, h, sh)]


def _qkv_width(sh: Shard) -> int:
    m = sh.model
    return (m.heads + 2 * m.num_kv_heads) * m.head_dim // sh.tp


def _fc1_width(sh: Shard) -> int:
    gates = 2 if sh.model.activation == "swiglu" else 1
    return gates * sh.model.ffn_hidden // sh.tp


def _fused_softmax(sh: Shard, backward: bool) -> str:
    """Megatron's scale-mask-softmax kernel (``FusedScaleMaskSoftmax``): the upper-triangular one under a
    causal mask, which touches only the unmasked half; under a padding mask ``scaled_masked_softmax``, a
    full pass each way, predicted as PyTorch's softmax (the nearest kernel with measurements)."""
    op = "softmax_causal" if sh.causal else "softmax"
    return op + "_bwd" if backward else op


def _attention_core(sh: Shard) -> list[Step]:
    """Attention from Q, K, V to the context: one fused kernel, or score BMM, mask, softmax, dropout and
    context BMM (what selective recomputation reruns); ``fused-softmax`` scales, masks and normalises the
    scores in one kernel."""
    m = sh.model
    heads, d, s, b = m.heads // sh.tp, m.head_dim, m.seq_len, sh.micro_batch
    if sh.flash:
        return [Compute("attn.flash", Kernel("flash_attn", sh.dtype, (b, heads, s, s, d, int(sh.causal))))]
    rows = b * heads * s
    if sh.attention == "fused-softmax":
        softmax = [_v("attn.softmax", _fused_softmax(sh, backward=False), rows, s, sh)]
    else:
        softmax = [_v("attn.mask", "masked_fill", rows, s, sh), _v("attn.softmax", "softmax", rows, s, sh)]
    return [
        Compute("attn.score", gemm(s, s, d, sh.dtype, b=b * heads, layout="nt")),
        *softmax,
        *_dropout("attn.dropout", False, rows, s, sh, m.attention_dropout),
        Compute("attn.context", gemm(s, d, s, sh.dtype, b=b * heads, layout="nn")),
    ]


def _attention_fwd(sh: Shard) -> list[Step]:
    m = sh.model
    steps: list[Step] = []
    if m.position_embedding == "rope":
        steps.append(_v("attn.rope", "rope", sh.tokens, (m.heads + m.num_kv_heads) * m.head_dim // sh.tp, sh))
    return steps + _attention_core(sh)


def _attention_bwd(sh: Shard) -> list[Step]:
    m, t = sh.model, sh.tokens
    heads, d, s, b = m.heads // sh.tp, m.head_dim, m.seq_len, sh.micro_batch
    steps: list[Step] = []
    if sh.flash:
        steps.append(Compute("attn.flash_bwd", Kernel("flash_attn_bwd", sh.dtype, (b, heads, s, s, d, int(sh.causal)))))
    else:
        rows, bh = b * heads * s, b * heads
        if sh.attention == "fused-softmax":
            softmax = [_v("attn.softmax_bwd", _fused_softmax(sh, backward=True), rows, s, sh)]
        else:
            softmax = [
                # torch's softmax backward: grad * output (an elementwise Mul kernel), then the row kernel
                _v("attn.softmax_bwd.mul", "mul", rows, s, sh),
                _v("attn.softmax_bwd", "softmax_bwd", rows, s, sh),
                # the mask's gradient: masked_fill's backward fills the masked scores' gradient with zeros
                _v("attn.mask_bwd", "masked_fill", rows, s, sh),
            ]
        steps += [
            Compute("attn.context.dgrad_p", gemm(s, s, d, sh.dtype, b=bh, layout="nt")),  # dP = dO V^T
            Compute("attn.context.dgrad_v", gemm(s, d, s, sh.dtype, b=bh, layout="tn")),  # dV = P^T dO
            *_dropout("attn.dropout_bwd", True, rows, s, sh, m.attention_dropout),
            *softmax,
            Compute("attn.score.dgrad_q", gemm(s, d, s, sh.dtype, b=bh, layout="nn")),  # dQ = dS K
            Compute("attn.score.dgrad_k", gemm(s, d, s, sh.dtype, b=bh, layout="tn")),  # dK = dS^T Q
        ]
    if m.position_embedding == "rope":
        steps.append(_v("attn.rope_bwd", "rope", t, (m.heads + m.num_kv_heads) * d // sh.tp, sh))
    return steps


def _activation_fwd(sh: Shard) -> Step:
    act = sh.model.activation
    return _v(f"mlp.{act}", act, sh.tokens, sh.model.ffn_hidden // sh.tp, sh)


def _activation_bwd(sh: Shard) -> Step:
    act = sh.model.activation
    return _v(f"mlp.{act}_bwd", f"{act}_bwd", sh.tokens, sh.model.ffn_hidden // sh.tp, sh)


def layer_forward(sh: Shard) -> list[Step]:
    """One transformer layer's forward (pre-norm, as GPT-2/3 and Llama)."""
    m, t, h = sh.model, sh.tokens, sh.model.hidden
    attn_width = m.heads * m.head_dim // sh.tp
    return [
        _v("norm1", _norm(sh), t, h, sh),
        _linear_fwd("attn.qkv", t, h, _qkv_width(sh), sh),
        *_attention_fwd(sh),
        _linear_fwd("attn.proj", t, attn_width, h, sh),
        *_tp_all_reduce("attn.all_reduce", sh),
        *_hidden_dropout("attn.dropout_out", sh),
        _v("attn.residual", "add", t, h, sh),
        _v("norm2", _norm(sh), t, h, sh),
        _linear_fwd("mlp.fc1", t, h, _fc1_width(sh), sh),
        _activation_fwd(sh),
        _linear_fwd("mlp.fc2", t, m.ffn_hidden // sh.tp, h, sh),
        *_tp_all_reduce("mlp.all_reduce", sh),
        *_hidden_dropout("mlp.dropout_out", sh),
        _v("mlp.residual", "add", t, h, sh),
    ]


def _recomputed(sh: Shard) -> tuple[list[Step], list[Step]]:
    """(steps rerun before a layer's backward, steps rerun before its attention backward)."""
    if sh.recompute == "full":
        return [prefixed(s, "recompute.") for s in layer_forward(sh)], []
    if sh.recompute == "selective" and not sh.flash:  # flash attention's backward recomputes on its own
        return [], [prefixed(s, "recompute.") for s in _attention_core(sh)]
    return [], []


def layer_backward(sh: Shard) -> list[Step]:
    """One layer's backward: input and weight gradients, in reverse order of the forward, after what
    activation recomputation reruns."""
    m, t, h = sh.model, sh.tokens, sh.model.hidden
    attn_width = m.heads * m.head_dim // sh.tp
    layer, attention = _recomputed(sh)
    return layer + [
        *_hidden_dropout("mlp.dropout_out_bwd", sh, backward=True),
        *_linear_bwd("mlp.fc2", t, m.ffn_hidden // sh.tp, h, sh),
        _activation_bwd(sh),
        *_linear_bwd("mlp.fc1", t, h, _fc1_width(sh), sh),
        *_tp_all_reduce("mlp.fc1.dgrad_all_reduce", sh),
        *_norm_bwd("norm2", sh),
        _v("mlp.residual_bwd", "add", t, h, sh),
        *_hidden_dropout("attn.dropout_out_bwd", sh, backward=True),
        *_linear_bwd("attn.proj", t, attn_width, h, sh),
        *attention,
        *_attention_bwd(sh),
        *_linear_bwd("attn.qkv", t, h, _qkv_width(sh), sh),
        *_tp_all_reduce("attn.qkv.dgrad_all_reduce", sh),
        *_norm_bwd("norm1", sh),
        _v("attn.residual_bwd", "add", t, h, sh),
    ]


def embedding_forward(sh: Shard) -> list[Step]:
    """Vocabulary-parallel token embedding (+ learned positions), then dropout."""
    m, t, h = sh.model, sh.tokens, sh.model.hidden
    steps: list[Step] = [Compute("embed.tokens", Kernel("embedding", sh.act_dtype, (t, h, m.vocab // sh.tp)))]
    steps += _tp_all_reduce("embed.all_reduce", sh)
    if m.position_embedding == "learned":
        steps += [
            Compute("embed.positions", Kernel("embedding", sh.act_dtype, (t, h, m.seq_len))),
            _v("embed.add", "add", t, h, sh),
        ]
    return steps + _hidden_dropout("embed.dropout", sh)


def embedding_backward(sh: Shard) -> list[Step]:
    m, t, h = sh.model, sh.tokens, sh.model.hidden
    steps: list[Step] = _hidden_dropout("embed.dropout_bwd", sh, backward=True)
    if m.position_embedding == "learned":
        steps.append(Compute("embed.positions_bwd", Kernel("embedding_bwd", sh.act_dtype, (t, h, m.seq_len))))
    steps.append(Compute("embed.tokens_bwd", Kernel("embedding_bwd", sh.act_dtype, (t, h, m.vocab // sh.tp))))
    return steps


def _loss_all_reduces(sh: Shard) -> list[Step]:
    """Vocab-parallel cross-entropy all-reduces max, predicted logit and sum-exp over TP (fp32 per token)."""
    if sh.tp == 1:
        return []
    return [Collective(f"loss.all_reduce_{i}", "all_reduce", "tp", 4.0 * sh.tokens) for i in range(3)]


#: Megatron's vocab-parallel cross entropy, one fp32 kernel per step (tensor_parallel/cross_entropy.py):
#: forward upcasts the logits, takes the row max, subtracts it, exponentiates in place, sums the rows and
#: divides in place (the softmax it keeps for backward); backward scales that softmax by the loss gradient
#: and casts it back. fp32 logits need no casts; a cast is counted as an fp32 copy (2 bytes per element more
#: than a half <-> float cast moves). The target gathers touch one element per row and are left out.
UNFUSED_LOSS_FWD = (("cast", "copy"), ("max", "reduce"), ("sub_max", "add_scalar"), ("exp", "exp"),
                    ("sum", "reduce"), ("div_sum", "div_scalar"))
UNFUSED_LOSS_BWD = (("scale", "mul_scalar"), ("cast", "copy"))


def _loss(sh: Shard, vocab: int, backward: bool) -> list[Step]:
    if sh.loss == "fused":
        op = "cross_entropy_bwd" if backward else "cross_entropy"
        return [_v(f"loss.{op}", op, sh.tokens, vocab, sh)]
    passes = UNFUSED_LOSS_BWD if backward else UNFUSED_LOSS_FWD
    suffix = "_bwd" if backward else ""
    return [Compute(f"loss.{name}{suffix}", vector(op, sh.tokens, vocab, "fp32")) for name, op in passes
            if name != "cast" or sh.act_dtype != "fp32"]


def head_forward(sh: Shard) -> list[Step]:
    """Final norm, (encoder: MLM transform), LM head and cross-entropy loss."""
    m, t, h = sh.model, sh.tokens, sh.model.hidden
    steps: list[Step] = [_v("final_norm", _norm(sh), t, h, sh)]
    if m.architecture == "encoder":
        steps += [_linear_fwd("head.transform", t, h, h, sh), _v("head.gelu", "gelu", t, h, sh),
                  _v("head.norm", _norm(sh), t, h, sh)]
    vocab = m.vocab // sh.tp
    steps += [
        _linear_fwd("head.logits", t, h, vocab, sh),
        *_loss(sh, vocab, backward=False),
        *_loss_all_reduces(sh),
    ]
    return steps


def head_backward(sh: Shard) -> list[Step]:
    m, t, h = sh.model, sh.tokens, sh.model.hidden
    vocab = m.vocab // sh.tp
    steps: list[Step] = [
        *_loss(sh, vocab, backward=True),
        *_linear_bwd("head.logits", t, h, vocab, sh),
        *_tp_all_reduce("head.dgrad_all_reduce", sh),
    ]
    if m.architecture == "encoder":
        steps += [*_norm_bwd("head.norm", sh), _v("head.gelu_bwd", "gelu_bwd", t, h, sh),
                  *_linear_bwd("head.transform", t, h, h, sh)]
    steps += _norm_bwd("final_norm", sh)
    return steps


def optimizer_step(params: int, dtype: str) -> list[Step]:
    """Gradient-norm pass (clipping) and a fused Adam step over ``params`` local parameters."""
    grad_dtype = "fp16" if dtype == "fp16" else "fp32"
    return [
        Compute("optim.grad_norm", Kernel("reduce", grad_dtype, (params,))),
        Compute("optim.adam", Kernel("adam", "fp32" if dtype == "tf32" else dtype, (params,))),
    ]
