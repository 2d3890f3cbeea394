"""The predictor protocol: ``latency_s(kernels, gpu) -> seconds`` (vectorised), and shared helpers."""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from ..errors import PredictorError
from ..specs import GpuSpec
from .kernels import Kernel

#: Families whose FLOPs run on the matrix units (tensor cores for tf32/fp16/bf16/fp8).
MATRIX_FAMILIES = ("gemm", "attention")


class Predictor(Protocol):
    name: str

    def latency_s(self, kernels: Sequence[Kernel], gpu: GpuSpec) -> np.ndarray:
        """Latency in seconds of each kernel on ``gpu``; always > 0."""
        ...


def compute_peak_flops(kernel: Kernel, gpu: GpuSpec) -> float:
    """Peak FLOP/s available to ``kernel``: the dtype's matrix rate for GEMM-like kernels, the fp32
    CUDA-core rate for everything else (vector math runs in fp32 registers)."""
    if kernel.family in MATRIX_FAMILIES:
        rate = gpu.peak_flops_per_s.get(kernel.dtype)
        if rate is None:
            raise PredictorError(f"{gpu.name} has no {kernel.dtype} support (known: {sorted(gpu.peak_flops_per_s)})")
        return rate
    return gpu.peak_flops_per_s["fp32"]


class MemoisedPredictor:
    """Wraps a predictor with a per-(kernel, GPU) cache; lowering asks for the same kernels many times."""

    def __init__(self, inner: Predictor):
        self.inner = inner
        self.name = inner.name
        self._cache: dict[tuple[str, Kernel], float] = {}

    def latency_s(self, kernels: Sequence[Kernel], gpu: GpuSpec) -> np.ndarray:
        missing = list(dict.fromkeys(k for k in kernels if (gpu.name, k) not in self._cache))
        if missing:
            for k, t in zip(missing, self.inner.latency_s(missing, gpu)):
                self._cache[(gpu.name, k)] = float(t)
        return np.array([self._cache[(gpu.name, k)] for k in kernels], dtype=float)
