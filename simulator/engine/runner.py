"""Runs a Program in SimPy over a topology and returns a Trace.

The engine knows SimPy, the Program, routes and collective algorithms; nothing about transformers,
predictors or plans. One generator process per (rank, stream) walks its tasks in order.
"""
from __future__ import annotations

from typing import Sequence

import simpy

from ..collectives import CollectivePlan, lower_collective
from ..topology import Topology
from .fabric import Fabric
from .program import CommTask, ComputeTask, Program, Task
from .trace import Interval, Trace


class _Run:
    def __init__(self, program: Program, topo: Topology):
        self.env = simpy.Environment()
        self.topo = topo
        capacity = {(u, v): d["capacity_bytes_per_s"] for u, v, d in topo.graph.edges(data=True)}
        self.fabric = Fabric(self.env, capacity)
        self.done = {t.id: self.env.event() for t in program.tasks}
        self.arrived: dict[int, int] = {}
        self.started: dict[int, float] = {}
        self.plans: dict[tuple, tuple[float, list]] = {}
        self.intervals: list[Interval] = []
        streams: dict[tuple[int, str], list[Task]] = {}
        for t in program.tasks:
            ranks = (t.rank,) if isinstance(t, ComputeTask) else t.ranks
            for r in ranks:
                streams.setdefault((r, t.stream), []).append(t)
        for key in sorted(streams):
            self.env.process(self._stream(key[0], streams[key]))

    def _stream(self, rank: int, tasks: list[Task]):
        for task in tasks:
            if task.deps:
                yield self.env.all_of([self.done[d] for d in task.deps])
            if isinstance(task, ComputeTask):
                start = self.env.now
                yield self.env.timeout(task.duration_s)
                self.intervals.append(Interval(rank, "compute", task.name, task.category, start, self.env.now))
                self.done[task.id].succeed()
            else:
                self.arrived[task.id] = self.arrived.get(task.id, 0) + 1
                if self.arrived[task.id] == len(task.ranks):
                    self.env.process(self._collective(task))
                yield self.done[task.id]
                start = self.started[task.id]
                self.intervals.append(Interval(rank, "comm", task.name, task.category, start, self.env.now))

    def _plan(self, task: CommTask) -> tuple[tuple[float, list[tuple]], ...]:
        """Phases ``(latency, flows)`` of a call, memoised by signature. The real group and its mirror
        groups run the same algorithm in lock-step; mirror groups whose flows share no link with the real
        group's are dropped: being symmetric copies, they cannot change its timing."""
        key = (task.collective, task.groups, task.size_bytes)
        cached = self.plans.get(key)
        if cached is None:
            real, *mirrors = [lower_collective(self.topo, task.collective, g, task.size_bytes) for g in task.groups]
            used = {e for f in real.flows for e in f.edges}
            kept = [m for m in mirrors if any(e in used for f in m.flows for e in f.edges)]
            phases = []
            for i, phase in enumerate(real.phases):
                latency = max([phase.latency_s] + [m.phases[i].latency_s for m in kept])
                flows = [(f.edges, f.size_bytes, f.cap_bytes_per_s) for plan in [real, *kept]
                         for f in plan.phases[i].flows]
                phases.append((latency, flows))
            cached = self.plans[key] = tuple(phases)
        return cached

    def _collective(self, task: CommTask):
        self.started[task.id] = self.env.now
        for latency, flows in self._plan(task):
            if latency > 0:
                yield self.env.timeout(latency)
            if flows:
                yield self.fabric.transfer_all(flows)
        self.done[task.id].succeed()


def run(program: Program, topo: Topology) -> Trace:
    """Simulate ``program``; raises RuntimeError if it cannot finish (a lowering bug: a dependency cycle).

    Each collective runs the algorithm its closed form selects (``collectives.cost``) as flows in the fabric;
    alone on its links a call takes exactly the closed-form time."""
    sim = _Run(program, topo)
    sim.env.run()
    unfinished = [t.id for t in program.tasks if not sim.done[t.id].triggered]
    if unfinished:
        raise RuntimeError(f"program deadlocked: {len(unfinished)} tasks never ran (first: {unfinished[:5]})")
    intervals = tuple(sorted(sim.intervals, key=lambda i: (i.rank, i.start_s, i.stream, i.name)))
    events = next(sim.env._eid)  # SimPy numbers every scheduled event; the next id is the count
    return Trace(intervals, program.ranks, dict(program.multiplicity), events)


def run_calls(topo: Topology, plans: Sequence[CollectivePlan], starts_s: Sequence[float] | None = None) -> list[float]:
    """Duration of each collective call (from its own start) when all share one fabric: the flow model
    outside a Program (``simulator collective --model flow``, agreement and contention tests)."""
    env = simpy.Environment()
    capacity = {(u, v): d["capacity_bytes_per_s"] for u, v, d in topo.graph.edges(data=True)}
    fabric = Fabric(env, capacity)
    ends = [0.0] * len(plans)
    starts = list(starts_s or [0.0] * len(plans))

    def call(i: int, plan: CollectivePlan):
        yield env.timeout(starts[i])
        for phase in plan.phases:
            if phase.latency_s > 0:
                yield env.timeout(phase.latency_s)
            if phase.flows:
                yield fabric.transfer_all([(f.edges, f.size_bytes, f.cap_bytes_per_s) for f in phase.flows])
        ends[i] = env.now - starts[i]

    for i, plan in enumerate(plans):
        env.process(call(i, plan))
    env.run()
    return ends
