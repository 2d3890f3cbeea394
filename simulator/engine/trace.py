"""What the engine records: one interval per task per simulated rank."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    rank: int
    stream: str  # compute | comm
    name: str
    category: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Trace:
    intervals: tuple[Interval, ...]
    ranks: tuple[int, ...]
    multiplicity: dict[int, int]
    events: int  # SimPy events processed, for the scale benchmark

    @property
    def end_s(self) -> float:
        return max((i.end_s for i in self.intervals), default=0.0)
