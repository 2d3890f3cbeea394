"""Leave-one-GPU-out evaluation helpers (used by ``benchmarks/kernel_accuracy.py`` and tests).

A measurement is predicted as the sum of its kernels' predicted latencies read through its source's
timing (``training.timed_reading_s``: an overhead plus a smooth maximum with a floor; ``dataset``
explains the timing methods; the terms per ``source:label`` are fitted with the model on the *training*
GPUs and shipped in its metadata). The same timing is applied to every predictor that predicts device
time (MLP, roofline), so the comparison is between kernel models; the NeuSight baseline regresses the
measured latency directly, as the original does.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Optional, Sequence

import numpy as np

from ..specs import GpuSpec
from .dataset import Measurement
from .kernels import Kernel
from .rates import peak_flops
from .tiling import choose_gemm_tile, tile_from_kernel_name
from .training import HOST_TIMINGS, main_kernel, op_class, timed_reading_s

KernelPredictor = Callable[[Sequence[Kernel], GpuSpec], np.ndarray]


def dataset_of(m: Measurement) -> str:
    """Which evaluation set a measurement belongs to: NeuSight's test shapes (measured by NeuSight,
    or by ``collect --input`` into a ``*neusight-test`` folder) are one set on every GPU."""
    return "neusight-test" if m.split == "test" and "neusight" in m.source else m.source


def _timing_terms(rows: Sequence[Measurement], timing: dict) -> tuple[np.ndarray, np.ndarray, float]:
    """(additive overhead, floor, p) of each measurement under the weights' timing metadata
    (``timing_overhead_s``, ``timing_floor_s``, ``timing_p``; 0 for device-timed readings)."""
    def per_row(key: str) -> np.ndarray:
        table = timing.get(key) or {}
        return np.array([table.get(f"{m.source}:{m.label}", 0.0) if m.timing in HOST_TIMINGS else 0.0 for m in rows])

    return per_row("timing_overhead_s"), per_row("timing_floor_s"), float(timing.get("timing_p", 0.0))


def predict_measurements(predict: KernelPredictor, rows: Sequence[Measurement], gpus: dict[str, GpuSpec],
                         timing: Optional[dict] = None) -> np.ndarray:
    """Sum of kernel predictions per measurement (one batch per GPU), read through the source's timing
    (``training.timed_reading_s``) with the terms in ``timing`` (the weights' metadata)."""
    out = np.zeros(len(rows))
    by_gpu: dict[str, list[tuple[int, Kernel]]] = defaultdict(list)
    for i, m in enumerate(rows):
        by_gpu[m.gpu].extend((i, k) for k in m.kernels)
    for gpu, items in sorted(by_gpu.items()):
        t = predict([k for _, k in items], gpus[gpu])
        np.add.at(out, [i for i, _ in items], t)
    if timing:
        out = timed_reading_s(out, *_timing_terms(rows, timing), np)
    return out


def _calibration_like(shape: tuple[int, ...]) -> bool:
    """A single GEMM shaped like ``collect --quick``'s: every dimension >= 512 and a multiple of 64,
    no dimension more than 16x another (not, say, an LM head over a 30,522-word vocabulary).

    Tried (stop 40): at most 4x, as in ``collect.CALIBRATION_GEMMS`` themselves. The three-member leave-one-GPU-out
    folds' calibrated cells went 52 -> 48: it drops NeuSight's 4096 x 4096 x 32768 GEMM (the P100 ran it at 2.9
    TFLOP/s where its other calibration GEMMs reach 6.7-7.3; P100 BMM 39.6 -> 30.7 %), but picks other slow
    long-k shapes instead (T4 8192 x 4096 x 16384 at 2.0 TFLOP/s: T4 linear 8.5 -> 23.6 %; RTX 2080 Ti fp32
    linear 7.3 -> 12.9 %). The GPUs' own GEMMs near the calibration size scatter by up to 2.5x."""
    b, m, n, k = shape
    dims = (m, n, k)
    return b == 1 and min(dims) >= 512 and all(x % 64 == 0 for x in dims) and max(dims) <= 16 * min(dims)


def emulated_calibration(rows: Sequence[Measurement], timing: dict, per_dtype: int = 3) -> dict:
    """What ``collect --quick`` would report, read off a GPU's own measurements: per GEMM dtype the
    achieved FLOP/s of the ``per_dtype`` single-kernel GEMMs closest in FLOPs to the calibration
    shapes (~1 TFLOP) among those shaped like them (see ``_calibration_like``), and the bandwidth
    of its largest binary elementwise kernel (its kernel time read out of the source's timing with the
    terms in ``timing``, the weights' metadata)."""
    target = np.log(2.0 * 8192**3)
    gemms: dict[str, list[Measurement]] = defaultdict(list)
    copy: Optional[Measurement] = None
    for m in rows:
        if len(m.kernels) != 1:
            continue
        k = m.kernels[0]
        if k.family == "gemm" and _calibration_like(k.shape):
            gemms[k.dtype].append(m)
        if k.op in ("add", "mul") and (copy is None or k.bytes > copy.kernels[0].bytes):
            copy = m

    overhead, floor, p = _timing_terms(rows, timing)
    index = {id(m): i for i, m in enumerate(rows)}

    def device_s(m: Measurement) -> float:
        """The reading's kernel time: the inverse of ``timed_reading_s`` (at least half the reading)."""
        i = index[id(m)]
        y, o, f = m.latency_s, overhead[i], floor[i]
        rest = y - o
        if p <= 0:  # a plain sum
            return max(rest, 0.5 * y)
        if rest <= f:  # at or under the floor: the reading says nothing about the kernel
            return 0.5 * y
        return max(rest * (1.0 - (f / rest) ** p) ** (1.0 / p), 0.5 * y)

    cal: dict = {"gemm": {}}
    for dtype, ms in sorted(gemms.items()):
        ms = sorted(ms, key=lambda m: abs(np.log(m.kernels[0].flops) - target))[:per_dtype]
        cal["gemm"][dtype] = [{"shape": list(m.kernels[0].shape), "layout": m.kernels[0].layout,
                               "flops_per_s": m.kernels[0].flops / device_s(m)} for m in ms]
    if copy is not None:
        k = copy.kernels[0]
        # A binary elementwise kernel moves 3 tensors; express it as the equivalent copy shape.
        cal["copy"] = {"shape": [int(np.prod(k.shape)) * 3 // 2], "dtype": k.dtype,
                       "bytes_per_s": k.bytes / device_s(copy)}
    return cal


Cell = tuple[str, str, str, str]  # (gpu, dataset, class, dtype)


def _cell(m: Measurement) -> Cell:
    return m.gpu, dataset_of(m), op_class(m), main_kernel(m).dtype


def _ratios_by_group(rows: Sequence[Measurement], predicted_s: np.ndarray) -> dict[Cell, np.ndarray]:
    """{(gpu, dataset, class, dtype): predicted / measured of its rows}, in key order."""
    groups: dict[Cell, list[float]] = defaultdict(list)
    for m, p in zip(rows, predicted_s):
        groups[_cell(m)].append(p / m.latency_s)
    return {k: np.asarray(v) for k, v in sorted(groups.items())}


def mape_by_group(rows: Sequence[Measurement], predicted_s: np.ndarray) -> dict[Cell, tuple[float, int]]:
    """{(gpu, dataset, class, dtype): (MAPE %, count)}."""
    return {k: (100.0 * float(np.mean(np.abs(r - 1.0))), len(r))
            for k, r in _ratios_by_group(rows, predicted_s).items()}


def ratio_stats(ratios) -> dict:
    """{"n", "mape" (%), "median_ratio"} of predicted / measured ratios."""
    r = np.asarray(ratios, dtype=float)
    return {"n": len(r), "mape": 100.0 * float(np.mean(np.abs(r - 1.0))), "median_ratio": float(np.median(r))}


def label_shares(rows: Sequence[Measurement], predicted_s: np.ndarray) -> dict[tuple[Cell, str], dict]:
    """{(cell, label): {"n", "mape", "share_pp", "median_ratio"}}: where each (gpu, dataset, class, dtype) cell's error
    comes from, per measurement label (the source's op or layer name); ``share_pp`` is the points of the cell's MAPE
    the label's rows carry, so a cell's shares add up to its MAPE; ratios are predicted / measured."""
    by_label: dict[tuple[Cell, str], list[float]] = defaultdict(list)
    for m, p in zip(rows, predicted_s):
        by_label[(_cell(m), m.label)].append(p / m.latency_s)
    cell_n: dict[Cell, int] = defaultdict(int)
    for (cell, _), r in by_label.items():
        cell_n[cell] += len(r)
    return {key: {**ratio_stats(r), "share_pp": 100.0 * float(np.sum(np.abs(np.subtract(r, 1.0)))) / cell_n[key[0]]}
            for key, r in sorted(by_label.items())}


def best_scale_mape_by_group(rows: Sequence[Measurement], predicted_s: np.ndarray) -> dict[Cell, tuple[float, int]]:
    """Like ``mape_by_group``, after multiplying each group's predictions by the one factor that minimises its
    MAPE (an oracle: the least error any correction per GPU and class -- a calibration, an offset -- could
    reach; what is left lies in how the errors vary with the kernels' shapes). The factor minimising
    sum |c r - 1| over ratios r = predicted / measured is the median of 1 / r weighted by r."""
    out = {}
    for key, r in _ratios_by_group(rows, predicted_s).items():
        order = np.argsort(1.0 / r)
        weight = np.cumsum(r[order])
        factor = (1.0 / r)[order][np.searchsorted(weight, weight[-1] / 2.0)]
        out[key] = (100.0 * float(np.mean(np.abs(r * factor - 1.0))), len(r))
    return out


def tile_match(rows: Sequence[Measurement], gpus: dict[str, GpuSpec]) -> dict[str, tuple[float, int]]:
    """{gpu: (% of named GEMM kernels whose tile our heuristic chooses, count)}."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for m in rows:
        named = tile_from_kernel_name(m.kernel_name) if m.kernel_name else None
        if named and len(m.kernels) == 1 and m.kernels[0].family == "gemm":
            k, g = m.kernels[0], gpus[m.gpu]
            t = choose_gemm_tile(k, g, peak_flops(k.dtype, "gemm", g))
            hits[m.gpu].append((t.tm, t.tn) == named)
    return {g: (100.0 * float(np.mean(v)), len(v)) for g, v in sorted(hits.items())}
