"""Kernel descriptors: what a GPU kernel is (op, dtype, shape) and its exact FLOPs and bytes.

Every kernel the lowering emits is a ``Kernel``. Its op is a key of ``OPS``; adding an op class is one
entry there. Shapes use one convention per op family, documented on each entry:

* GEMMs (``gemm``): ``(b, m, n, k)`` computes ``C[b, m, n] = A[b, m, k] @ B[b, k, n]`` -- *k* is the
  reduction. (NeuSight's files call the reduction N; ``predictor.dataset`` converts on read.)
  ``b > 1`` is a batched GEMM. ``layout`` gives the operand transposes as cuBLAS sees them
  (``nn``, ``nt``, ``tn``); the forward of a linear layer is ``nt`` (weight stored ``[out, in]``),
  its input gradient ``nn`` and its weight gradient ``tn``.
* Vector ops: ``(rows, cols)``, the kernel's output viewed as a rows x cols matrix (norms and softmax
  reduce over cols).
* Flash attention: ``(batch, heads, seq_q, seq_k, head_dim, causal)``.
* Embedding: ``(tokens, hidden, vocab)``; Adam: ``(params,)``.

Bytes count one read of every input and one write of every output at the kernel's storage dtype
(minimal DRAM traffic, assuming no cache reuse across kernels).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import KernelTooLarge
from ..units import DTYPE_BYTES  # not specs: kernels must import without pydantic (collect)

#: Elements a kernel may read and write (``bytes`` at one byte per element): the predictors count its dimensions
#: and their products in int64.
MAX_ELEMENTS = 2**62
#: Shapes whose dimensions are all below this cannot reach ``MAX_ELEMENTS`` in any product the predictors take
#: in int64 (a GEMM's b x (mk + kn + mn) < 3 x 2^60), so they skip the count.
SMALL_DIM = 2**20

#: Op families: the predictor keeps one model per family.
FAMILIES = ("gemm", "attention", "elementwise", "softmax", "norm", "memory", "optimizer")


@dataclass(frozen=True, slots=True)
class Kernel:
    op: str
    dtype: str
    shape: tuple[int, ...]
    layout: str = ""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown kernel op {self.op!r}")
        if any(int(d) < 0 for d in self.shape):
            raise ValueError(f"negative dimension in {self}")
        dims = OPS[self.op].dims
        if len(self.shape) not in dims:
            raise ValueError(f"{self.op} takes a shape of {' or '.join(map(str, dims))} dimensions"
                             f"{OPS[self.op].dims_help}, got {tuple(self.shape)}")
        if max(self.shape, default=0) < SMALL_DIM:  # the common case (``SMALL_DIM``)
            return
        elements = OPS[self.op].bytes(tuple(self.shape), 1)  # elements read and written
        if elements >= MAX_ELEMENTS:
            raise KernelTooLarge(f"{self.op} of shape {tuple(self.shape)} moves {elements:.3g} elements, more than "
                                 f"any GPU holds (limit 2^62)")

    @property
    def family(self) -> str:
        return OPS[self.op].family

    @property
    def flops(self) -> float:
        return OPS[self.op].flops(self.shape)

    @property
    def bytes(self) -> float:
        return OPS[self.op].bytes(self.shape, DTYPE_BYTES[self.dtype])


@dataclass(frozen=True)
class OpClass:
    """How to count one op. ``flops(shape)`` and ``bytes(shape, element_bytes)`` are exact formulas;
    ``cost`` is the per-element arithmetic class for elementwise ops (``cheap`` add/mul/relu vs
    ``transcendental`` gelu/tanh/pow/exp), used as a predictor feature; ``index_ops_per_element`` an
    estimate of the integer work a gather spends locating each element (not FLOPs: MFU never counts it)."""

    family: str
    flops: Callable[[tuple[int, ...]], float]
    bytes: Callable[[tuple[int, ...], int], float]
    inputs: int = 1
    cost: str = "cheap"
    index_ops_per_element: float = 0.0  # integer instructions of address arithmetic per output element
    dims: tuple[int, ...] = (1, 2)  # accepted shape lengths: (elements,) or (rows, cols)
    dims_help: str = ""


def _prod(shape: tuple[int, ...]) -> float:
    out = 1.0
    for d in shape:
        out *= d
    return out


def _gemm_flops(s: tuple[int, ...]) -> float:
    b, m, n, k = s
    return 2.0 * b * m * n * k


def _gemm_bytes(s: tuple[int, ...], e: int) -> float:
    b, m, n, k = s
    return float(e) * b * (m * k + k * n + m * n)


def _elementwise(inputs: int, flops_per_element: float, cost: str) -> OpClass:
    """An elementwise op over a (rows, cols) tensor with ``inputs`` full-size tensor operands."""
    return OpClass(
        family="elementwise",
        flops=lambda s: flops_per_element * _prod(s),
        bytes=lambda s, e: float(e) * (inputs + 1) * _prod(s),
        inputs=inputs,
        cost=cost,
    )


def _rowwise(family: str, flops_per_element: float, tensors: int, stats_per_row: int = 0) -> OpClass:
    """A row-reduction op (softmax, norms): ``tensors`` full-size reads+writes, plus fp32 per-row stats."""
    return OpClass(
        family=family,
        flops=lambda s: flops_per_element * _prod(s),
        bytes=lambda s, e: float(e) * tensors * _prod(s) + 4.0 * stats_per_row * s[0],
        inputs=tensors - 1,
    )


def _causal_softmax(flops_per_element: float, valid_reads: int) -> OpClass:
    """Megatron's fused upper-triangular (causal) softmax over (rows, cols) with rows = batch x heads x
    seq and cols = seq: row ``i`` of each seq x seq block reads (and computes) only its ``i + 1``
    unmasked elements -- ``valid_reads`` tensors of them -- and writes one full-size tensor (zeros above
    the diagonal). Counting the full matrix instead puts Aceso's fp16 softmax at 1.0-1.36x DRAM bandwidth."""
    def valid(s: tuple[int, ...]) -> float:
        return s[0] * (s[1] + 1) / 2.0

    return OpClass(family="softmax", flops=lambda s: flops_per_element * valid(s),
                   bytes=lambda s, e: float(e) * (valid_reads * valid(s) + _prod(s)), inputs=valid_reads,
                   dims=(2,), dims_help=" (rows, cols)")


