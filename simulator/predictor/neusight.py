"""Baseline for the accuracy benchmark: a re-implementation of NeuSight (ASPLOS'25) as described in
``../shared/docs/neusight-method.md`` (sections 1.2-1.6). Needs torch; not used by the simulator.

Faithful parts: five predictors (BMM, LINEAR, LN, SOFTMAX, VEC); tiles from the measured kernel
name in training and from a raw-feature Euclidean nearest neighbour over the training rows of the
same op at prediction (GEMMs; LN/softmax tile = H, elementwise 512); one CTA per SM per wave; the
four log2 features; the 8 x 512 ReLU MLP with outputs (alpha, -, gamma), ``u = gamma - alpha / W``
and ``T = W * Num_Sm * F_tile / (R * u)`` with the op-level roofline ``R``; the "SMAPE" loss
``|y - p| / (y + p)``, AdamW, per-predictor learning rates and batch sizes, best-validation
checkpoint on a random 80/20 split.

Deviations, forced by the CPU budget or the data: ``epochs`` (NeuSight: 100) is a parameter; the
BMM training set is subsampled to ``max_rows`` rows; ``u`` is floored at 1e-3 during training only
(NeuSight's prediction clips negative latency to 0, kept here); device features come from the
project's GPU catalog; for fp16/bf16/tf32 rows the dtype's peak and element size replace the fp32
ones (the spirit of NeuSight's own fp16 experiment) and rows without a kernel name (Vidur, Aceso)
take their tile from the nearest neighbour, as at prediction time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..specs import DTYPE_BYTES, GpuSpec
from .dataset import Measurement
from .features import vector_kind
from .rates import peak_flops
from .kernels import Kernel
from .tiling import tile_from_kernel_name

PREDICTORS = {"bmm": (1e-5, 128), "linear": (5e-3, 128), "ln": (1e-6, 16), "softmax": (1e-6, 16), "vec": (5e-4, 64)}
_UNARY_OPS_PER_OUTPUT = {"softmax": 5.0, "ln": 6.0}


def predictor_of(k: Kernel) -> str:
    if k.family == "gemm":
        return "bmm" if k.shape[0] > 1 else "linear"
    kind = vector_kind(k.op)
    return {"norm": "ln", "softmax": "softmax"}.get(kind, "vec")


def device_features(gpu: GpuSpec, k: Kernel) -> np.ndarray:
    """[Num_Sm, SingleFLOPs (GFLOP/s), Dev_Mem (GB), Mem_Bw (GB/s), L2Cache (MB)] for kernel ``k``."""
    return np.array([gpu.sms, peak_flops(k.dtype, k.family, gpu) / 1e9, gpu.memory_bytes / 1e9,
                     gpu.memory_bandwidth_bytes_per_s / 1e9, gpu.l2_bytes / 2**20])


def neusight_dims(k: Kernel) -> tuple[int, ...]:
    """NeuSight's (B, M, N, K) with N the reduction, or (B, H) for vector ops."""
    if k.family == "gemm":
        b, m, n, kk = k.shape
        return b, m, kk, n
    if len(k.shape) == 1:
        return 1, k.shape[0]
    return k.shape[0], int(np.prod(k.shape[1:2]))


def op_descriptors(k: Kernel) -> tuple[float, float]:
    """(OpsPerO, MemPerO): FLOPs and bytes per output element, NeuSight's constants where it has them."""
    b, h = neusight_dims(k)
    out = max(b * h, 1)
    pred = predictor_of(k)
    ops = _UNARY_OPS_PER_OUTPUT.get(pred, max(k.flops / out, 1.0))
    return ops, k.bytes / out


@dataclass
class Tiles:
    """Nearest-neighbour tile table for one GEMM predictor: raw query features -> (Tile1, Tile2)."""

    keys: np.ndarray
    tiles: np.ndarray

    def lookup(self, queries: np.ndarray) -> np.ndarray:
        """Tiles of the nearest rows; (128, 128) for every query if the table is empty."""
        out = np.full((len(queries), 2), 128.0)
        if len(self.keys) == 0:
            return out
        for lo in range(0, len(queries), 512):
            q = queries[lo:lo + 512]
            d2 = (q ** 2).sum(1)[:, None] - 2 * q @ self.keys.T + (self.keys ** 2).sum(1)[None, :]
            out[lo:lo + 512] = self.tiles[np.argmin(d2, axis=1)]
        return out


