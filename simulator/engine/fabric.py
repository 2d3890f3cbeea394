"""Bandwidth sharing between concurrent flows: the one place where it is decided.

Max-min fairness by progressive filling (``topology.sharing``, network-model.md section 5.3), with a rate
cap per flow (its channel's rate on an idle fabric, set by the collective algorithms). Rates change only
for the flows linked, through shared edges, to a flow that starts or ends: that component is re-solved,
everything else keeps its rate and its scheduled completion. When the caps of a component fit within its
links' capacities (always the case for one collective alone), every flow simply runs at its cap: this is
the closed form, and no solve is needed. Completions sit in a heap; one SimPy process wakes at the next.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import count
from typing import Optional

import simpy

from ..topology.sharing import max_min_rates

__all__ = ["Fabric", "max_min_rates"]

Edge = tuple[str, str]
_REL = 1e-12


@dataclass(eq=False)
class _Done:
    """Completion of a set of flows: ``event`` fires when the last of ``pending`` finishes."""

    event: simpy.Event
    pending: int = 0

    def one_finished(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.event.succeed()


@dataclass(eq=False)
class _Flow:
    seq: int
    edges: tuple[Edge, ...]
    remaining: float
    cap: float
    done: Optional[_Done]
    rate: float = 0.0
    stamp: float = 0.0  # time at which ``remaining`` was last brought up to date
    version: int = 0

    def finish(self) -> float:
        return self.stamp + (self.remaining / self.rate if self.rate > 0 else math.inf)


@dataclass(eq=False)
class Fabric:
    env: simpy.Environment
    capacity: dict[Edge, float]
    _users: dict[Edge, dict[_Flow, None]] = field(default_factory=dict)
    _heap: list = field(default_factory=list)
    _seq: count = field(default_factory=count)
    _next_wake: float = math.inf
    solves: int = 0  # max-min solves performed (the closed form needs none)

    def transfer(self, flows: list[tuple]) -> list[simpy.Event]:
        """Start ``(edges, size_bytes[, cap_bytes_per_s])`` flows together; each event fires when its bytes
        have crossed its edges at its fair share."""
        dones = [_Done(self.env.event()) for _ in flows]
        self._start(flows, dones)
        return [d.event for d in dones]

    def transfer_all(self, flows: list[tuple]) -> simpy.Event:
        """Like ``transfer``, with one event that fires when every flow has arrived (one call's flows)."""
        done = _Done(self.env.event())
        self._start(flows, [done] * len(flows))
        return done.event

    def _start(self, flows: list[tuple], dones: list[_Done]) -> None:
        new = []
        for spec, done in zip(flows, dones):
            edges, size = spec[0], float(spec[1])
            cap = float(spec[2]) if len(spec) > 2 else math.inf
            if not edges or size <= 0:
                continue
            done.pending += 1
            flow = _Flow(next(self._seq), tuple(edges), size, cap, done, stamp=self.env.now)
            for e in flow.edges:
                self._users.setdefault(e, {})[flow] = None
            new.append(flow)
        for done in dict.fromkeys(dones):
            if done.pending == 0:
                done.event.succeed()
        if new:
            self._update(self._component(new))

    def _component(self, seeds: list[_Flow]) -> list[_Flow]:
        """Active flows linked to ``seeds`` through shared edges, in start order (deterministic)."""
        seen = {f: None for f in seeds}
        stack = list(seeds)
        while stack:
            for e in stack.pop().edges:
                for other in self._users.get(e, ()):
                    if other not in seen:
                        seen[other] = None
                        stack.append(other)
        return sorted(seen, key=lambda f: f.seq)

    def _caps_fit(self, flows: list[_Flow]) -> bool:
        load: dict[Edge, float] = {}
        for f in flows:
            if f.cap == math.inf:
                return False
            for e in f.edges:
                load[e] = load.get(e, 0.0) + f.cap
        return all(v <= self.capacity[e] * (1 + 1e-9) for e, v in load.items())

    def _update(self, flows: list[_Flow]) -> None:
        now = self.env.now
        for f in flows:
            f.remaining = max(f.remaining - f.rate * (now - f.stamp), 0.0)
            f.stamp = now
        if self._caps_fit(flows):
            rates = [f.cap for f in flows]
        else:
            self.solves += 1
            rates = max_min_rates([f.edges for f in flows], self.capacity, [f.cap for f in flows])
        for f, r in zip(flows, rates):
            f.rate, f.version = r, f.version + 1
            heapq.heappush(self._heap, (f.finish(), f.seq, f.version, f))
        self._schedule()

    def _schedule(self) -> None:
        while self._heap and self._heap[0][2] != self._heap[0][3].version:
            heapq.heappop(self._heap)  # superseded by a newer rate
        if self._heap and self._heap[0][0] < self._next_wake:
            self._next_wake = self._heap[0][0]
            self.env.process(self._wake(self._next_wake))

    def _wake(self, at: float):
        yield self.env.timeout(max(at - self.env.now, 0.0))
        if at != self._next_wake:
            return  # an earlier wake was scheduled after this one, and has handled things
        self._next_wake = math.inf
        now = self.env.now
        finished = []
        while self._heap and self._heap[0][0] <= now * (1 + _REL) + 1e-15:
            _, _, version, f = heapq.heappop(self._heap)
            if version == f.version and f.done is not None:
                finished.append(f)
        neighbours: dict[_Flow, None] = {}
        for f in finished:
            for e in f.edges:
                users = self._users[e]
                users.pop(f, None)
                neighbours.update(users)
                if not users:
                    del self._users[e]
            f.done.one_finished()
            f.done = None
        for f in finished:
            neighbours.pop(f, None)
        if neighbours:
            self._update(self._component(list(neighbours)))
        else:
            self._schedule()