def _flash_flops(s: tuple[int, ...], matmuls: float) -> float:
    batch, heads, sq, sk, d, causal = s
    full = 2.0 * matmuls * batch * heads * sq * sk * d
    return full / 2.0 if causal else full


def _flash_bytes(s: tuple[int, ...], e: int, tensors_q: int, tensors_k: int) -> float:
    batch, heads, sq, sk, d, _ = s
    return float(e) * batch * heads * d * (tensors_q * sq + tensors_k * sk) + 4.0 * batch * heads * sq


def _embedding_bytes(s: tuple[int, ...], e: int) -> float:
    tokens, hidden, _vocab = s
    return 8.0 * tokens + 2.0 * e * tokens * hidden  # int64 ids, gather rows, write output


def _embedding_bwd_bytes(s: tuple[int, ...], e: int) -> float:
    tokens, hidden, _vocab = s
    return 8.0 * tokens + 3.0 * e * tokens * hidden  # read grads, read-modify-write table rows


#: Adam reads param, grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq (all fp32 masters);
#: with a half-precision model it also writes the half copy of the param. The unfused (for-each)
#: version makes 9 passes (torch ``_single_tensor_adam``): lerp m; mul v; addcmul v; sqrt; div; add eps;
#: addcdiv p; plus weight decay mul p: 18 fp32 tensor reads/writes per element.
def _adam_bytes(fused: bool) -> Callable[[tuple[int, ...], int], float]:
    def count(s: tuple[int, ...], e: int) -> float:
        per_param = 28.0 if fused else 72.0
        if e < 4:
            per_param += e
        return per_param * _prod(s)

    return count


_FLASH_DIMS = " (batch, heads, query length, key length, head dim, causal 0/1)"
_EMBEDDING_DIMS = " (tokens, hidden, vocab)"
#: PyTorch's embedding is ``index_select`` (``indexSelectLargeIndex``): one thread per output element, each
#: dividing by runtime sizes three times (its row and column, then the source and destination offsets in
#: ``IndexToOffset``; about 13 instructions per 32-bit division, one of them a quarter-rate MUFU.RCP) and
#: loading its row's index: about 64 integer-pipe instructions to move one 2-byte element. Vidur's A100
#: PCIe 80GB and A40 embed 4096 x 8192 bf16 tokens in 402-429 us, at 0.19 and 0.48 of their bandwidths but
#: at the same rate per SM cycle (108 SMs x 1.41 GHz, 84 x 1.74 GHz).
EMBEDDING_INDEX_OPS = 64.0

