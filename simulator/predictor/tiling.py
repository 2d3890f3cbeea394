"""Tiles and waves: how a kernel is cut into thread blocks (CTAs) and how many rounds ("waves") of
CTAs the GPU's SMs need. The same choice is used to build training features and at inference, so
there is no train/test mismatch (NeuSight fed measured tiles in training and guessed ones after).

GEMM tile choice emulates a library heuristic for *any* GPU, measured or not: a candidate list per
architecture family and math unit (CUDA-core SIMT for fp32, tensor cores for tf32/fp16/bf16/fp8),
taken from the kernel names the libraries ship (cuBLAS ``maxwell/volta/ampere_sgemm_<a>x<b>``,
``*_h884gemm``, ``*_h1688gemm``, ``*_h16816gemm``, CUTLASS ``sm80/sm90`` tile sizes), and the
candidate with the smallest estimated time wins -- waves x per-wave time, with smaller tiles paying
for their lower operand reuse and split-K considered when one wave would leave SMs idle (what
cuBLAS/cuBLASLt heuristics weigh; Nvidia's "Matrix Multiplication Background" guide explains
the tile / wave quantisation trade-off).

Kernel names give tiles as ``<a>x<b>`` in cuBLAS's column-major view, where ``a`` spans the
columns of the row-major output (our ``n``) and ``b`` its rows (our ``m``).

Tried and rejected (stop 11 of issue 3): candidate lists per operand layout, read off the NeuSight
kernel names (cuBLAS runs every non-transposed fp32 GEMM of more than a few tiles as ``128x64_nn`` on
Pascal and ``128x128_nn`` on GA100, whatever the padding). The share of named kernels whose tile is
chosen rose from 9.5 / 15.2 / 29.1 / 15.9 / 29.2 % to 73.0 / 75.4 / 58.5 / 23.6 / 75.5 % (P100 / P4 /
T4 / V100 / A100), but one-member leave-one-GPU-out runs over all nine chips got worse with both
seeds: fp32 BMMs 19.0 -> 22.6 / 19.2 -> 21.9 %, fp32 linear 20.3 -> 25.5 / 20.5 -> 26.8 % (held-out
V100 PCIe linear 31 -> 57-62 %), P100 BMMs 9.9 -> 11.7 / 8.6 -> 11.3 % even with its tiles 99.6 %
right. Why is not understood (a P100 BMM with a 7-column output does take about what its 18x-padded
128x64 tiles cost: 26x the ideal time); the heuristic's own choice stays, as the better feature.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from ..specs import GpuSpec
from .kernels import Kernel
from .rates import has_tensor_cores

#: Maximum resident threads per SM by architecture (CUDA C Programming Guide, compute capabilities).
#: GA10x (Ampere GeForce/A40) and Ada have 1536; GA100 has 2048 -- told apart by L2 size below.
MAX_THREADS_PER_SM = {"pascal": 2048, "volta": 2048, "turing": 1024, "ampere": 2048, "ada": 1536,
                      "hopper": 2048, "blackwell": 2048}
#: Output elements of accumulators one SM holds at once (~64K 32-bit registers, half of them for
#: accumulators): bounds how many CTAs of a tile share an SM.
ACCUMULATORS_PER_SM = 32768
#: Operand-reuse constant (elements): a tm x tn tile does tm*tn FMAs per (tm + tn) loaded values, so
#: its efficiency relative to an infinitely large tile is 1 / (1 + REUSE * (1/tm + 1/tn)).
REUSE = 24.0
SPLIT_K_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)
ELEMENTWISE_THREADS, ELEMENTWISE_VECTOR = 128, 4  # PyTorch vectorized_elementwise_kernel


class GemmTile(NamedTuple):
    """A GEMM tiling: ``tm`` rows x ``tn`` columns of C per CTA, ``split`` slices of the reduction."""

    tm: int
    tn: int
    split: int = 1
    sliced: bool = False  # cuBLAS "sliced1x4": the CTA's warps share the reduction


_SIMT_CLASSIC = [(128, 128), (128, 64), (64, 64), (128, 32), (32, 128)]
_SIMT_SLICED = [(32, 32), (64, 32), (128, 32)]
#: Candidates as library names write them, (a, b) = (columns, rows) of the output tile.
CANDIDATES: dict[tuple[str, str], list[tuple[int, int, bool]]] = {
    ("pascal", "simt"): [(a, b, False) for a, b in _SIMT_CLASSIC] + [(32, 32, False)],
    ("volta", "simt"): [(a, b, False) for a, b in _SIMT_CLASSIC] + [(a, b, True) for a, b in _SIMT_SLICED],
    ("hopper", "simt"): [(256, 128, False), (128, 128, False), (256, 64, False), (128, 64, False),
                         (64, 128, False), (64, 64, False), (128, 32, False)],
    ("volta", "tensor"): [(256, 128, False), (128, 256, False), (128, 128, False), (128, 64, False),
                          (64, 128, False), (64, 64, False)],
    ("ampere", "tensor"): [(256, 128, False), (128, 256, False), (128, 128, False), (256, 64, False),
                           (64, 256, False), (128, 64, False), (64, 128, False), (64, 64, False)],
    ("hopper", "tensor"): [(256, 128, False), (128, 256, False), (128, 128, False), (256, 64, False),
                           (64, 256, False), (128, 64, False), (64, 128, False)],
}
#: Architecture -> the candidate family it shares kernels with.
FAMILY = {"pascal": "pascal", "volta": "volta", "turing": "volta", "ampere": "ampere", "ada": "ampere",
          "hopper": "hopper", "blackwell": "hopper"}


def math_unit(kernel: Kernel, gpu: GpuSpec) -> str:
    """'tensor' when the GEMM runs on matrix units (any non-fp32 dtype the GPU has a tensor rate for)."""
    if kernel.dtype == "fp32" or not has_tensor_cores(gpu):
        return "simt"
    return "tensor"


def candidates(gpu: GpuSpec, unit: str) -> list[tuple[int, int, bool]]:
    family = FAMILY[gpu.architecture]
    if unit == "simt":
        return CANDIDATES[(family if family in ("pascal", "hopper") else "volta", "simt")]
    return CANDIDATES[("volta" if family in ("volta", "pascal") else family, "tensor")]


def tile_efficiency(tm, tn):
    """Fraction of peak a tm x tn tile can sustain from operand reuse alone (1 for an infinite tile)."""
    return 1.0 / (1.0 + REUSE * (1.0 / np.asarray(tm, float) + 1.0 / np.asarray(tn, float)))


def ctas_per_sm(tm, tn):
    """Resident CTAs per SM for a tile (accumulator-register bound, 1..8)."""
    return np.clip(ACCUMULATORS_PER_SM // (np.asarray(tm) * np.asarray(tn)), 1, 8)


def _ceil_div(a, b):
    return -(-np.asarray(a, dtype=np.int64) // np.asarray(b, dtype=np.int64))


def gemm_blocks(shapes: np.ndarray, tm, tn, split=1) -> np.ndarray:
    """CTAs of GEMMs ``shapes`` ([N, 4] = b, m, n, k) cut into tm x tn tiles and ``split`` K-slices."""
    b, m, n = shapes[:, 0], shapes[:, 1], shapes[:, 2]
    return b * _ceil_div(m, tm) * _ceil_div(n, tn) * np.asarray(split)


def gemm_waves(shapes: np.ndarray, tm, tn, split, sms: int) -> np.ndarray:
    slots = sms * ctas_per_sm(tm, tn)
    return np.maximum(1, _ceil_div(gemm_blocks(shapes, tm, tn, split), slots))


def estimated_gemm_time_s(shapes: np.ndarray, gpu: GpuSpec, tm, tn, split, sliced, peak_flops_per_s: float):
    """Heuristic time of GEMMs with a tiling: waves x (one SM's resident CTAs at the tile's
    efficiency); split-K adds writing and re-reading fp32 partial sums and a ~2 us second launch."""
    k = np.maximum(shapes[:, 3], 1)
    per_sm = peak_flops_per_s / gpu.sms
    k_slice = _ceil_div(k, split)
    eff = tile_efficiency(tm, tn) * np.where(np.asarray(sliced) & (k_slice >= 4 * np.asarray(tm)), 1.12, 1.0)
    wave_s = ctas_per_sm(tm, tn) * 2.0 * np.asarray(tm) * np.asarray(tn) * k_slice / (per_sm * eff)
    time_s = gemm_waves(shapes, tm, tn, split, gpu.sms) * wave_s
    out_bytes = 4.0 * shapes[:, 0] * shapes[:, 1] * shapes[:, 2]
    reduce_s = 2e-6 + (np.asarray(split) + 1) * out_bytes / gpu.memory_bandwidth_bytes_per_s
    return time_s + np.where(np.asarray(split) > 1, reduce_s, 0.0)


def choose_gemm_tiles(shapes: np.ndarray, gpu: GpuSpec, unit: str, peak_flops_per_s: float) -> np.ndarray:
    """Tiles for GEMMs ``shapes`` ([N, 4] int: b, m, n, k) -> int array [N, 4] of (tm, tn, split, sliced).

    The candidate (and split-K factor) with the smallest estimated time wins; a later candidate must
    beat the incumbent by 3 %, so near-ties go to the earlier (larger) tile as libraries prefer."""
    shapes = np.asarray(shapes, dtype=np.int64).reshape(-1, 4)
    best = np.zeros((len(shapes), 4), dtype=np.int64)
    best_s = np.full(len(shapes), np.inf)
    for a, rows, sliced in candidates(gpu, unit):
        one_wave = gemm_blocks(shapes, rows, a) < gpu.sms
        for split in SPLIT_K_CHOICES:
            # split-K is only weighed for the GEMMs it may apply to (few of a batch: inference speed)
            idx = (np.arange(len(shapes)) if split == 1
                   else np.flatnonzero(one_wave & (shapes[:, 3] >= 256 * split)))
            if not len(idx):
                break
            t = estimated_gemm_time_s(shapes[idx], gpu, rows, a, split, sliced, peak_flops_per_s)
            better = t < best_s[idx] * 0.97
            best[idx[better]] = (rows, a, split, int(sliced))
            best_s[idx[better]] = t[better]
    return best


def choose_gemm_tile(kernel: Kernel, gpu: GpuSpec, peak_flops_per_s: float) -> GemmTile:
    """Scalar convenience wrapper of :func:`choose_gemm_tiles`."""
    tm, tn, split, sliced = choose_gemm_tiles(np.array([kernel.shape]), gpu, math_unit(kernel, gpu),
                                              peak_flops_per_s)[0]
    return GemmTile(int(tm), int(tn), int(split), bool(sliced))


_NAME_TILE = re.compile(r"(?:sgemm|gemm|tilesize|_MT|nvjet_sm\d+_[a-z]+)_?(\d+)x(\d+)", re.IGNORECASE)


def tile_from_kernel_name(name: str) -> tuple[int, int] | None:
    """(tm, tn) from a library kernel name such as ``volta_sgemm_128x64_nn`` (-> (64, 128)) or
    Hopper cuBLAS's ``nvjet_sm90_tst_256x128_64x4_1x2_h_bz_TNT`` (-> (128, 256))."""
    found = _NAME_TILE.search(name)
    if not found:
        return None
    a, b = int(found.group(1)), int(found.group(2))
    return b, a


