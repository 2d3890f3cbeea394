"""Kernel decomposition of the Aceso (Megatron-LM GPT layer) ops profiled in Sailor's data.

Aceso times each op of a transformer layer with host clocks, forward and backward separately, with
sequence length 2048. One op may launch several kernels; this module lists them so that training can
fit the *sum* of their predicted times. Decompositions follow Megatron-LM's GPT layer (fused
bias-GELU, bias-dropout-add (run unfused), FusedScaleMaskSoftmax, apex FusedLayerNorm):

* Linear layers ``y = x W^T``: forward one GEMM (layout ``nt``); backward only the input gradient
  (``nn``). The published backward times of every linear op equal its forward time (one GEMM's
  worth, on all five GPUs), not twice it: the profiler evidently did not compute weight (or bias)
  gradients, so no ``tn`` GEMM or bias reduction is listed.
  Tried (stop 39): the QKV projection is the one linear without ``skip_bias_add``, and on all five held-out
  GPUs its rows come out 6-28 % faster than the other linears' of the same size, forward and backward.
  Its bias added unfused (forward) and the split of Q, K, V concatenated back (backward, a copy) made every
  Aceso linear cell better (one member, seeds 1 / 0: Titan RTX fp16 10.8 -> 9.0 / 11.2 -> 8.9 %, V100
  6.4 -> 5.3 / 7.1 -> 5.8 %, A100 16.0 -> 15.6 / 15.8 -> 15.2 %), but moved the GEMM network the H200
  suite relies on (its fp16 linear 9.9 -> 11.9 / 9.8 -> 10.5 %, fp32 BMM 8.4 -> 9.4 / 9.0 -> 9.9 %) and the
  held-out RTX 3090's BMMs swung (fp16 9.3 -> 20.8 % on seed 1, as in unrelated runs): target cells
  47 -> 45 / 48 -> 47. Three members: 47 -> 47 (calibrated 52 -> 49), linear fp16 9.2 -> 8.7 % but bmm
  tf32 12.1 -> 13.4 %, RTX 3090 fp16 BMM 8.8 -> 11.3 %, H200 fp16 linear 9.4 -> 10.6 %. Not kept.
* LayerNorm: apex's fused kernels (``layernorm_fused``; backward its input-gradient kernel and the weight
  gradient's), not PyTorch's native ones, which the other sources measured.
* Attention score ``Q K^T`` and context ``P V``: batched GEMMs over micro-batch x heads; backward two
  batched GEMMs each. The context is made contiguous (a copy) after the BMM.
* Softmax: fp16 runs Megatron's fused kernels; fp32 falls back to the torch path (``_torch_softmax``), three
  passes forward and four kernels backward. The shipped weights of stop 45, which never saw these rows,
  put the profiled fp32 op at 1.02-1.04x that forward composition on four GPUs (0.91 on the V100) and
  1.10-1.20x the backward one, against 1.3-1.5x and 1.4-1.5x without the scale and the mask's gradient.

Skipped because their composition is uncertain or dominated by other work: the embedding (forward
gather, backward dense scatter into the vocab table), ``gpt-post-process`` (LM head + vocab-parallel
cross entropy) and ``final-layernorm`` (its backward also carries part of the head's gradient).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from .kernels import Kernel

SEQ_LEN = 2048
#: (hidden, heads, ffn) of the profiled models (Megatron GPT configurations used by Aceso).
MODELS = {"GPT-Neo-2.7": (2560, 32, 10240), "OPT-350": (1024, 16, 4096), "OPT-30": (7168, 56, 28672)}


class LayerShapes(NamedTuple):
    tokens: int
    batch: int  # micro-batch size
    hidden: int
    heads: int
    ffn: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def aceso_model_shapes(model: str, micro_batch: int) -> Optional[LayerShapes]:
    if model not in MODELS:
        return None
    h, heads, ffn = MODELS[model]
    return LayerShapes(micro_batch * SEQ_LEN, micro_batch, h, heads, ffn)


def _linear(direction: str, dtype: str, tokens: int, n_in: int, n_out: int) -> tuple[Kernel, ...]:
    if direction == "fwd":
        return (Kernel("gemm", dtype, (1, tokens, n_out, n_in), "nt"),)
    return (Kernel("gemm", dtype, (1, tokens, n_in, n_out), "nn"),)


def _attention(op: str, direction: str, dtype: str, s: LayerShapes) -> tuple[Kernel, ...]:
    b, d = s.batch * s.heads, s.head_dim
    if op == "score":  # S = Q K^T: (b, s, s, k=d); grads dQ = dS K, dK = dS^T Q: (b, s, d, k=s)
        if direction == "fwd":
            return (Kernel("gemm", dtype, (b, SEQ_LEN, SEQ_LEN, d), "nt"),)
        return (Kernel("gemm", dtype, (b, SEQ_LEN, d, SEQ_LEN), "nn"),
                Kernel("gemm", dtype, (b, SEQ_LEN, d, SEQ_LEN), "tn"))
    copy = Kernel("copy", "fp32" if dtype == "tf32" else dtype, (s.tokens, s.hidden))  # -> [s, b, h] contiguous
    if direction == "fwd":  # O = P V: (b, s, d, k=s)
        return (Kernel("gemm", dtype, (b, SEQ_LEN, d, SEQ_LEN), "nn"), copy)
    return (copy, Kernel("gemm", dtype, (b, SEQ_LEN, SEQ_LEN, d), "nt"),  # dP = dO V^T
            Kernel("gemm", dtype, (b, SEQ_LEN, d, SEQ_LEN), "tn"))  # dV = P^T dO


def _bias_dropout_add(direction: str, dtype: str, s: LayerShapes) -> tuple[Kernel, ...]:
    """``residual + dropout(x + bias)`` as three unfused kernels (broadcast bias add, dropout, residual
    add); its backward as the masked gradient and a separate scale by 1/(1-p) (TorchScript's autodiff
    form of dropout, ``grad * mask * (1/(1-p))``). Counted as one fused dropout (``5e+1`` bytes per
    element forward, ``2e+1`` backward) these ops would run at 0.52-0.64 (fwd) and 0.45-0.50 (bwd) of
    DRAM bandwidth on all five GPUs while the standalone attention dropout of the same layer runs at
    0.73-0.86 and 0.87-0.91; with ``7e+1`` and ``4e+1`` they run at 0.71-0.88 and 0.85-0.91, the same
    as the standalone dropout."""
    shape = (s.tokens, s.hidden)
    if direction == "fwd":
        return (Kernel("add_scalar", dtype, shape),  # + bias: a broadcast row, negligible bytes
                Kernel("dropout", dtype, shape), Kernel("add", dtype, shape))
    return (Kernel("dropout_bwd", dtype, shape), Kernel("mul_scalar", dtype, shape))


def _torch_softmax(direction: str, dtype: str, shape: tuple[int, int]) -> tuple[Kernel, ...]:
    """FusedScaleMaskSoftmax's torch path, which fp32 runs take: ``input * scale`` (the query-key layer
    scaling coefficient, on by default in Aceso's Megatron), ``masked_fill_`` and ``Softmax``; backward
    the softmax's (PyTorch's Mul and row kernel, as the lowering lists them), the mask's (a masked_fill)
    and the scale's. The row kernel comes first: it names the op's class."""
    if direction == "fwd":
        return Kernel("softmax", dtype, shape), Kernel("mul_scalar", dtype, shape), Kernel("masked_fill", dtype, shape)
    return (Kernel("softmax_bwd", dtype, shape), Kernel("mul", dtype, shape), Kernel("masked_fill", dtype, shape),
            Kernel("mul_scalar", dtype, shape))


def aceso_kernels(op_name: str, direction: str, dtype: str, s: LayerShapes,
                  gemm_dtype: Optional[str] = None) -> tuple[Kernel, ...]:
    """Kernels of one Aceso op (``direction`` 'fwd' or 'bwd'); empty when the op is not modelled.
    ``gemm_dtype`` is the math dtype of the GEMMs (``tf32`` for fp32 runs on Ampere)."""
    name = op_name.replace("enc-", "")
    g = gemm_dtype or dtype
    rows_attn = s.batch * s.heads * SEQ_LEN
    if name in ("1st-layernorm", "2nd-layernorm"):
        shape = (s.tokens, s.hidden)
        if direction == "fwd":
            return (Kernel("layernorm_fused", dtype, shape),)
        return Kernel("layernorm_fused_bwd", dtype, shape), Kernel("norm_weight_bwd", dtype, shape)
    if name == "attention-qkv":
        return _linear(direction, g, s.tokens, s.hidden, 3 * s.hidden)
    if name == "attention-dense":
        return _linear(direction, g, s.tokens, s.hidden, s.hidden)
    if name == "MLP-GEMM-1":
        return _linear(direction, g, s.tokens, s.hidden, s.ffn)
    if name == "MLP-GEMM-2":
        return _linear(direction, g, s.tokens, s.ffn, s.hidden)
    if name == "attention-score":
        return _attention("score", direction, g, s)
    if name == "attention-context":
        return _attention("context", direction, g, s)
    if name == "attention-softmax" and dtype != "fp32":
        op = "softmax_causal" if direction == "fwd" else "softmax_causal_bwd"  # FusedScaleMaskSoftmax, GPT mask
        return (Kernel(op, dtype, (rows_attn, SEQ_LEN)),)
    if name == "attention-softmax":
        return _torch_softmax(direction, dtype, (rows_attn, SEQ_LEN))
    if name == "attention-dropout":
        return (Kernel("dropout" if direction == "fwd" else "dropout_bwd", dtype, (rows_attn, SEQ_LEN)),)
    if name in ("post-attention-dropout", "post-MLP-dropout"):
        return _bias_dropout_add(direction, dtype, s)
    if name == "MLP-gelu":  # fused bias-GELU
        return (Kernel("gelu" if direction == "fwd" else "gelu_bwd", dtype, (s.tokens, s.ffn)),)
    return ()
