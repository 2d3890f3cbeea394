"""Pipeline schedules: the order in which one stage runs forward (F) and backward (B) micro-batches.

One function per schedule in ``SCHEDULES``; adding a schedule is one entry there.
* GPipe (Huang et al. 2019): all forwards, then all backwards.
* 1F1B (PipeDream-Flush, Narayanan et al. 2021): ``pp - stage - 1`` warm-up forwards, then alternate
  one forward and one backward, then drain the remaining backwards.
"""
from __future__ import annotations

from typing import Callable

Phase = tuple[str, int]  # ("F" | "B", micro-batch index)


def gpipe(stage: int, stages: int, micro_batches: int) -> list[Phase]:
    return [("F", i) for i in range(micro_batches)] + [("B", i) for i in range(micro_batches)]


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[Phase]:
    warmup = min(stages - stage - 1, micro_batches)
    order: list[Phase] = [("F", i) for i in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [("F", warmup + i), ("B", i)]
    order += [("B", i) for i in range(micro_batches - warmup, micro_batches)]
    return order


SCHEDULES: dict[str, Callable[[int, int, int], list[Phase]]] = {"gpipe": gpipe, "1f1b": one_f_one_b}
