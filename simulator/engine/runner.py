"""Runs a Program in SimPy over a topology and returns a Trace.

The engine knows SimPy, the Program, routes and collective algorithms; nothing about transformers,
predictors or plans. One generator process per (rank, stream) walks its tasks in order.
"""
from __future__ import annotations

import simpy

from ..collectives import lower_collective
from ..topology import Topology
from ..topology.routing import route
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

    def _flows(self, task: CommTask) -> tuple[float, list[tuple[tuple, float]]]:
        """Latency and routed flows of a call, memoised by signature. Mirror groups whose routes share no
        link with the real group's are dropped: being symmetric copies, they cannot change its timing."""
        key = (task.collective, task.groups, task.size_bytes)
        cached = self.plans.get(key)
        if cached is None:
            real, *mirrors = [lower_collective(self.topo, task.collective, g, task.size_bytes) for g in task.groups]
            routed = [(route(self.topo, f.src, f.dst), f.size_bytes) for f in real.flows]
            used = {e for edges, _ in routed for e in edges}
            latency = real.latency_s
            for plan in mirrors:
                extra = [(route(self.topo, f.src, f.dst), f.size_bytes) for f in plan.flows]
                if any(e in used for edges, _ in extra for e in edges):
                    routed += extra
                    latency = max(latency, plan.latency_s)
            cached = self.plans[key] = (latency, routed)
        return cached

    def _collective(self, task: CommTask):
        self.started[task.id] = self.env.now
        latency, flows = self._flows(task)
        if latency > 0:
            yield self.env.timeout(latency)
        if flows:
            yield self.env.all_of(self.fabric.transfer(flows))
        self.done[task.id].succeed()


def run(program: Program, topo: Topology) -> Trace:
    """Simulate ``program``; raises RuntimeError if it cannot finish (a lowering bug: a dependency cycle)."""
    sim = _Run(program, topo)
    sim.env.run()
    unfinished = [t.id for t in program.tasks if not sim.done[t.id].triggered]
    if unfinished:
        raise RuntimeError(f"program deadlocked: {len(unfinished)} tasks never ran (first: {unfinished[:5]})")
    intervals = tuple(sorted(sim.intervals, key=lambda i: (i.rank, i.start_s, i.stream, i.name)))
    events = next(sim.env._eid)  # SimPy numbers every scheduled event; the next id is the count
    return Trace(intervals, program.ranks, dict(program.multiplicity), events)
