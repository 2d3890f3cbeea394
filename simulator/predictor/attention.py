"""Fused (flash) attention from the GPU's specs and the GEMM network's large-GEMM utilisation.

No measurement of fused attention is trained on (the H200 suite's 16 calls are evaluated only), so
its time is built from what a FlashAttention-style kernel does per score element of the (query,
key) tiles it visits: ``2 x head_dim`` multiply-adds per matmul on the tensor cores (2 matmuls
forward, 5 backward), at the utilisation the same GPU reaches on a large GEMM of the dtype, plus one
exponential on the SFU (MUFU: 16 per SM per clock on every architecture since Maxwell, CUDA C++
Programming Guide, arithmetic instruction throughput), the two not overlapped::

    t = tiles x 128^2 x (2 d x matmuls / (peak x u_big) + 1 / (16 x SMs x boost clock)) / last-wave fill

The exponential is what makes head dim 64 slower per FLOP than 128 (a third of the A100's time at
d = 64). Causal masks skip the tiles above the diagonal (bottom-right aligned) but compute the
diagonal ones in full. The backward pass reaches ``FLASH_BWD_EFFICIENCY`` of that model (atomic dQ
accumulation and recomputation) and runs three memory-bound side kernels, like FlashAttention-2 and
cuDNN alike: the row dot product D = rowsum(dO x O) (reads O and dO), the zeroing of the fp32 dQ
accumulator and its conversion to the dtype.

Against FlashAttention-2's published A100 figures (Dao 2023: 50-73 % of peak forward, up to 63 %
backward, the highest at head dim 128 and long sequences) the model gives, with the shipped weights,
73 % forward and 63 % backward at head dim 128 and 62 % / 58 % at head dim 64 (16k tokens, not causal).
On the H200 suite's cuDNN SDPA calls (wgmma kernels; causal, 1k-8k tokens, head dim 64 / 128), never
trained on, the leave-one-GPU-out fold predicts 0.78-1.09x the forward and 0.76-1.00x the backward times
(the FlashAttention-2 ratios used before, blind to head dim: 0.77-1.52x and 0.64-1.36x).
"""
from __future__ import annotations

from ..specs import DTYPE_BYTES, GpuSpec
from .kernels import Kernel

TILE_ROWS = TILE_COLS = 128
#: exponentials per SM per clock (MUFU.EX2)
SFU_PER_SM_CLOCK = 16
MATMULS = {"flash_attn": 2, "flash_attn_bwd": 5}
#: FlashAttention-2's backward on the A100 reaches 63 % of peak at head dim 128 (Dao 2023), where the
#: forward model above with the A100's large-GEMM utilisation (0.87-0.89) gives 81 %: 0.63 / 0.81.
FLASH_BWD_EFFICIENCY = 0.78


def score_tiles(sq: int, sk: int, causal: bool) -> int:
    """(query, key) tiles one (batch, head) visits: all of them, or those on and below the diagonal."""
    nq, nk = -(-sq // TILE_ROWS), -(-sk // TILE_COLS)
    if not causal:
        return nq * nk
    return sum(max(0, min(nk, -(-((i + 1) * TILE_ROWS + sk - sq) // TILE_COLS))) for i in range(nq))


def flash_compute_s(kernel: Kernel, gpu: GpuSpec, peak_flops_per_s: float, u_big: float) -> float:
    """Time of the main fused-attention kernel, without the fixed launch time (module docstring)."""
    batch, heads, sq, sk, d, causal = kernel.shape
    elements = batch * heads * score_tiles(sq, sk, bool(causal)) * TILE_ROWS * TILE_COLS
    per_element_s = (2 * d * MATMULS[kernel.op] / (peak_flops_per_s * u_big)
                     + 1.0 / (SFU_PER_SM_CLOCK * gpu.sms * gpu.boost_clock_hz))
    ctas = batch * heads * -(-sq // TILE_ROWS)
    fill = ctas / (-(-ctas // gpu.sms) * gpu.sms)
    efficiency = FLASH_BWD_EFFICIENCY if kernel.op == "flash_attn_bwd" else 1.0
    return elements * per_element_s / fill / efficiency


def backward_side_kernels(kernel: Kernel) -> list[Kernel]:
    """The memory-bound kernels a fused attention backward also runs, as fp32 copies moving the same
    bytes (a copy of k elements moves 8k): D = rowsum(dO x O) (reads O and dO), zeroing the fp32 dQ
    accumulator, converting it to the dtype."""
    if kernel.op != "flash_attn_bwd":
        return []
    batch, heads, sq, _, d, _ = kernel.shape
    n, e = batch * heads * sq * d, DTYPE_BYTES[kernel.dtype]
    return [Kernel("copy", "fp32", (max(1, round(n * nbytes / 8)),)) for nbytes in (2 * e, 4, 4 + e)]