def _query(k: Kernel, gpu: GpuSpec) -> np.ndarray:
    return np.concatenate([np.array(neusight_dims(k), float), device_features(gpu, k)[[0, 1, 2, 3, 4]]])


def build_tile_tables(rows: Sequence[Measurement], gpus: dict[str, GpuSpec]) -> dict[str, Tiles]:
    tables = {}
    for pred in ("bmm", "linear"):
        keys, tiles = [], []
        for m in rows:
            k = m.kernels[0]
            named = tile_from_kernel_name(m.kernel_name) if m.kernel_name else None
            if len(m.kernels) == 1 and predictor_of(k) == pred and named:
                keys.append(_query(k, gpus[m.gpu]))
                tiles.append((named[1], named[0]))  # (Tile1, Tile2) as in the kernel name
        tables[pred] = Tiles(np.array(keys).reshape(-1, 9), np.array(tiles, float).reshape(-1, 2))
    return tables


def design_rows(kernels: Sequence[Kernel], gpus: Sequence[GpuSpec], names: Sequence[str],
                tables: dict[str, Tiles]) -> dict[str, np.ndarray]:
    """NeuSight's per-kernel quantities: features X [N, 4], waves W, F_tile (GFLOP), R (GFLOP/s)."""
    n = len(kernels)
    tile1, tile2 = np.zeros(n), np.zeros(n)
    preds = [predictor_of(k) for k in kernels]
    for pred in ("bmm", "linear"):
        idx = [i for i, p in enumerate(preds) if p == pred]
        lookup = [i for i in idx if not tile_from_kernel_name(names[i] or "")]
        if lookup:
            t = tables[pred].lookup(np.array([_query(kernels[i], gpus[i]) for i in lookup]))
            tile1[lookup], tile2[lookup] = t[:, 0], t[:, 1]
        for i in set(idx) - set(lookup):
            tm, tn = tile_from_kernel_name(names[i])
            tile1[i], tile2[i] = tn, tm
    X, W, F, R = np.zeros((n, 4)), np.zeros(n), np.zeros(n), np.zeros(n)
    for i, (k, g) in enumerate(zip(kernels, gpus)):
        sms, flops_g, mem_gb, bw_g, l2_mb = device_features(g, k)
        e = DTYPE_BYTES[k.dtype]
        if k.family == "gemm":
            b, m, nn, kk = neusight_dims(k)
            tm, tk = tile2[i], tile1[i]
            blocks = b * np.ceil(m / tm) * np.ceil(kk / tk)
            f_tile = 2 * tm * nn * tk / 1e9
            mem_tile = e * (tm * nn + nn * tk + tm * tk) / 2**20
            ai = (2 * np.ceil(m / tm) * tm * nn * np.ceil(kk / tk) * tk / 1e9) / (e * (m * nn + nn * kk + m * kk) / 2**30)
        else:
            b, h = neusight_dims(k)
            ops, mem = op_descriptors(k)
            t = h if predictor_of(k) in ("ln", "softmax") else 512
            blocks = b * np.ceil(h / t)
            f_tile, mem_tile = ops * t / 1e9, mem * t / 2**20
            ai = (ops * np.ceil(h / t) * t / 1e9) / (mem * h / 2**30)
        W[i] = np.ceil(blocks / sms)
        X[i] = np.log2([f_tile / (flops_g / 1000 / sms), mem_tile / (bw_g / sms),
                        W[i] * mem_tile / (mem_gb * 1024 / sms), W[i] * mem_tile / (l2_mb * 1024 / sms)])
        F[i], R[i] = f_tile, min(flops_g, ai * bw_g)
    return {"X": X, "W": W, "F": F, "R": R, "sms": np.array([g.sms for g in gpus], float), "pred": np.array(preds)}


