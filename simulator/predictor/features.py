"""Kernel + GPU -> the MLP's input features and the ideal (roofline at 100 % of peak) time.

The GPU enters only through its specs, and only as *ratios to the kernel*: the ideal time from its
dtype-aware peak and bandwidth, waves over its SMs (and resident CTAs per SM), a GEMM's arithmetic
intensity over the GPU's ridge point, a row's bytes over its L1. No name, architecture one-hot, raw peak
or other per-GPU constant reaches the network, except one clipped to two values: whether the GPU runs a dtype's
tensor-core GEMMs at half rate (``mma_operand_rate``); and one kernel property that depends on the architecture,
how many operands a Hopper tf32 / fp8 GEMM transposes (``mn_major_operands``). Leave-one-GPU-out experiments with
per-GPU physics descriptors (board power per SM-GHz, base over boost clock, FLOP and DRAM bytes per
clock per SM), fed to the MLP or as a linear term of the logit, all made held-out GPUs worse (the
A100's fp32 linear layers went from 17 % to 56-154 % error): with a dozen training GPUs, any such
descriptor identifies GPUs and a new GPU brings an unseen combination. What they were meant to
capture -- power-limited parts (T4, L4) not holding boost clock -- is now one fitted physical
constant, not a feature: the power cap of fp32 GEMMs (``model``, stop 22); the GEMM feature matrix
carries the budget it reads as a last column that the network does not see. Later tries went the
same way (one-member runs over all nine chips, stop 10 of issue 3): board watts per peak TFLOP of the
GEMM's dtype (tf32 BMMs 12 -> 55 %), an HBM/GDDR flag and a Little's-law ratio of bandwidth x latency
over the bytes a kernel's resident CTAs keep in flight (17 instead of 20-22 target cells each). Stop 11:
without the element size (so that tf32 borrows fp16's tensor-core behaviour) held-out A100 tf32 linear
went 16.6 -> 9.2 % but RTX 3090 tf32 linear 16.6 -> 23.1 % (it runs tf32 at its datasheet rate, the A100
at 0.82), class means within 1 pp; group weights 1/n^0.75 instead of 1/sqrt(n) stayed within seed noise.
Stops 30 and 32 retried the HBM flag on elementwise and dropout kernels only (row-wise kernels 0), on
per-op offsets, one member, seed 1: target cells 33 -> 33 and 34 -> 32. Elementwise fp32 went 10.7 -> 9.8 %
(held-out A100 PCIe NeuSight 13.3 -> 8.8, H200 12.4 -> 8.7), but the P100's (HBM2 at 0.72 of its datasheet
bandwidth, where the A100 reaches about 0.9) 7.0 -> 15.3 %, RTX 3090 fp32 9.0 -> 11.0, V100 SXM2 fp16 7.1 -> 12.0.
Stop 39 (on every vector kernel, with the fused-norm bit): 47 -> 44 cells, the same wins and losses.

Operand alignment is a kernel property, not a GPU one, and libraries act on it: cuBLAS uses 128-bit vector
loads only when every operand row starts on a 16-byte boundary (NeuSight's P4 runs its aligned
transformer-shaped linear layers with ``sgemm_128x128x8_NT_vec`` at a median 0.79 of peak, its random shapes
with ``maxwell_sgemm_*`` kernels at medians of 0.17-0.35, for kernels of 0.1 ms and more). With it (stop 11;
one-member leave-one-GPU-out runs over all nine chips, seeds 0 / 1): fp32 BMM 19.0 -> 17.4 / 19.2 -> 16.8 %,
fp32 linear 20.3 -> 18.3 / 20.5 -> 18.4 % (held-out V100 PCIe 31 -> 21 %, V100 SXM2 15 -> 9 %, P4 20 -> 16 %;
P100 23 -> 25 % and T4 36 -> 40 % worse), other classes within seed noise; target cells 21 -> 22 / 23 -> 26.
The alignment counts m as well as the operands' leading dimensions: cuBLAS's choice on the P4 follows the
leading dimensions alone (an odd n keeps the vectorised kernel in ``nt``, an odd k loses it), but that
stricter feature predicted worse (fp32 BMM 18.2 / 17.9 %, fp32 linear 19.4 / 19.4 %, cells 22 / 22): possibly
because a GEMM whose three dimensions are multiples of 4 also fills whole tiles more often. A cap of 64 bytes
instead of the 16 of a vector load (seed 0) moved every GEMM class mean by <= 0.7 pp except the two-GPU tf32
BMMs (15.0 -> 12.5 %).

The predicted latency is ``t_fixed + t_ideal / u`` with ``u`` in (0, 1] from the network and
``t_ideal = max(FLOPs / peak, bytes / bandwidth)`` (datasheet values), so a prediction is never faster
than the roofline at 100 % nor below the fixed launch cost. Tiles and waves enter as features (the
wave-quantised time over ``t_ideal`` among them) rather than in the bound: a wave model built on a
guessed tile is not a safe lower bound (5-10 % of the measured GEMMs run faster than it).

Two feature sets, one per network:

* ``gemm``: tiles from :mod:`tiling` (same choice in training and inference), the wave-quantised
  time over the ideal one, waves, last-wave fill, padding, split-K, reduction length per CTA,
  layout, math unit, element size, operand alignment (bytes, up to a 16-byte vector load), on tensor
  cores whether the GPU runs the dtype at half rate (``mma_operand_rate``, stop 32: GeForce parts with fp32
  accumulation reach their datasheet rate, full-rate parts about 0.8 of it), and how many operands a
  Hopper wgmma kernel must transpose (``mn_major_operands``, stop 33). The last three, and the
  peak a GEMM can reach, are facts about the GPU's math units: :mod:`rates`.
* ``vector`` (elementwise, dropout, softmax, norms, gathers, copies, optimizer steps): waves of
  128-thread CTAs, row length for row-wise ops and its bytes over the GPU's L1 per SM, element size,
  op kind, direction, whether the op is transcendental, and whether it is a fused library kernel
  (``fused_impl``: Megatron's fused LayerNorm, named ``*_fused*`` in :data:`kernels.OPS`).

Fused norms (stop 38): Aceso's LayerNorms are Megatron's fused (apex) kernels, NeuSight's, Vidur's and the
H200 suite's PyTorch's native ones, and their speed-by-width curves differ (the shared network put Aceso's
fp16 2560-wide forward norms at 1.2-1.4x their time even with their GPU in training, the 7168-wide ones at
0.75-0.96x). Per-(source, GPU) offsets cannot fix that: they shift every width together. The bit is a
property of the software, which the lowering knows, not of the GPU. Leave-one-GPU-out (three members):
target cells 41 -> 47 (calibration 45 -> 52); every Aceso norm cell better (V100 SXM2 fp16 13.8 -> 7.4 %,
A100 SXM4 fp32 15.2 -> 8.3 %), native ones worse, now fitted without Aceso's beside them (A100 PCIe
NeuSight 7.0 -> 9.6 %, T4 10.7 -> 12.3 %, H200 suite fp32 36.5 -> 51.3 %).
Tried and not kept (stop 44): Vidur's RMSNorm (vLLM's own kernel, 0.36-0.59 of the bandwidth) told apart from
PyTorch's native one (the H200 suite's, whose fp32 RMSNorm held out came out 1.67x too slow and carried 27.6 of
that cell's 51.3 points). One member, seed 1, against 47 target cells: with the ``fused_impl`` bit, 44 (held-out
H200 suite norm fp32 58.2 -> 42.5 %, A40 Vidur norm 42.9 -> 27.8 %, but Aceso's fused fp16 norms 7.1-13.5 ->
10.7-16.4 %: the bit now also meant vLLM); with a bit of its own (``vllm_impl``), 45 (H200 norm fp32 58.2 -> 52.5,
softmax bf16 57.3 -> 45.6, but fp32 softmax 25.4 -> 32.1 %, A40 Vidur norm 42.9 -> 47.5 %, NeuSight's A100 and
P4 norms lost their cells).

No compute-over-memory balance for vector kernels (stop 13): every measured one sits 4-100x below the
ridge point, where the balance says nothing about the kernel and much about the GPU (its FP32 rate over
its bandwidth), and between -4 and -3 (log2) only ops of 1-1.5 FLOP per byte on the GPUs with the lowest
ridge points did -- Vidur's slow vLLM rotary embedding on the A100 among them, so the shipped weights
put a bf16 rope or reduction on the A100 SXM4 80GB at 0.42-0.51 of the bandwidth and on the H100 at
0.93. One-member leave-one-GPU-out runs over all nine chips, seeds 0 / 1: norm fp32 16.2 -> 12.2 /
16.4 -> 13.5 % (held-out A100 PCIe NeuSight norms 31 -> 11 %, A100 SXM4 Aceso fp32 norms 25 -> 12 %),
norm fp16 26.3 -> 23.7 / 23.4 -> 25.0 %, other classes within 0.6 pp; target cells 27 -> 27 / 24 -> 26.

Row bytes over L1: a multi-pass row-wise kernel (PyTorch's block softmax reads a row three times, for
the max, the sum and the output) re-reads the row from L1 while the rows of the resident CTAs fit
there, and from DRAM once they do not. NeuSight's fp32 softmax sustains 0.6-0.8 of the bandwidth on
rows up to a GPU-dependent length and 0.38-0.45 beyond (2 of 4 tensors' worth of traffic), and the
drop moves with the L1: between 4 and 8 KB rows on the P100 (24 KB L1), 8-16 KB on the P4 (48 KB),
16-32 KB on the T4 (96 KB) and the V100, 32-64 KB on the A100 (192 KB). The training split's rows stop at
16 KB, so without the ratio long rows on a held-out GPU were extrapolated from short ones. One-member
leave-one-GPU-out runs over all nine chips (seeds 0 / 1): norm fp32 22.1 -> 16.8 / 21.7 -> 15.8 %,
softmax fp32 20.1 -> 17.2 / 20.1 -> 17.5 %, other classes within seed noise; target cells 22 -> 25 /
26 -> 26 of 76. A logit offset per (source, kernel kind) shared across GPUs ("implementation
offsets": the software stack that measured a kernel is known, and e.g. Aceso's fp32 layer norm runs at
0.6-0.7 of the bandwidth on all five of its GPUs where NeuSight's training shapes run at 0.33-0.48)
helped without the L1 ratio (norm fp32 22.1 -> 19.1 %, 22 -> 24 cells) and not with it (24 cells),
so it was not kept.

Tried and not kept (stop 33): a flag for softmax kernels that run one warp per row (PyTorch's for rows of
at most 1024 elements and 4 KB, Megatron's fused causal softmax always); longer PyTorch rows go to a
block-per-row kernel. The step shows on some GPUs and not on others (NeuSight fp32, fraction of bandwidth
for rows of 2-4 KB -> 4-8 KB: A100 0.85 -> 0.59, P100 0.58 -> 0.39, V100 0.76 -> 0.62, P4 and T4 flat,
H200 suite 0.85 -> 0.81). One member, seed 1: 41 -> 41 target cells, softmax fp32 20.1 -> 21.3 % (held-out
P100 29.0 -> 30.2, V100 13.9 -> 16.9, A100 20.8 -> 19.0), the H200's bf16 softmax 60 -> 47 %.

Gathers (stop 35): PyTorch's embedding is ``index_select``, whose threads each divide by runtime sizes three
times to locate one 2-byte element; Vidur's A100 PCIe 80GB and A40 run it at the same rate per SM cycle, at
0.19 and 0.48 of their bandwidths. Its ideal time is now the larger of the DRAM time and its index arithmetic
(``kernels.EMBEDDING_INDEX_OPS`` per element) at the GPU's integer rate (``rates.integer_ops_per_s``); with
bytes alone each held-out GPU got the other's fraction of the bandwidth. One member, seed 1: held-out
embeddings A100 80GB 65.3 -> 13.9 %, A40 182.1 -> 13.7 %; target cells 39 -> 40, class means within 1.5 pp.

Tried and not kept (stop 35): the norms' row bytes times the rows resident per SM (one 128-thread CTA per row,
as in PyTorch's vectorised layer norm and apex) over the L1, so that Aceso's 7168-wide rows (0.5 of the
bandwidth on every GPU) fall out of the L1 where its 2560-wide ones fit. One member, seed 1: target cells
39 -> 34; norm fp32 13.7 -> 15.2 % (NeuSight's held-out A100 7.4 -> 13.0, T4 11.3 -> 13.2); Aceso's norm cells
moved by -1.4 to +1.7 pp.
Also not kept (stop 35): the share of a row PyTorch 2.1's block softmax reads with scalar loads (its ILP-wide
loop covers whole multiples of ILP x ``SoftMax_getBlockSize`` threads: 1/3 of a 3072-wide fp32 row, none of a
2048- or 4096-wide one; NeuSight's held-out A100 and T4 run 3072-wide rows 20-30 % slower, relative to the
model, than 2048- and 4096-wide ones). One member, seed 1: target cells 40 -> 39, softmax fp32 19.9 -> 20.5 %
(P100 29.4 -> 23.6, V100 15.0 -> 13.0, but A100 19.3 -> 23.4, P4 13.1 -> 21.3).
Also not kept (stop 36): an SM term added to a vector kernel's time, c x elements / (SMs x boost clock), c one
fitted number of SM cycles per element per op, shared by every GPU (``model`` would add it to the latency).
Vidur's vLLM RMSNorm reads as its memory time at 0.92 of the bandwidth plus ~0.53 SM cycles per element on
both the A100 PCIe 80GB and the A40 (0.36 and 0.58 of their bandwidths), and the H200 suite's bf16 softmax
takes as long as its fp32 one. One member, seed 1: with c started at 0.05 the fits kept it at 0.003-0.15 (the
per-GPU offsets explained the two Vidur GPUs) and target cells went 40 -> 39 (H200 suite softmax bf16 58.8 ->
39.7 %, but norm bf16 21.5 -> 30.7 %, elementwise fp32 29.8 -> 35.2 %); started at 0.3, RMSNorm's c came out
0.26-0.33 and softmax's 0.2-0.4, and 36 cells (Aceso's A100 fp16 norms 14.2 -> 11.0 %, but every H200 suite
vector cell 1.5-2.5x worse: norm fp32 37.6 -> 64.3 %, elementwise bf16 20.4 -> 43.6 %). The H200, with the most
DRAM bytes per SM cycle (18.4; training GPUs 4.8-12.7), is not that SM-bound: its own (PyTorch) RMSNorm of
16384 x 8192 bf16 runs at 0.56 of the bandwidth, which leaves at most 0.17 cycles per element.

Layout: the weight-gradient GEMM (``tn``, X^T dY) never appears alone in the measured data, only inside
Aceso's backward timings beside the data-gradient GEMM (``nn`` or ``nt``), so the sum pins down the two
together and not each. With its own one-hot the network made ``tn`` almost free: the shipped weights
predicted every fp32 ``tn`` GEMM at 0.97-0.99 of peak on every GPU (the T4 and L4 included, where ``nt``
got 0.52-0.75) and fp16 ``tn`` 25-35 % faster than ``nn`` on the H100, i.e. the backward pass of every
simulated step too fast. It now shares the features of ``nn`` (``FEATURE_LAYOUT``), which it is timed
beside in Aceso's BMM backward. One-member leave-one-GPU-out runs over all nine chips (stop 13, seed 0):
target cells 25 -> 27 of 76 (sharing ``nt``'s: 24), class means within 1.3 pp (bmm fp32 17.4 -> 18.7 %,
bmm tf32 15.0 -> 13.9 %).

Tried and not kept (stop 16): a lower bound on the vector kernels' size feature (``log2_ideal_us`` >= -1, i.e.
0.5 us, so that the network cannot give the smallest kernels a utilisation of their own and the host
floor of NeuSight's and Aceso's small readings must go to the timing overheads). One-member
leave-one-GPU-out runs over all ten chips, seeds 0 / 1, against the overhead start alone: held-out H200
norm fp32 149 -> 31 / 278 -> 29 %, elementwise fp32 63 -> 22 / 144 -> 17 %, class means norm fp32
25 -> 15 %, elementwise fp32 13 -> 10 / 20 -> 10 % -- but the H200's bf16 adds, muls and copies of
2-16 MB came out at 10-160x their time (elementwise bf16 73 -> 471-1856 %): at 4.8 TB/s their ideal
times sit below those of every training GPU's kernels with as many waves, and the network, made to
give Vidur's 3-4 us tiny fp16 kernels a low utilisation at the bound, extrapolated a bump there. Also
bounding the last-wave fill below (>= 0.25) or letting Vidur's ops carry a per-op overhead did not
remove the bump.

Stop 17: the vector kernels' size feature is capped *above* at 1 us (``MAX_LOG2_VECTOR_IDEAL_US``). Over
1-16 waves the absolute ideal time identifies the GPU's bandwidth per SM, and a fast-memory GPU sits
outside every training GPU's range there: the held-out H200 ran bf16 copies of 16 MB at a predicted 0.12
of the bandwidth (5.4 us measured, 57 us predicted) while larger ones got 0.5-0.8, a bump no physics
explains. With the cap, size enters past 1 us only as waves and fill, i.e. relative to the GPU.
One-member leave-one-GPU-out runs over all ten chips, seeds 0 / 1, against the uncapped feature: target
cells 24 -> 29 / 23 -> 27 of 98; held-out H200 suite elementwise bf16 125 -> 33 / 109 -> 35 %, norm
fp32 110 -> 68 / 90 -> 65 %, its NeuSight-shape norms 18.7 -> 12.4 / 17.9 -> 12.1 %; class means norm fp32
20.3 -> 16.4 / 17.7 -> 16.5 %, but elementwise fp16 14.0 -> 15.1 / 14.0 -> 15.1 % (the held-out A40's
tiny Vidur ops, 21 -> 30 %), softmax fp32 20.2 -> 20.7 / 20.2 -> 21.7 %, norm fp16 20.0 -> 20.7 /
18.3 -> 20.1 %; the mean over vector cells of the nine other chips 12.5 -> 13.1 / 12.1 -> 13.0 %. Caps at
2 or 4 us, dropping the feature, or log2 bytes in its place (seed 0): 27, 28, 25, 25 cells; held-out H200
vector mean 34, 36, 36, 36 % (capped at 1 us: 34 %), nine other chips 13.1, 13.0, 12.7, 13.2 %.

Working set over L2 is left out of both: the A100's 40 MB L2 is alone in its range, so the ratio
confounds "big kernel on a big-L2 GPU" with "small kernel" (held-out A100 errors grew with it).
Stop 26 retried it on the vector kernels, now that device-timed small kernels exist (Vidur's A100 80GB
and A40, the H200 suite: their adds of 2-32 MB run at 1.05-1.8x the DRAM bandwidth, i.e. from L2).
One-member leave-one-GPU-out runs over all ten chips, seeds 0 / 1: log2(bytes / L2) clipped to [-3, 2]
met 33 -> 31 / 30 -> 32 target cells; held-out A40 Vidur elementwise 29.6 -> 21.1 / 29.7 -> 21.4 %,
A100 80GB Vidur norms 32.7 -> 29.4 / 34.5 -> 27.7 %, but H200 elementwise bf16 34.8 -> 32.0 /
35.3 -> 46.0 % and softmax bf16 48 -> 53 / 47 -> 54 %. Clipped to [-2, 0] (nothing past the L2 size):
33 -> 30 / 30 -> 32 cells, H200 elementwise bf16 34.8 -> 46.8 / 35.3 -> 37.5 %. Neither was kept. In the
same runs a floor of 2 us under the GEMM size feature (the held-out H200's 2-16 us GEMMs come out
1.3-1.4x too slow) met 33 -> 32 / 30 -> 31 cells with every class mean within 0.5 pp: not kept either.
As a feature the ratio could not let a kernel beat the DRAM roofline, which bounds every prediction, so stop 42
put the L2 in the vector kernels' ideal time instead: the share 1 - bytes / L2 of the bytes (0 past the L2's
size) at 2.5x the DRAM bandwidth (about the L2 / DRAM ratio of the A100, H100 and V100 in public
microbenchmarks). Three-member leave-one-GPU-out, retrained: 46 -> 45 target cells. The held-out H200's suite
elementwise fp32 went 31.5 -> 25.3 %, softmax bf16 57.2 -> 52.0 %, but its norms bf16 20.9 -> 25.9 %, Vidur's
A40 elementwise 15.3 -> 22.8 % and norms 42.5 -> 49.7 %, A100 80GB norms 33.1 -> 38.2 %, V100 SXM2 Aceso
elementwise fp32 10.7 -> 11.3 % (its cell lost).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..specs import DTYPE_BYTES, GpuSpec
from .kernels import OPS, Kernel
from .rates import alignment_bytes, gemm_peaks, integer_ops_per_s, mma_operand_rate, mn_major_operands
from .tiling import (choose_gemm_tiles, ctas_per_sm, gemm_blocks, gemm_waves, math_unit, threads_per_sm,
                     vector_blocks, vector_waves)
from .vector_batch import VectorBatch, stacked_shapes

LAYOUTS = ("nn", "nt")
#: Layouts the features cannot tell apart from another one (see the module docstring).
FEATURE_LAYOUT = {"tn": "nn"}
VECTOR_KINDS = ("elementwise", "dropout", "softmax", "norm", "gather")
GEMM_FEATURES = ("log2_ideal_us", "log2_compute_over_memory", "log2_tiled_over_ideal", "log2_waves",
                 "last_wave_fill", "padding_efficiency", "log2_tile_m", "log2_tile_n", "log2_split_k", "sliced",
                 "log2_k_per_cta", "tensor_unit", "log2_element_bytes", "log2_alignment_bytes",
                 "log2_mma_operand_rate", "mn_major_operands") + tuple(f"layout_{x}" for x in LAYOUTS)
VECTOR_FEATURES = ("log2_ideal_us_to_1", "log2_waves", "slot_fill", "log2_row_length",
                   "log2_element_bytes", "backward", "transcendental", "log2_row_over_l1", "fused_impl") + tuple(
                       f"kind_{k}" for k in VECTOR_KINDS)


def vector_kind(op: str) -> str:
    """Which trained behaviour a vector op shares (ops without own data map to the nearest kind)."""
    family = OPS[op].family
    if family in ("norm", "softmax"):
        return family
    if op.startswith("dropout"):
        return "dropout"
    if op.startswith("embedding"):
        return "gather"
    return "elementwise"


#: What a measured GPU keeps an offset for (``model``): GEMMs, and each vector op (per kind until stop 30).
OFFSET_SLOTS = ("gemm",) + tuple(f"vector:{op}" for op, c in OPS.items() if c.family not in ("gemm", "attention"))


#: Position of each slot in ``OFFSET_SLOTS`` (a dict: ``list.index`` per kernel cost 10 % of an inference batch).
SLOT_INDEX = {s: i for i, s in enumerate(OFFSET_SLOTS)}


def offset_slot(kernel_op: str) -> str:
    """The ``OFFSET_SLOTS`` entry of a GEMM or vector kernel's op."""
    return "gemm" if kernel_op == "gemm" else f"vector:{kernel_op}"