OPS: dict[str, OpClass] = {
    # GEMMs, forward and backward: the lowering emits one per GEMM with its own shape and layout.
    "gemm": OpClass("gemm", _gemm_flops, _gemm_bytes, inputs=2, dims=(4,), dims_help=" (batch, m, n, k)"),
    # Elementwise: binary (two full tensors) and unary; "*_scalar" has a scalar second operand.
    "add": _elementwise(2, 1, "cheap"),
    "mul": _elementwise(2, 1, "cheap"),
    "div": _elementwise(2, 1, "cheap"),
    "add_scalar": _elementwise(1, 1, "cheap"),
    "mul_scalar": _elementwise(1, 1, "cheap"),
    "div_scalar": _elementwise(1, 1, "cheap"),
    "pow_scalar": _elementwise(1, 1, "transcendental"),
    "pow": _elementwise(2, 1, "transcendental"),
    "relu": _elementwise(1, 1, "cheap"),
    "tanh": _elementwise(1, 1, "transcendental"),
    "exp": _elementwise(1, 1, "transcendental"),
    "gelu": _elementwise(1, 1, "transcendental"),
    "silu": _elementwise(1, 1, "transcendental"),
    "relu_bwd": _elementwise(2, 1, "cheap"),
    "gelu_bwd": _elementwise(2, 1, "transcendental"),
    "swiglu": _elementwise(2, 1, "transcendental"),  # silu(gate) * up: two inputs, one output
    "swiglu_bwd": OpClass("elementwise", lambda s: 3 * _prod(s), lambda s, e: e * 5.0 * _prod(s), 3,
                          "transcendental"),  # reads gate, up, grad; writes two grads
    "masked_fill": _elementwise(1, 1, "cheap"),  # mask is broadcast (negligible bytes)
    "rope": _elementwise(1, 3, "cheap"),  # x*cos + rotate(x)*sin; cos/sin tables are small and cached
    # Dropout writes a 1-byte mask beside its output; its backward reads the mask.
    "dropout": OpClass("elementwise", lambda s: _prod(s), lambda s, e: (2.0 * e + 1.0) * _prod(s), 1),
    "dropout_bwd": OpClass("elementwise", lambda s: _prod(s), lambda s, e: (2.0 * e + 1.0) * _prod(s), 1),
    # Row reductions over the last dim.
    "softmax": _rowwise("softmax", 5, 2),
    "softmax_bwd": _rowwise("softmax", 4, 3),
    "softmax_causal": _causal_softmax(5, 1),  # reads the unmasked half; writes the full output
    "softmax_causal_bwd": _causal_softmax(4, 2),  # reads the unmasked half of grad and output
    "layernorm": _rowwise("norm", 8, 2, stats_per_row=2),
    # Norm backward is two kernels in every library (torch's native ones, apex, Transformer Engine): the
    # input gradient (``*_bwd``) reads dY and X and writes dX; the weight gradient (``norm_weight_bwd``,
    # gamma and beta) reads dY and X again and reduces over the rows. A norm without an affine weight
    # runs the first alone (the H200 suite's ``F.layer_norm(x, (cols,))``: one kernel at 3 tensors' worth
    # of traffic, 0.5-0.8 of the bandwidth; counted as 5 it sat at 0.9-1.4).
    "layernorm_bwd": _rowwise("norm", 8, 3, stats_per_row=2),
    "rmsnorm": _rowwise("norm", 5, 2, stats_per_row=1),
    "rmsnorm_bwd": _rowwise("norm", 5, 3, stats_per_row=1),
    "norm_weight_bwd": _rowwise("norm", 4, 2, stats_per_row=2),
    "cross_entropy": _rowwise("softmax", 5, 1, stats_per_row=2),  # logits read; loss + stats written
    "cross_entropy_bwd": _rowwise("softmax", 4, 2, stats_per_row=2),  # read logits, write grad
    # Fused attention (FlashAttention-2): fwd = 2 GEMMs (QK^T, PV); bwd = 5 (recompute QK^T, dV, dP, dQ, dK).
    "flash_attn": OpClass("attention", lambda s: _flash_flops(s, 2), lambda s, e: _flash_bytes(s, e, 2, 2), 3,
                          dims=(6,), dims_help=_FLASH_DIMS),
    "flash_attn_bwd": OpClass("attention", lambda s: _flash_flops(s, 5), lambda s, e: _flash_bytes(s, e, 4, 4), 6,
                              dims=(6,), dims_help=_FLASH_DIMS),
    # Memory-bound data movement.
    "embedding": OpClass("memory", lambda s: 0.0, _embedding_bytes, index_ops_per_element=EMBEDDING_INDEX_OPS,
                         dims=(3,), dims_help=_EMBEDDING_DIMS),
    "embedding_bwd": OpClass("memory", lambda s: s[0] * s[1], _embedding_bwd_bytes, dims=(3,),
                             dims_help=_EMBEDDING_DIMS),
    "copy": OpClass("memory", lambda s: 0.0, lambda s, e: 2.0 * e * _prod(s)),
    "reduce": OpClass("memory", lambda s: 2.0 * _prod(s), lambda s, e: e * _prod(s)),  # e.g. grad-norm squares
    # Optimizer over a flat shard of parameters (dtype = the model's compute dtype).
    "adam": OpClass("optimizer", lambda s: 12.0 * _prod(s), _adam_bytes(True)),
    "adam_unfused": OpClass("optimizer", lambda s: 12.0 * _prod(s), _adam_bytes(False)),
}
# A fused LayerNorm (Megatron's: apex's ``FusedLayerNorm``, Transformer Engine) moves the same bytes as
# PyTorch's native kernels but runs its own code; the predictor tells them apart by the ``_fused`` in the
# name (``fused_impl``; the ``features`` docstring says why and what it measured).
OPS |= {f"layernorm_fused{d}": OPS[f"layernorm{d}"] for d in ("", "_bwd")}


def gemm(m: int, n: int, k: int, dtype: str, b: int = 1, layout: str = "nn") -> Kernel:
    """``C[b,m,n] = A[b,m,k] @ B[b,k,n]``."""
    return Kernel("gemm", dtype, (b, m, n, k), layout)


def vector(op: str, rows: int, cols: int, dtype: str) -> Kernel:
    return Kernel(op, dtype, (rows, cols))
