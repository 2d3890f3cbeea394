"""The rate a GPU's math units run a kernel at: datasheet peaks, and what the tensor-core instructions the
libraries issue on each architecture change about them (the features of ``features`` that depend on it).

One exception to datasheet peaks (stop 18): on Hopper and Blackwell a tensor-core GEMM whose operands are off
the 16-byte grid cannot use TMA / wgmma, and cuBLAS runs it with Ampere kernels; its peak is then
``mma.sync``'s rate (``gemm_peaks``), about half of the H100's. No training GEMM is affected (every Hopper
one in the data is aligned), so weights are unchanged. The held-out H200's NeuSight-shape bf16 linear layers
whose dimensions are odd or 2 mod 4 (measured at 2.8-3.7x the datasheet roofline) went from 65 to 38 %
error, the class from 22.7 to 17.6 %; its misaligned attention BMMs (196-token sequences, 2.4-2.7x) moved
little, 52 -> 48 %, as most are memory-bound at either peak.

Operands the tensor-core instruction cannot read as stored (stop 33): Hopper's wgmma reads 16-bit operands
K-major or MN-major, tf32 and fp8 ones only K-major (PTX ISA, wgmma.mma_async), so a tf32 GEMM whose operands
run along m or n is transposed inside the kernel. The H200 suite's tf32 GEMMs of 0.2 ms and more run at a
median 0.74 of the datasheet rate in ``nt`` (x W^T: both operands K-major), 0.68 in ``nn`` (dY W: one
MN-major) and 0.51 in ``tn`` (dY^T X: two), while its bf16, fp16 and fp32 GEMMs run at 0.70-0.79 in all
three. Without the feature the network explained the H200's slow tf32 ``nn`` through layout and element
size, which the A100 shares: the held-out A100's Aceso tf32 input-gradient GEMMs (``nn``) came out 1.45x
too slow. One-member leave-one-GPU-out, seeds 1 / 0: target cells 41 -> 40 / 38 -> 40; linear tf32 17.9 ->
12.0 / 17.2 -> 12.0 % (held-out A100 Aceso 26.2 -> 9.0 / 23.0 -> 8.1 %); worse: bmm tf32 10.1 -> 15.8 /
9.7 -> 11.8 % (RTX 3090 13.6 -> 27.9 / 13.8 -> 16.0 %), and with seed 1 the RTX 3090's fp16 BMMs 8.5 ->
19.7 % (seed 0: within 1 pp). The held-out H200 sees the feature only at 0 (clipped to its fold's range), so
its cells move by fold noise alone (bf16 BMM 16.4 -> 17.1 / 14.9 -> 17.3 %). Blackwell's tcgen05 is left
at 0: no measurement says whether it transposes tf32 itself.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import PredictorError
from ..specs import GpuSpec


#: Architectures without tensor cores. Frameworks run their fp16 GEMMs there as cuBLAS GEMMs with fp32 compute
#: (PyTorch: ``cublasGemmEx(..., CUDA_R_16F, ..., CUDA_R_32F)``), i.e. on the fp32 CUDA cores, whatever the
#: chip's own fp16 rate: the P100's 2x (18.7 TFLOP/s) or the P4's 1/64 (0.09).
NO_TENSOR_CORES = ("pascal",)


#: 32-bit integer lanes per SM from Volta on (whitepapers): 64, also where GA10x, Ada and Hopper doubled only the
#: fp32 lanes.
INT32_LANES_PER_SM = 64
#: Architectures whose CUDA cores run integer and fp32 instructions alike: their integer rate is the fp32 one.
SHARED_INT32_FP32_LANES = ("pascal",)


def integer_ops_per_s(gpu: GpuSpec) -> float:
    """Integer instructions per second over all SMs at the boost clock (one per integer lane per cycle)."""
    lane_rate = gpu.sms * gpu.boost_clock_hz
    fp32_lanes = gpu.peak_flops_per_s["fp32"] / (2.0 * lane_rate)
    lanes = fp32_lanes if gpu.architecture in SHARED_INT32_FP32_LANES else min(fp32_lanes, INT32_LANES_PER_SM)
    return lanes * lane_rate


def has_tensor_cores(gpu: GpuSpec) -> bool:
    return gpu.architecture not in NO_TENSOR_CORES


def peak_flops(dtype: str, family: str, gpu: GpuSpec) -> float:
    """Datasheet FLOP/s for a kernel: the dtype's matrix rate for GEMM/attention (tensor cores for
    tf32/fp16/bf16/fp8; fp16 on a GPU without tensor cores runs at its fp32 rate, ``NO_TENSOR_CORES``),
    else the fp32 CUDA-core rate (vector math runs in fp32 registers)."""
    if family in ("gemm", "attention"):
        if dtype == "fp16" and not has_tensor_cores(gpu) and dtype in gpu.peak_flops_per_s:
            dtype = "fp32"
        rate = gpu.peak_flops_per_s.get(dtype)
        if rate is None:
            raise PredictorError(f"{gpu.name} has no {dtype} matrix support (has {sorted(gpu.peak_flops_per_s)})")
        return rate
    return gpu.peak_flops_per_s["fp32"]


#: Widest vector load (LDG.128): operands whose rows start on 16-byte boundaries can be read 4 fp32 or
#: 8 fp16 values at a time.
MAX_ALIGNMENT_BYTES = 16


def alignment_bytes(dims: np.ndarray, elem_bytes: np.ndarray) -> np.ndarray:
    """Byte alignment all rows of a GEMM's operands share: element size x the largest power of two
    dividing m, n and k, capped at the widest vector load."""
    g = np.gcd.reduce(np.maximum(np.asarray(dims, dtype=np.int64), 1), axis=1)
    return np.minimum(elem_bytes * (g & -g), MAX_ALIGNMENT_BYTES)


#: Architectures whose fast tensor-core GEMMs (wgmma / tcgen05 fed by TMA) need every operand row on a
#: 16-byte boundary. cuBLAS runs other GEMMs with its Ampere kernels (the H200's bf16 GEMMs with a
#: dimension that is not a multiple of 8 ran as ``cutlass_80_tensorop_*_align2``, aligned ones as
#: ``nvjet_sm90_*``), which issue ``mma.sync``.
TMA_ARCHITECTURES = ("hopper", "blackwell")
#: Dense FMAs per SM per clock of ``mma.sync``: GA100's (A100 datasheet: 312 / 156 TFLOP/s fp16 / tf32 at
#: 1.41 GHz on 108 SMs). Hopper's own rate per SM-clock is twice this only through wgmma; FlashAttention-2,
#: built on mma.sync, reaches ~35 % of H100 peak (Shah et al. 2024) against 73 % of A100 peak (Dao 2023),
#: i.e. about the same share of this rate on both.
MMA_SYNC_FMA_PER_SM_CLOCK = {"fp16": 1024, "bf16": 1024, "tf32": 512}


def gemm_peaks(dtypes: Sequence[str], align_bytes: np.ndarray, gpu: GpuSpec) -> np.ndarray:
    """Matrix FLOP/s each GEMM can reach: the dtype's datasheet rate, or, on a TMA architecture with
    operands off the 16-byte grid, the ``mma.sync`` rate of the Ampere kernels the library falls back to."""
    dtypes = np.asarray(dtypes)
    peaks, legacy = np.empty(len(dtypes)), np.empty(len(dtypes))
    for d in np.unique(dtypes):  # per distinct dtype, not per kernel (inference speed)
        sel = dtypes == d
        peaks[sel] = peak_flops(str(d), "gemm", gpu)
        legacy[sel] = 2.0 * MMA_SYNC_FMA_PER_SM_CLOCK.get(str(d), np.inf) * gpu.sms * gpu.boost_clock_hz
    if gpu.architecture not in TMA_ARCHITECTURES:
        return peaks
    return np.where(np.asarray(align_bytes) < MAX_ALIGNMENT_BYTES, np.minimum(peaks, legacy), peaks)


#: Operand bytes a tensor-core SM consumes per clock at its datasheet rate (dense FMAs x element size) where the
#: tensor cores run at full rate: Volta's and Turing's 512 fp16 FMAs, GA102's and Ada's 256 tf32 FMAs. GeForce
#: Turing and Ampere parts run fp16 and tf32 with fp32 accumulation at half this rate.
FULL_RATE_MMA_BYTES_PER_SM_CLOCK = 1024.0
#: ``log2_mma_operand_rate`` range: half rate and below looks like half rate; full rate and above like full rate.
MMA_OPERAND_RATE_RANGE = (-2.0, 0.0)


def mma_operand_rate(peaks: np.ndarray, elem_bytes: np.ndarray, tensor: np.ndarray, gpu: GpuSpec) -> np.ndarray:
    """log2 of the operand bytes per SM-clock a tensor-core GEMM consumes at the GPU's datasheet rate, over
    the full rate's (``FULL_RATE_MMA_BYTES_PER_SM_CLOCK``), clipped to ``MMA_OPERAND_RATE_RANGE``; 0 on CUDA cores.

    At half rate the operand path (shared memory, registers) is never what limits a GEMM: Aceso's RTX 3090 and
    RTX 2080 Ti run their large fp16 GEMMs at 1.0 of the datasheet rate, where the V100, Titan RTX, A40 and
    A100 reach about 0.8. Above the full rate the value is clipped: the A100's and H200's own rates would
    identify them (stop 32: unclipped, the held-out A100's tf32 linear layers went 11 -> 44 %)."""
    rate = peaks * elem_bytes / (2.0 * gpu.sms * gpu.boost_clock_hz * FULL_RATE_MMA_BYTES_PER_SM_CLOCK)
    return np.where(tensor, np.clip(np.log2(np.maximum(rate, 1e-30)), *MMA_OPERAND_RATE_RANGE), 0.0)


#: Dtypes whose tensor-core instruction reads only K-major operands from shared memory, per architecture:
#: Hopper's wgmma transposes 16-bit operands itself, not tf32 or fp8 ones (PTX ISA, wgmma.mma_async; module
#: docstring).
K_MAJOR_ONLY_MMA = {"hopper": ("tf32", "fp8")}
#: Operands stored MN-major (not contiguous along the reduction) per layout: ``nt`` = x W^T reads both along
#: k, ``nn`` = dY W reads W along n, ``tn`` = dY^T X reads both along m / n.
MN_MAJOR_OPERANDS = {"nt": 0, "nn": 1, "tn": 2}


def mn_major_operands(dtypes: Sequence[str], layouts: Sequence[str], align_bytes: np.ndarray,
                      gpu: GpuSpec) -> np.ndarray:
    """How many operands a GEMM's wgmma kernel must transpose on the way in (0, 1 or 2): its MN-major
    operands where the architecture's instruction reads only K-major ones of its dtype, and the library
    runs that instruction (aligned operands, ``gemm_peaks``); 0 everywhere else. One dtype and layout per GEMM."""
    k_major_only = K_MAJOR_ONLY_MMA.get(gpu.architecture, ())
    dtypes, layouts = np.asarray(dtypes), np.asarray(layouts)
    transposed = np.zeros(len(dtypes))
    if not k_major_only:
        return transposed
    for layout, count in MN_MAJOR_OPERANDS.items():
        transposed[(layouts == layout) & np.isin(dtypes, k_major_only)] = count
    return np.where(np.asarray(align_bytes) >= MAX_ALIGNMENT_BYTES, transposed, 0.0)
