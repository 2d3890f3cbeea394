"""Lowering: (plan, model, cluster, predictor) -> Program of per-rank compute and comm tasks.

Each stage's forward and backward of one micro-batch is built once as a list of segments (runs of
kernels merged into one compute task, separated by collectives) and replayed for every micro-batch
in the schedule's order. With ``collapse`` (the default) one representative rank per pipeline stage is
simulated (dp = 0, tp = 0); the other data- and tensor-parallel ranks run the same program at the same
time, so their collectives ride along as mirror groups that load the fabric. Event count is then
proportional to stages x micro-batches x segments, independent of the GPU count.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..engine.program import CommTask, ComputeTask, Program
from ..predictor.base import Predictor
from ..specs import ClusterSpec, PlanSpec, WorkloadSpec
from ..workload import memory
from ..workload.transformer import (Collective, Compute, Shard, Step, embedding_backward, embedding_forward,
                                    head_backward, head_forward, layer_backward, layer_forward, make_shard,
                                    optimizer_step, prefixed)
from .mesh import Mesh
from .schedules import SCHEDULES


@dataclass(frozen=True)
class ComputeSegment:
    name: str
    duration_s: float
    kernels: int


Segment = ComputeSegment | Collective


def _stage_steps(sh: Shard, stage: int, stages: int, backward: bool) -> list[Step]:
    layers = sh.model.layers // stages
    first = stage * layers
    steps: list[Step] = []
    if not backward:
        if stage == 0:
            steps += embedding_forward(sh)
        for i in range(first, first + layers):
            steps += [prefixed(s, f"L{i}.") for s in layer_forward(sh)]
        if stage == stages - 1:
            steps += head_forward(sh)
    else:
        if stage == stages - 1:
            steps += head_backward(sh)
        for i in reversed(range(first, first + layers)):
            steps += [prefixed(s, f"L{i}.") for s in layer_backward(sh)]
        if stage == 0:
            steps += embedding_backward(sh)
    return steps


def segments(steps: list[Step], predictor: Predictor, cluster: ClusterSpec, host_s: float = 0.0) -> list[Segment]:
    """Merge runs of kernels into compute segments between collectives. A segment lasts its kernels' summed
    time, or, when the host cannot issue them that fast, ``host_s`` per kernel (the framework's launch
    cost, ``PlanSpec.host_overhead_s``: eager PyTorch issues one kernel per op, and kernels shorter than
    that leave the GPU waiting)."""
    kernels = [s.kernel for s in steps if isinstance(s, Compute)]
    times = iter(predictor.latency_s(kernels, cluster.gpu)) if kernels else iter(())
    out: list[Segment] = []
    run: list[tuple[str, float]] = []

    def flush() -> None:
        if run:
            name = run[0][0] if len(run) == 1 else f"{run[0][0]} .. {run[-1][0]}"
            out.append(ComputeSegment(name, max(sum(t for _, t in run), host_s * len(run)), len(run)))
            run.clear()

    for step in steps:
        if isinstance(step, Compute):
            run.append((step.name, float(next(times))))
        else:
            flush()
            out.append(step)
    flush()
    return out


class _Builder:
    """Collects tasks with symbolic keys; ``build`` numbers them and resolves dependencies."""

    def __init__(self) -> None:
        self.pending: list[tuple[type, dict, list]] = []
        self.ids: dict[tuple, int] = {}

    def add(self, key: tuple, cls: type, deps: list[tuple], **fields) -> tuple:
        self.ids[key] = len(self.pending)
        self.pending.append((cls, fields, deps))
        return key

    def build(self, ranks: list[int], multiplicity: dict[int, int]) -> Program:
        tasks = []
        for i, (cls, fields, deps) in enumerate(self.pending):
            dep_ids = tuple(sorted({self.ids[d] for d in deps}))
            tasks.append(cls(id=i, deps=dep_ids, **fields))
        return Program(tuple(tasks), tuple(ranks), multiplicity)


class _Lowering:
    def __init__(self, plan: PlanSpec, model: WorkloadSpec, cluster: ClusterSpec, predictor: Predictor,
                 collapse: bool):
        self.plan, self.model, self.cluster = plan, model, cluster
        self.mesh = Mesh(plan.dp, plan.tp, plan.pp)
        self.collapse = collapse
        self.sim = {s: ([self.mesh.rank(0, s, 0)] if collapse else self.mesh.stage_ranks(s)) for s in range(plan.pp)}
        self.shard = make_shard(model, plan)
        self.templates = {
            (s, kind): segments(_stage_steps(self.shard, s, plan.pp, kind == "B"), predictor, cluster,
                                plan.host_overhead_s)
            for s in range(plan.pp) for kind in ("F", "B")
        }
        self.predictor = predictor
        self.b = _Builder()
        self._groups: dict[tuple, list] = {}
        self.frontier: dict[int, list[tuple]] = {r: [] for rs in self.sim.values() for r in rs}

    def groups(self, axis: str, participants_of: list[int], stage_ranks: list[int]) -> list[tuple[tuple[int, ...], list[int], tuple]]:
        """Distinct groups of the simulated ranks along ``axis``: (group, simulated members, mirrors).
        Memoised: every micro-batch asks the same question."""
        key = (axis, tuple(participants_of), stage_ranks[0])
        if key not in self._groups:
            self._groups[key] = self._find_groups(axis, participants_of, stage_ranks)
        return self._groups[key]

    def _find_groups(self, axis: str, participants_of: list[int], stage_ranks: list[int]) -> list[tuple[tuple[int, ...], list[int], tuple]]:
        seen, out = set(), []
        for r in participants_of:
            g = self.mesh.group(axis, r)
            if g in seen:
                continue
            seen.add(g)
            members = [x for x in g if x in self.frontier]
            mirrors: tuple = ()
            if self.collapse:
                others = {self.mesh.group(axis, x) for x in stage_ranks} - {g}
                mirrors = tuple(sorted(others))
            out.append((g, members, mirrors))
        return out

    def collective(self, key: tuple, step: Collective, stage_ranks: list[int], sim_ranks: list[int]) -> None:
        for g, members, mirrors in self.groups(step.axis, sim_ranks, stage_ranks):
            k = self.b.add(key + (g[0],), CommTask, [d for r in members for d in self.frontier[r]],
                           ranks=tuple(members), collective=step.collective, groups=(g, *mirrors),
                           size_bytes=step.size_bytes, name=step.name, category=step.axis)
            for r in members:
                self.frontier[r] = [k]

    def phase(self, stage: int, kind: str, mb: int) -> None:
        pp, sim = self.plan.pp, self.sim[stage]
        stage_ranks = self.mesh.stage_ranks(stage)
        step = -1 if kind == "F" else 1
        if (kind == "F" and stage > 0) or (kind == "B" and stage < pp - 1):
            for r in sim:
                self.frontier[r] = self.frontier[r] + [("send", kind, stage + step, mb, self.mesh.next_stage(r, step))]
        category = "forward" if kind == "F" else "backward"
        for i, seg in enumerate(self.templates[(stage, kind)]):
            key = (kind, stage, mb, i)
            if isinstance(seg, ComputeSegment):
                for r in sim:
                    k = self.b.add(key + (r,), ComputeTask, self.frontier[r], rank=r, duration_s=seg.duration_s,
                                   name=f"{kind}{mb} {seg.name}", category=category)
                    self.frontier[r] = [k]
            else:
                self.collective(key, Collective(f"{kind}{mb} {seg.name}", seg.collective, seg.axis, seg.size_bytes),
                                stage_ranks, sim)
        to = stage - step
        if 0 <= to < pp:
            self.send(stage, kind, mb)

    def send(self, stage: int, kind: str, mb: int) -> None:
        step = 1 if kind == "F" else -1
        size = self.shard.tokens * self.model.hidden * self.shard.act_bytes
        stage_ranks = self.mesh.stage_ranks(stage)
        for r in self.sim[stage]:
            pair = (r, self.mesh.next_stage(r, step))
            key = ("send", r, step)
            if key not in self._groups:
                self._groups[key] = tuple((x, self.mesh.next_stage(x, step)) for x in stage_ranks
                                          if x != r) if self.collapse else ()
            mirrors = self._groups[key]
            self.b.add(("send", kind, stage, mb, r), CommTask, self.frontier[r], ranks=(r,), collective="send_recv",
                       groups=(pair, *mirrors), size_bytes=size,
                       name=f"{kind}{mb} send {'activations' if kind == 'F' else 'gradients'}", category="pp")

    def gradient_sync(self) -> None:
        plan, model = self.plan, self.model
        grad_bytes = 2 if plan.dtype == "fp16" else 4
        if plan.dp > 1:
            for s in range(plan.pp):
                size = memory.stage_params(model, plan.pp, s) / plan.tp * grad_bytes
                self.collective(("dp", s), Collective("dp gradient all-reduce", "all_reduce", "dp", size),
                                self.mesh.stage_ranks(s), self.sim[s])
        if plan.pp > 1 and model.tied_embeddings:
            size = model.vocab // plan.tp * model.hidden * grad_bytes
            stage_ranks = self.mesh.stage_ranks(0)
            self.collective(("embed",), Collective("embedding gradient all-reduce", "all_reduce", "embedding", size),
                            stage_ranks, self.sim[0])

    def optimizer(self) -> None:
        for s in range(self.plan.pp):
            params = int(memory.stage_params(self.model, self.plan.pp, s) / self.plan.tp)
            segs = segments(optimizer_step(params, self.plan.dtype), self.predictor, self.cluster,
                            self.plan.host_overhead_s)
            for r in self.sim[s]:
                for i, seg in enumerate(segs):
                    k = self.b.add(("opt", s, i, r), ComputeTask, self.frontier[r], rank=r, duration_s=seg.duration_s,
                                   name=seg.name, category="optimizer")
                    self.frontier[r] = [k]

    def build(self) -> Program:
        plan = self.plan
        schedule = SCHEDULES[plan.schedule]
        for s in range(plan.pp):
            for kind, mb in schedule(s, plan.pp, plan.num_micro_batches):
                self.phase(s, kind, mb)
        self.gradient_sync()
        self.optimizer()
        ranks = [r for s in range(plan.pp) for r in self.sim[s]]
        weight = plan.dp * plan.tp if self.collapse else 1
        return self.b.build(ranks, {r: weight for r in ranks})


def lower(plan: PlanSpec, model: WorkloadSpec, cluster: ClusterSpec, predictor: Predictor,
          collapse: bool = True) -> Program:
    """The Program of one training step. The plan must already be feasible (``check_plan``)."""
    return _Lowering(plan, model, cluster, predictor, collapse).build()
