"""Kernels as columns of arrays, gathered in one pass over the ``Kernel`` objects (inference speed: batches of
10^5 kernels share a few ops and dtypes): ``op_codes`` and ``stacked_shapes`` for any batch, and ``VectorBatch``,
what ``features.vector_features`` reads and what ``features.grown_vectors``' larger kernels are built as without
a ``Kernel`` object each (``mlp``)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..specs import DTYPE_BYTES
from .kernels import OPS, Kernel


def op_codes(kernels: Sequence[Kernel]) -> tuple[np.ndarray, tuple[str, ...]]:
    """(each kernel's index into ``ops``, the distinct ops in first-seen order): per-op facts are then looked up
    once per distinct op."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(k.op, len(index)) for k in kernels), dtype=np.int64, count=len(kernels))
    return codes, tuple(index)


def stacked_shapes(kernels: Sequence[Kernel], rank: int) -> np.ndarray:
    """[N, rank] int64 shapes of kernels of one rank, without a tuple-to-array conversion per row."""
    flat = itertools.chain.from_iterable(k.shape for k in kernels)
    return np.fromiter(flat, dtype=np.int64, count=rank * len(kernels)).reshape(len(kernels), rank)


@dataclass(frozen=True)
class VectorBatch:
    """Vector kernels as columns, gathered in one pass over the ``Kernel`` objects: per (op, dtype, rank) group
    the members' positions and shapes [members, rank], and per kernel its op's index in ``ops``.
    ``grown`` derives other kernels from these without building them (``grown_vectors``)."""

    groups: tuple[tuple[str, str, np.ndarray, np.ndarray], ...]  # (op, dtype, positions, shapes)
    op_idx: np.ndarray
    ops: tuple[str, ...]

    @staticmethod
    def of(kernels: Sequence[Kernel]) -> "VectorBatch":
        members: dict[tuple[str, str, int], list[int]] = {}
        for i, k in enumerate(kernels):
            members.setdefault((k.op, k.dtype, len(k.shape)), []).append(i)
        groups = tuple((op, dtype, np.array(idx, dtype=np.int64), stacked_shapes([kernels[i] for i in idx], rank))
                       for (op, dtype, rank), idx in members.items())
        return VectorBatch(groups, *op_codes(kernels))

    def grown(self, rows: np.ndarray, shift: np.ndarray) -> "VectorBatch":
        """Kernels ``rows`` (positions, repeats allowed) with their first dimension times ``2 ** shift``."""
        member = np.empty(len(self.op_idx), dtype=np.int64)
        for g, (_, _, idx, _) in enumerate(self.groups):
            member[idx] = g
        order = np.argsort(member[rows], kind="stable")
        bounds = np.searchsorted(member[rows][order], np.arange(len(self.groups) + 1))
        groups = []
        for g, (op, dtype, idx, shape) in enumerate(self.groups):
            out = order[bounds[g]:bounds[g + 1]]
            grown = shape[np.searchsorted(idx, rows[out])]
            grown[:, 0] <<= shift[out]
            groups.append((op, dtype, out, grown))
        return VectorBatch(tuple(groups), self.op_idx[rows], self.ops)

    def counts(self) -> tuple[np.ndarray, ...]:
        """(rows and cols [N, 2], FLOPs, bytes, element bytes); embeddings are tokens x hidden, flat ops one row.
        Each op's formulas run once per group on columns of dimensions: the same arithmetic as ``Kernel.flops``
        / ``Kernel.bytes``, without a Python call per kernel."""
        n = len(self.op_idx)
        dims, flops, bytes_, elem = np.empty((n, 2), dtype=np.int64), np.empty(n), np.empty(n), np.empty(n)
        for op, dtype, idx, shape in self.groups:
            cols = tuple(shape.T)
            dims[idx, 0], dims[idx, 1] = (1, cols[0]) if shape.shape[1] == 1 else (cols[0], cols[1])
            flops[idx] = OPS[op].flops(cols)
            bytes_[idx] = OPS[op].bytes(cols, DTYPE_BYTES[dtype])
            elem[idx] = DTYPE_BYTES[dtype]
        return dims, flops, bytes_, elem