# --- Vector and row-wise kernels ------------------------------------------------------------------

def threads_per_sm(gpu: GpuSpec) -> int:
    if gpu.architecture == "ampere" and gpu.l2_bytes < 20 * 2**20:  # GA10x, not GA100
        return 1536
    return MAX_THREADS_PER_SM[gpu.architecture]


def vector_blocks(rows: np.ndarray, cols: np.ndarray, elements: np.ndarray, rowwise: np.ndarray):
    """(CTAs, elements per CTA) of vector kernels. Row-wise ops (softmax, norms) give each row to one
    CTA; the others split the flattened tensor into 128-thread x 4-element CTAs (NeuSight's 512)."""
    per_cta = ELEMENTWISE_THREADS * ELEMENTWISE_VECTOR
    blocks = np.where(rowwise, rows, np.maximum(1, _ceil_div(np.maximum(elements, 1), per_cta)))
    return blocks, np.where(rowwise, cols, per_cta)


def vector_waves(blocks: np.ndarray, gpu: GpuSpec) -> tuple[np.ndarray, np.ndarray]:
    """(waves, busy fraction of the SM slots over all waves) for ``blocks`` 128-thread CTAs."""
    slots = gpu.sms * max(1, threads_per_sm(gpu) // ELEMENTWISE_THREADS)
    waves = np.maximum(1, _ceil_div(blocks, slots))
    return waves, blocks / (waves * slots)
