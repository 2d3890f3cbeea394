"""Bandwidth sharing between concurrent flows: the one place where it is decided.

Max-min fairness by progressive filling (network-model.md section 5.3): on every flow start or finish,
each link's remaining capacity is split equally among the unfrozen flows crossing it; the link with the
smallest share freezes its flows at that rate; repeat. Between events rates are constant, so a flow's
progress is exact. One SimPy process wakes at the next completion; a generation counter discards
wake-ups made stale by a rate change.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import simpy

Edge = tuple[str, str]
_EPS_BYTES = 1e-3


@dataclass(eq=False)
class _Flow:
    edges: tuple[Edge, ...]
    remaining: float
    done: simpy.Event
    rate: float = 0.0


def max_min_rates(flows: list[tuple[Edge, ...]], capacity: dict[Edge, float]) -> list[float]:
    """Max-min fair rate of each flow (given as its edge list) under per-edge ``capacity``."""
    rates = [0.0] * len(flows)
    users: dict[Edge, list[int]] = {}
    for i, edges in enumerate(flows):
        for e in edges:
            users.setdefault(e, []).append(i)
    left = {e: capacity[e] for e in users}
    active = {e: len(ids) for e, ids in users.items()}
    frozen = [False] * len(flows)
    pending = len(flows)
    while pending:
        edge = min((e for e in active if active[e] > 0), key=lambda e: (left[e] / active[e], e))
        share = left[edge] / active[edge]
        for i in users[edge]:
            if frozen[i]:
                continue
            frozen[i], rates[i] = True, share
            pending -= 1
            for e in flows[i]:
                left[e] = max(left[e] - share, 0.0)
                active[e] -= 1
    return rates


@dataclass(eq=False)
class Fabric:
    env: simpy.Environment
    capacity: dict[Edge, float]
    _flows: list[_Flow] = field(default_factory=list)
    _last_update: float = 0.0
    _generation: int = 0

    def transfer(self, edges: tuple[Edge, ...], size_bytes: float) -> simpy.Event:
        """An event that fires when ``size_bytes`` have crossed ``edges`` at the fair share."""
        done = self.env.event()
        if not edges or size_bytes <= 0:
            done.succeed()
            return done
        self._advance()
        self._flows.append(_Flow(edges, float(size_bytes), done))
        self._reschedule()
        return done

    def _advance(self) -> None:
        dt = self.env.now - self._last_update
        if dt > 0:
            for f in self._flows:
                f.remaining -= f.rate * dt
        self._last_update = self.env.now

    def _reschedule(self) -> None:
        rates = max_min_rates([f.edges for f in self._flows], self.capacity)
        for f, r in zip(self._flows, rates):
            f.rate = r
        self._generation += 1
        if self._flows:
            wait = min(max(f.remaining, 0.0) / f.rate for f in self._flows)
            self.env.process(self._wake(wait, self._generation))

    def _wake(self, wait: float, generation: int):
        yield self.env.timeout(wait)
        if generation != self._generation:
            return
        self._advance()
        finished = [f for f in self._flows if f.remaining <= _EPS_BYTES + 1e-9 * f.rate]
        self._flows = [f for f in self._flows if f not in finished]
        for f in finished:
            f.done.succeed()
        self._reschedule()
