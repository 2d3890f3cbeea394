"""Roofline predictor: time = max(FLOPs / (peak x compute efficiency), bytes / (bandwidth x memory
efficiency)), never below a kernel-launch floor.

The efficiencies are typical achieved fractions, not fitted to any measurement here:
* GEMM 0.80 of peak FLOP/s: cuBLAS on large shapes reaches ~75-90% (NVIDIA's published cuBLAS
  benchmarks; nanoGPT/Megatron MFU studies), small shapes fall short, which the MLP models.
* Fused attention 0.60: FlashAttention-2 reports 50-73% of peak forward, 45-63% backward (Dao 2023).
* Memory-bound kernels 0.80 of datasheet DRAM bandwidth: STREAM-like copies reach ~85-92% on HBM,
  reductions and norms a little less.
* Launch floor 4 us: the CUDA-event time of a near-empty kernel launched from PyTorch.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..specs import GpuSpec
from .kernels import Kernel
from .rates import peak_flops

COMPUTE_EFFICIENCY = {"gemm": 0.80, "attention": 0.60}
MEMORY_EFFICIENCY = 0.80
LAUNCH_FLOOR_S = 4e-6


class RooflinePredictor:
    name = "roofline"

    def __init__(self, compute_efficiency: dict[str, float] | None = None, memory_efficiency: float = MEMORY_EFFICIENCY,
                 launch_floor_s: float = LAUNCH_FLOOR_S):
        self.compute_efficiency = dict(COMPUTE_EFFICIENCY, **(compute_efficiency or {}))
        self.memory_efficiency = memory_efficiency
        self.launch_floor_s = launch_floor_s

    def latency_s(self, kernels: Sequence[Kernel], gpu: GpuSpec) -> np.ndarray:
        out = np.empty(len(kernels))
        bandwidth = gpu.memory_bandwidth_bytes_per_s * self.memory_efficiency
        for i, k in enumerate(kernels):
            peak = peak_flops(k.dtype, k.family, gpu) * self.compute_efficiency.get(k.family, 1.0)
            out[i] = max(k.flops / peak, k.bytes / bandwidth, self.launch_floor_s)
        return out
