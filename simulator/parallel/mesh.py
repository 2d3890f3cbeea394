"""Rank <-> (dp, pp, tp) coordinates and communication groups.

Megatron's order: tensor-parallel ranks innermost (contiguous, so a TP group sits on one node's
NVLink), then data-parallel, then pipeline stages outermost: ``rank = (pp_i * dp + dp_i) * tp + tp_i``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mesh:
    dp: int
    tp: int
    pp: int

    def rank(self, dp_i: int, pp_i: int, tp_i: int) -> int:
        return (pp_i * self.dp + dp_i) * self.tp + tp_i

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(dp_i, pp_i, tp_i) of ``rank``."""
        tp_i = rank % self.tp
        dp_i = (rank // self.tp) % self.dp
        return dp_i, rank // (self.tp * self.dp), tp_i

    def stage_ranks(self, pp_i: int) -> list[int]:
        return [self.rank(d, pp_i, t) for d in range(self.dp) for t in range(self.tp)]

    def group(self, axis: str, rank: int) -> tuple[int, ...]:
        """The ranks ``rank`` communicates with along ``axis``: tp, dp, or embedding (first and last
        stage, where tied word embeddings live)."""
        d, p, t = self.coords(rank)
        if axis == "tp":
            return tuple(self.rank(d, p, i) for i in range(self.tp))
        if axis == "dp":
            return tuple(self.rank(i, p, t) for i in range(self.dp))
        if axis == "embedding":
            return (self.rank(d, 0, t), self.rank(d, self.pp - 1, t))
        raise ValueError(f"unknown axis {axis!r}")

    def next_stage(self, rank: int, step: int) -> int:
        d, p, t = self.coords(rank)
        return self.rank(d, p + step, t)