def _log2(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=float), 1e-30))


# Physical saturation points: beyond them a feature no longer changes a kernel's utilisation, so it
# is capped there instead of letting the network extrapolate from whichever training GPU happened to
# reach that corner (held-out V100 and P4 GEMMs of 1 s were predicted 3-5x too slow without caps).
# Kernel length is seen up to the throttling onset (1 ms); past it, length is the per-GPU throttle term's
# (``model``). Capping at 256 us instead left 256 us - 1 ms to neither: one-member leave-one-GPU-out
# runs over all nine chips, two seeds, met 20 / 19 of 76 target cells at 256 us and 22 / 21 at 1 ms
# (bmm fp16 13.7 -> 13.1 / 14.5 -> 13.6 %, fp32 21.2 -> 20.4 / 21.2 -> 20.3 %).
MAX_LOG2_IDEAL_US = 10.0
MAX_LOG2_WAVES = 4.0         # past 16 waves the tail wave costs < 6 %
MAX_LOG2_K_PER_CTA = 12.0    # past 4096 the prologue/epilogue of a CTA is amortised
MAX_LOG2_BALANCE = 4.0       # 16x past the ridge point a kernel is fully compute- or memory-bound
#: A vector kernel's size tells the network only whether it is in the launch-bound regime (ideal time
#: below ~1 us); past that, waves and fill carry its size relative to the GPU (module docstring, stop 17).
MAX_LOG2_VECTOR_IDEAL_US = 0.0
#: log2 of a row's bytes over the L1 per SM: below 1/256 a row is small whatever the GPU; above 8x a
#: multi-pass kernel re-reads it from L2 / DRAM whatever the GPU.
ROW_OVER_L1_RANGE = (-8.0, 3.0)
#: Kernels longer than this may slow down as a (passively cooled) card heats up; see ``model``.
THROTTLE_ONSET_S = 1e-3


