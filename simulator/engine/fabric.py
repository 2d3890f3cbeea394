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
    """Max-min fair rate of each flow (given as its edge list) under per-edge ``capacity``.

    Each round freezes the flows of every edge whose fair share equals the current minimum, so a
    symmetric collective resolves in one round whatever its size.
    """
    rates = [0.0] * len(flows)
    users: dict[Edge, list[int]] = {}
    for i, edges in enumerate(flows):
        for e in edges:
            users.setdefault(e, []).append(i)
    left = {e: capacity[e] for e in users}
    active = {e: len(ids) for e, ids in users.items()}
    frozen = [False] * len(flows)
    while active:
        shares = {e: left[e] / n for e, n in active.items()}
        low = min(shares.values())
        for edge in [e for e, s in shares.items() if s <= low * (1 + 1e-12)]:
            for i in users[edge]:
                if frozen[i]:
                    continue
                frozen[i], rates[i] = True, low
                for e in flows[i]:
                    left[e] = max(left[e] - low, 0.0)
                    active[e] -= 1
                    if active[e] == 0:
                        del active[e]
    return rates


@dataclass(eq=False)
class Fabric:
    env: simpy.Environment
    capacity: dict[Edge, float]
    _flows: list[_Flow] = field(default_factory=list)
    _last_update: float = 0.0
    _generation: int = 0

    def transfer(self, flows: list[tuple[tuple[Edge, ...], float]]) -> list[simpy.Event]:
        """Start ``(edges, size_bytes)`` flows together; each event fires when its bytes have crossed
        its edges at the fair share."""
        events, added = [], False
        self._advance()
        for edges, size_bytes in flows:
            done = self.env.event()
            events.append(done)
            if not edges or size_bytes <= 0:
                done.succeed()
            else:
                self._flows.append(_Flow(edges, float(size_bytes), done))
                added = True
        if added:
            self._reschedule()
        return events

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
        still = []
        for f in self._flows:
            if f.remaining <= _EPS_BYTES + 1e-9 * f.rate:
                f.done.succeed()
            else:
                still.append(f)
        self._flows = still
        self._reschedule()
