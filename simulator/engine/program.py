"""The Program: the contract between planning (lowering) and simulation (engine).

Plain, frozen data, dumpable to JSON. Each simulated rank has two in-order streams, ``compute`` and
``comm`` (like two CUDA streams). A task runs when it is next on each of its streams and every task in
``deps`` has finished. A ``CommTask`` runs once all its ``ranks`` have reached it; its traffic is the
collective over each group in ``groups`` (the first is the real group; the others are symmetric copies
whose ranks are not simulated but whose flows still load the links).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Union


@dataclass(frozen=True)
class ComputeTask:
    id: int
    rank: int
    duration_s: float
    deps: tuple[int, ...]
    name: str
    category: str  # forward | backward | optimizer

    @property
    def stream(self) -> str:
        return "compute"


@dataclass(frozen=True)
class CommTask:
    id: int
    ranks: tuple[int, ...]
    collective: str  # all_reduce | all_gather | reduce_scatter | broadcast | all_to_all | send_recv
    groups: tuple[tuple[int, ...], ...]
    size_bytes: float
    deps: tuple[int, ...]
    name: str
    category: str  # tp | dp | pp | embedding

    @property
    def stream(self) -> str:
        return "comm"


Task = Union[ComputeTask, CommTask]


@dataclass(frozen=True)
class Program:
    tasks: tuple[Task, ...]
    ranks: tuple[int, ...]
    #: rank -> how many real GPUs it stands for (1 when nothing is collapsed)
    multiplicity: dict[int, int]

    def to_json(self) -> dict:
        return {
            "ranks": list(self.ranks),
            "multiplicity": {str(k): v for k, v in self.multiplicity.items()},
            "tasks": [dict(asdict(t), kind=type(t).__name__) for t in self.tasks],
        }
