"""Trace -> per-rank time breakdown. Pure functions over intervals.

For each simulated rank: ``compute_s`` is the time its compute stream is busy; ``exposed_comm_s`` the
time its comm stream is busy while compute is idle; ``idle_s`` the rest of the step (pipeline bubble and
waiting). The three add up to the step time.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..engine.trace import Interval, Trace


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping [start, end) intervals."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


def subtract(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of ``a`` not covered by ``b`` (both already merged)."""
    total, j = 0.0, 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                total += b[k][0] - cur
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            total += e - cur
    return total


@dataclass(frozen=True)
class RankBreakdown:
    rank: int
    end_s: float
    compute_s: float
    exposed_comm_s: float
    idle_s: float
    comm_s: float


def rank_breakdown(trace: Trace, rank: int, step_s: float) -> RankBreakdown:
    mine: list[Interval] = [i for i in trace.intervals if i.rank == rank]
    compute = union([(i.start_s, i.end_s) for i in mine if i.stream == "compute"])
    comm = union([(i.start_s, i.end_s) for i in mine if i.stream == "comm"])
    busy, exposed = length(compute), subtract(comm, compute)
    end = max((i.end_s for i in mine), default=0.0)
    return RankBreakdown(rank, end, busy, exposed, max(step_s - busy - exposed, 0.0), length(comm))


def breakdowns(trace: Trace) -> list[RankBreakdown]:
    step = trace.end_s
    return [rank_breakdown(trace, r, step) for r in trace.ranks]


def critical(rows: list[RankBreakdown]) -> RankBreakdown:
    """The rank the summary reports: the one with the most compute (the pipeline's bottleneck stage),
    ties broken by the lowest rank."""
    return max(rows, key=lambda r: (r.compute_s, -r.rank))