class NeuSightBaseline:
    """Five NeuSight MLPs trained on single-kernel measurements; predicts (or sums) kernel latencies."""

    def __init__(self, epochs: int = 100, max_rows: int = 20000, width: int = 512, depth: int = 8, seed: int = 0):
        self.epochs, self.max_rows, self.width, self.depth, self.seed = epochs, max_rows, width, depth, seed
        self.nets, self.tables = {}, {}

    def _mlp(self):
        from torch import nn

        layers, width = [], 4
        for _ in range(self.depth - 1):
            layers += [nn.Linear(width, self.width), nn.ReLU()]
            width = self.width
        return nn.Sequential(*layers, nn.Linear(width, 3))

    @staticmethod
    def _latency(torch, out, W, F, R, sms, floor: float):
        out = out.double()
        alpha, gamma = torch.sigmoid(out[:, 0]), torch.sigmoid(out[:, 2])
        u = torch.clamp(gamma - alpha / W, min=floor) if floor > 0 else gamma - alpha / W
        return W * sms * F / (R * u)

    def fit(self, rows: Sequence[Measurement], gpus: dict[str, GpuSpec], log=None) -> "NeuSightBaseline":
        import torch

        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        single = [m for m in rows if len(m.kernels) == 1 and m.kernels[0].family != "attention"]
        self.tables = build_tile_tables(single, gpus)
        for pred, (lr, batch) in PREDICTORS.items():
            sub = [m for m in single if predictor_of(m.kernels[0]) == pred]
            if len(sub) > self.max_rows:
                sub = [sub[i] for i in sorted(rng.choice(len(sub), self.max_rows, replace=False))]
            if not sub:
                continue
            d = design_rows([m.kernels[0] for m in sub], [gpus[m.gpu] for m in sub], [m.kernel_name for m in sub],
                            self.tables)
            y = torch.tensor([m.latency_s for m in sub], dtype=torch.float64)
            self.nets[pred] = self._train(torch, d, y, lr, batch, rng)
            if log:
                log(f"neusight {pred}: {len(sub)} rows")
        return self

    def _train(self, torch, d, y, lr, batch, rng):
        net = self._mlp()
        opt = torch.optim.AdamW(net.parameters(), lr=lr)
        t = {k: torch.tensor(d[k], dtype=torch.float64) for k in ("X", "W", "F", "R", "sms")}
        order = rng.permutation(len(y))
        n_val = max(1, len(y) // 5)
        val, train = order[:n_val], order[n_val:]
        best, best_state = np.inf, {k: v.clone() for k, v in net.state_dict().items()}
        for _ in range(self.epochs):
            for lo in range(0, len(train), batch):
                b = train[lo:lo + batch]
                p = self._latency(torch, net(t["X"][b].float()), t["W"][b], t["F"][b], t["R"][b], t["sms"][b], 1e-3)
                loss = (torch.abs(y[b] - p) / (y[b] + p)).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            rng.shuffle(train)
            with torch.no_grad():
                p = self._latency(torch, net(t["X"][val].float()), t["W"][val], t["F"][val], t["R"][val], t["sms"][val], 0.0)
                mape = float((torch.abs(p.clamp(min=0) - y[val]) / y[val]).mean())
            if np.isfinite(mape) and mape < best:  # a diverged epoch (NaN) is never the checkpoint
                best, best_state = mape, {k: v.clone() for k, v in net.state_dict().items()}
        net.load_state_dict(best_state)
        return net

    def kernel_latency_s(self, kernels: Sequence[Kernel], gpus: Sequence[GpuSpec]) -> np.ndarray:
        import torch

        d = design_rows(kernels, gpus, [""] * len(kernels), self.tables)
        out = np.zeros(len(kernels))
        for pred, net in self.nets.items():
            idx = np.flatnonzero(d["pred"] == pred)
            if len(idx):
                t = {k: torch.tensor(d[k][idx], dtype=torch.float64) for k in ("X", "W", "F", "R", "sms")}
                with torch.no_grad():
                    p = self._latency(torch, net(t["X"].float()), t["W"], t["F"], t["R"], t["sms"], 0.0)
                out[idx] = np.maximum(p.numpy(), 0.0)
        return out

    def predict(self, rows: Sequence[Measurement], gpus: dict[str, GpuSpec]) -> np.ndarray:
        """Latency of each measurement: the sum of its kernels' predictions (NeuSight's aggregation)."""
        flat = [(i, k) for i, m in enumerate(rows) for k in m.kernels if k.family != "attention"]
        t = self.kernel_latency_s([k for _, k in flat], [gpus[rows[i].gpu] for i, _ in flat])
        return np.bincount([i for i, _ in flat], weights=t, minlength=len(rows))

