"""The predictor protocol: ``latency_s(kernels, gpu) -> seconds`` (vectorised), and shared helpers."""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from ..specs import GpuSpec
from .kernels import Kernel


class Predictor(Protocol):
    name: str

    def latency_s(self, kernels: Sequence[Kernel], gpu: GpuSpec) -> np.ndarray:
        """Latency in seconds of each kernel on ``gpu``; always > 0."""
        ...


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