def throttle_length(ideal_s: np.ndarray) -> np.ndarray:
    """How far past the throttling onset a kernel runs (log2 units, 0 below it)."""
    return np.maximum(_log2(ideal_s / THROTTLE_ONSET_S), 0.0)


def _size(t_ideal_s: np.ndarray) -> np.ndarray:
    return np.minimum(_log2(t_ideal_s / 1e-6), MAX_LOG2_IDEAL_US)


def _balance(t_compute_s: np.ndarray, t_memory_s: np.ndarray) -> np.ndarray:
    ratio = _log2(np.maximum(t_compute_s, 1e-15) / np.maximum(t_memory_s, 1e-15))
    return np.clip(ratio, -MAX_LOG2_BALANCE, MAX_LOG2_BALANCE)


def gemm_features(kernels: Sequence[Kernel], gpu: GpuSpec, align_bytes: np.ndarray | None = None,
                  shapes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(features [N, len(GEMM_FEATURES) + 3], ideal time s [N]) for GEMM kernels of one dtype or several:
    the network's inputs, then the power budget (``power_budget_log2_pj``), the clock floor
    (``clock_floor_column``) and the clock (``clock_column``). ``shapes`` and ``align_bytes`` replace the
    kernels' own shapes and the operands' alignment these give (``padded_gemms``)."""
    n = len(kernels)
    if shapes is None:
        shapes = stacked_shapes(kernels, 4)  # (b, m, n, k)
    # per-dtype and per-layout facts looked up once per distinct value (inference speed, as in ``vector_features``)
    dtypes, layouts = np.array([k.dtype for k in kernels]), np.array([k.layout for k in kernels])
    tensor, elem = np.zeros(n, dtype=bool), np.zeros(n)
    for d, first in zip(*np.unique(dtypes, return_index=True)):
        sel = dtypes == d
        tensor[sel], elem[sel] = math_unit(kernels[first], gpu) == "tensor", DTYPE_BYTES[str(d)]
    align = alignment_bytes(shapes[:, 1:], elem) if align_bytes is None else np.asarray(align_bytes, dtype=float)
    peaks = gemm_peaks(dtypes, align, gpu)
    tiles = np.zeros((n, 4), dtype=np.int64)
    for unit, peak_key in (("simt", False), ("tensor", True)):
        for peak in np.unique(peaks[tensor == peak_key]):
            sel = (tensor == peak_key) & (peaks == peak)
            tiles[sel] = choose_gemm_tiles(shapes[sel], gpu, unit, float(peak))
    tm, tn, split, sliced = tiles.T
    b, m, nn, k = shapes.T.astype(float)
    k_slice = np.ceil(np.maximum(k, 1) / split)
    waves = gemm_waves(shapes, tm, tn, split, gpu.sms)
    resident = ctas_per_sm(tm, tn)
    blocks = gemm_blocks(shapes, tm, tn, split)
    bw = gpu.memory_bandwidth_bytes_per_s
    bytes_ = elem * b * (m * k + k * nn + m * nn)
    t_compute, t_memory = 2.0 * b * m * nn * k / peaks, bytes_ / bw
    t_ideal = np.maximum(np.maximum(t_compute, t_memory), 1e-12)
    t_tiled = np.maximum(waves * resident * 2.0 * tm * tn * k_slice / (peaks / gpu.sms),
                         t_memory + np.where(split > 1, (split + 1) * 4.0 * b * m * nn / bw, 0.0))
    padded = np.ceil(m / tm) * tm * np.ceil(nn / tn) * tn
    layout_of = layouts.copy()
    for seen_as, shared in FEATURE_LAYOUT.items():
        layout_of[layouts == seen_as] = shared
    layout = [(layout_of == x).astype(float) for x in LAYOUTS]
    cols = [_size(t_ideal), _balance(t_compute, t_memory),
            _log2(t_tiled / t_ideal), np.minimum(_log2(waves), MAX_LOG2_WAVES), blocks / (waves * gpu.sms * resident),
            m * nn / np.maximum(padded, 1), _log2(tm), _log2(tn), _log2(split), sliced.astype(float),
            np.minimum(_log2(k_slice), MAX_LOG2_K_PER_CTA), tensor.astype(float), _log2(elem),
            _log2(align), mma_operand_rate(peaks, elem, tensor, gpu),
            mn_major_operands(dtypes, layouts, align, gpu)] + layout + [
                power_budget_log2_pj(dtypes, gpu), clock_floor_column(n, gpu), clock_column(n, gpu)]
    return np.column_stack(cols), t_ideal


def padded_gemms(kernels: Sequence[Kernel], x: np.ndarray, gpu: GpuSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, features, ideal time) of the GEMMs among ``kernels`` (features ``x``) that do not fill their
    chosen tiles, padded to whole tiles with their operands' alignment kept: what the library runs for them,
    so none is slower than its padded GEMM (``mlp``)."""
    rows = np.flatnonzero(x[:, GEMM_FEATURES.index("padding_efficiency")] < 1.0)
    if not len(rows):
        return rows, np.zeros((0, x.shape[1])), np.zeros(0)
    shapes = stacked_shapes([kernels[i] for i in rows], 4)
    for dim, col in ((1, "log2_tile_m"), (2, "log2_tile_n")):
        tile = np.rint(2.0 ** x[rows, GEMM_FEATURES.index(col)]).astype(np.int64)
        shapes[:, dim] = -(-shapes[:, dim] // tile) * tile
    xp, ideal = gemm_features([kernels[i] for i in rows], gpu,
                              2.0 ** x[rows, GEMM_FEATURES.index("log2_alignment_bytes")], shapes)
    return rows, xp, ideal


#: Budget of a GEMM on tensor cores (log2 pJ per FLOP): far above any cap, i.e. none (``log_power_cap``).
UNCAPPED_LOG2_PJ = 12.0
#: Sharpness of the power cap's knee: the smooth minimum (1 + (c / budget)^p)^(-1/p) of 1 and budget / c.
POWER_CAP_P = 16.0


def power_budget_log2_pj(dtypes: Sequence[str], gpu: GpuSpec) -> np.ndarray:
    """log2 of the board power over the fp32 CUDA-core peak, in pJ per FLOP, for fp32 GEMMs (the last
    column of ``gemm_features``, read by the power cap, not by the network); ``UNCAPPED_LOG2_PJ`` for
    GEMMs on tensor cores."""
    budget = float(np.log2(gpu.tdp_w / gpu.peak_flops_per_s["fp32"] * 1e12))
    return np.where(np.asarray(dtypes) == "fp32", budget, UNCAPPED_LOG2_PJ)


def clock_floor_column(n: int, gpu: GpuSpec) -> np.ndarray:
    """Column after the power budget (read by the power cap, not by the network): ln of the GPU's base
    clock over its boost clock, the least of its fp32 peak a power cap leaves (``log_power_cap``)."""
    return np.full(n, float(np.log(gpu.base_clock_hz / gpu.boost_clock_hz)))


def log_power_cap(budget_log2_pj, log_c_pj, xp, log_floor=None):
    """log of the fraction of its fp32 peak a GPU sustains on GEMMs within its board power: a smooth
    min(1, budget / c), c the energy per FLOP (pJ) that such a GEMM costs, fitted in training (``model``),
    and never below ``log_floor`` (``clock_floor_column``).
    ``xp`` is numpy or torch: the same formula serves training and inference.

    The floor (stop 34): NVIDIA's base clock is the clock a board holds within its TDP under sustained
    load; a cap fitted on the mildly capped training GPUs (T4 at 8.6 pJ per FLOP: 0.69) and extrapolated
    linearly put the L4 (2.4 pJ) at 0.19 of its boost clock, half its 795 MHz base clock (0.39), and the
    L40S, H100 PCIe and A40 below theirs too. Lowering the clock also lowers the voltage, so energy per
    FLOP falls as a board is capped harder: the linear cap overstates deep caps. With the shipped c no
    training GPU with fp32 GEMMs sits on its floor (T4: cap 0.69, floor 0.37; H200: 0.83 and 0.80): retrained,
    the weights came out byte-identical. Leave-one-GPU-out folds fitting c above ~13 pJ put the H200 on its
    floor (ampere-108sm: c 13.2 -> 14.1 pJ)."""
    z = POWER_CAP_P * (log_c_pj - budget_log2_pj * float(np.log(2.0)))
    cap = -xp.logaddexp(xp.zeros_like(z), z) / POWER_CAP_P
    return cap if log_floor is None else xp.maximum(cap, log_floor)


def vector_features(kernels: Sequence[Kernel] | VectorBatch, gpu: GpuSpec) -> tuple[np.ndarray, np.ndarray]:
    """(features [N, len(VECTOR_FEATURES) + 1], ideal time s [N]) for non-GEMM, non-attention kernels: the
    network's inputs, then the clock (``clock_column``)."""
    batch = kernels if isinstance(kernels, VectorBatch) else VectorBatch.of(kernels)
    n = len(batch.op_idx)
    dims, flops, bytes_, elem = batch.counts()
    op_idx, ops = batch.op_idx, batch.ops
    kind_of = np.array([VECTOR_KINDS.index(vector_kind(op)) for op in ops], dtype=np.int64)[op_idx]
    rowwise = np.isin(kind_of, [VECTOR_KINDS.index("softmax"), VECTOR_KINDS.index("norm")])
    backward = np.array([op.endswith("_bwd") for op in ops], dtype=float)[op_idx]
    transcendental = np.array([OPS[op].cost == "transcendental" for op in ops], dtype=float)[op_idx]
    index_ops = np.array([OPS[op].index_ops_per_element for op in ops], dtype=float)[op_idx]
    t_compute = flops / gpu.peak_flops_per_s["fp32"]
    t_memory = bytes_ / gpu.memory_bandwidth_bytes_per_s
    blocks, _ = vector_blocks(dims[:, 0], dims[:, 1], dims[:, 0] * dims[:, 1], rowwise)
    waves, fill = vector_waves(blocks, gpu)
    t_index = index_ops * dims[:, 0] * dims[:, 1] / integer_ops_per_s(gpu)
    t_ideal = np.maximum(np.maximum(np.maximum(t_compute, t_memory), t_index), 1e-9)
    kind_cols = [(kind_of == i).astype(float) for i in range(len(VECTOR_KINDS))]
    cols = [np.minimum(_size(t_ideal), MAX_LOG2_VECTOR_IDEAL_US), np.minimum(_log2(waves), MAX_LOG2_WAVES),
            fill, np.where(rowwise, _log2(dims[:, 1]), 0.0), _log2(elem), backward, transcendental,
            np.where(rowwise, np.clip(_log2(dims[:, 1] * elem / gpu.l1_bytes), *ROW_OVER_L1_RANGE),
                     ROW_OVER_L1_RANGE[0]),
            np.array(["_fused" in op for op in ops], dtype=float)[op_idx]] + kind_cols + [clock_column(n, gpu)]
    return np.column_stack(cols), t_ideal


#: Most doublings ``grown_vectors`` takes per kernel (a one-CTA kernel fills a B200's 148 x 16 slots in 12).
MAX_GROWTH_STEPS = 16


def grown_vectors(x: np.ndarray, ideal_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, shift): for each vector kernel (features ``x``) that is launch-bound (ideal time under the size
    feature's cap, ``MAX_LOG2_VECTOR_IDEAL_US``) or leaves part of its one wave idle, the same kernel with its
    first dimension (rows, tokens or elements) times 2, 4, ... until it reaches the cap and fills a wave; a row
    per grown kernel (``rows`` repeats the kernel's index, ``shift`` is log2 of the factor). A kernel does a
    subset of each one's work in independent blocks, so it is not slower than any of them (``mlp``)."""
    cap_s = 1e-6 * 2.0 ** MAX_LOG2_VECTOR_IDEAL_US
    one_wave = x[:, VECTOR_FEATURES.index("log2_waves")] <= 0.0
    fill = x[:, VECTOR_FEATURES.index("slot_fill")]
    to_cap = np.ceil(np.log2(cap_s / np.maximum(ideal_s, 1e-12)))
    to_wave = np.where(one_wave, np.ceil(np.log2(1.0 / np.maximum(fill, 1e-12))), 0.0)
    steps = np.clip(np.maximum(to_cap, to_wave), 0, MAX_GROWTH_STEPS).astype(np.int64)
    rows = np.repeat(np.arange(len(steps)), steps)
    # shift 1..steps[i] for each kernel's run of rows
    shift = np.arange(len(rows)) - np.repeat(np.cumsum(steps) - steps, steps) + 1
    return rows, shift


def clock_column(n: int, gpu: GpuSpec) -> np.ndarray:
    """Last column of both feature matrices (not a network input): ln of the GPU's boost clock in GHz,
    which turns the fitted fixed time in cycles into seconds (``model``)."""
    return np.full(n, float(np.log(gpu.boost_clock_hz / 1e9)))


__all__ = ["log_power_cap", "power_budget_log2_pj", "clock_floor_column", "THROTTLE_ONSET_S", "throttle_length",
           "GEMM_FEATURES", "VECTOR_FEATURES", "gemm_features", "vector_features", "vector_kind", "threads_per_sm",
           "grown_vectors", "padded_gemms"]
