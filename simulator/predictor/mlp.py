"""The tile/wave MLP predictor: numpy inference from the shipped weights (no torch needed).

``latency = t_fixed + t_ideal / u`` per kernel, where ``t_ideal`` is the wave-quantised time at 100 %
of the datasheet peak and bandwidth (``features``) and ``u = cap x sigmoid(MLP(features))`` in (0, 1),
``cap`` the power cap of fp32 GEMMs (``model``; 1 for everything else): a prediction is never faster
than the roofline at 100 % and never below the fixed launch time.

Fused attention has no measurement in the training data; ``attention`` builds its time from the
GPU's specs and the utilisation the GEMM network gives a large GEMM of the same dtype.

A GEMM that does not fill its tiles is never predicted slower than the GEMM padded to whole tiles of
the same (chosen) tile, with its operands' alignment kept (``features.padded_gemms``): the library runs
that kernel with bounds checks, doing less work than the padded GEMM. The networks alone gave every GPU
skinny GEMMs slower than wider ones (shipped weights, m = k = 4096: a V100 fp32 GEMM with n = 16 at 725 us,
n = 32 at 395 us; an RTX 3090 bf16 one with n = 32 at 120 us, n = 64 at 67 us; 110 such drops of more than
10 % when doubling m or n from 16 to 32768 over the catalog GPUs and dtypes, 23 with the bound, all where the
tile changes between the two sizes), where measured GEMMs of adjacent n share a kernel and rarely run
slower at the smaller n (25 of 1,696 adjacent pairs by more than 1.3x, all on the T4). One member, seed 1,
leave-one-GPU-out, inference only: target cells 40 -> 41 (RTX 2080 Ti fp16 BMM 10.0 -> 8.1 %, V100 PCIe fp32
linear 17.2 -> 16.1 %, P4 fp32 BMM 22.4 -> 23.4 %), every class mean within 0.4 pp. Padding the operands'
alignment up as well gave 42 cells (the A100's misaligned fp32 linear layers run as fast as aligned ones), but
the H200's bf16 linear layers 13.8 -> 17.7 %: misaligned operands cost a Hopper its TMA kernels. The same
bound in training (the minimum of both predictions fitted) met 36 cells: the BMMs of the RTX 3090 got better
(fp16 20.8 -> 10.3 %, tf32 28.7 -> 16.4 %), the A100's fp32 linear layers (9.1 -> 12.8 %) and the V100's fp32
BMMs (17.8 -> 23.9 %) worse. The bound costs a third of the throughput: the benchmark's batch of 100,000 random
GEMMs and norms, most of whose GEMMs do not fill their tiles, runs at 135,000-144,000 kernels/s instead of
200,000 (medians of 7 runs, one core).

What the bound leaves (stop 44): over the catalog GPUs (fp32 and one 16-bit dtype each), GEMMs of 16-16,384 in
m, n and k in both layouts, doubling m or n makes 250 of 38,016 GEMMs more than 10 % faster (down to 0.58x:
RTX 3090 fp32 1024 x 64 x 4096 ``nn``, whose n = 128 neighbour gets a 128 x 128 tile where it has 32 x 64 and
split-K 16 for both), doubling k 2 of 19,008. All but 4 fit in one wave, where the networks do not make time
independent of how many CTAs share the wave (the L4's fp32 16 x 256 x 1024 and 16 x 512 x 1024 share a 32 x 32
tile and split 4, and the second is predicted 0.64x the first). Tried, inference only: also bounding a one-wave
GEMM by its m, and its n, doubled until the wave fills (re-tiled): 246 drops. Each kernel's bound is computed from
its own neighbours, so a chain of them is not monotone unless every predicted time is; not kept.

Likewise a vector kernel that is launch-bound (under 1 us of ideal time) or leaves part of its one wave idle
is never predicted slower than the same kernel with its first dimension (rows, tokens, elements) doubled,
quadrupled, ... until it reaches 1 us and fills a wave (``features.grown_vectors``): it runs a subset of each
one's independent blocks. Below 1 us the size feature is the only thing telling a launch-bound kernel from a
larger one, and the networks had turned it upside down for some GPUs: an A100-80 fp32 RMSNorm of one
8192-wide row at 16.1 us, of 32 rows at 4.6 us. Over the catalog GPUs, their dtypes and 36 vector ops at
1-32,768 rows of 1,024 and 8,192 columns, drops of more than 10 % when doubling the rows: 958 with the networks
alone; 494 with one rung, the kernel grown to 1 us (stop 36; the rest inside one wave, e.g. fp32 exp over
16 -> 32 rows of 8192 on the A100, 256 -> 512 of 1,728 CTA slots); none with the ladder (stop 37). One member,
seed 1, inference only: one rung 41 -> 41 target cells, every class mean within 0.1 pp; the ladder 41 -> 41, no
cell moved by 0.2 pp (the measured data has few such small kernels). The grown kernels are rows of arrays
(``VectorBatch.grown``), not ``Kernel`` objects: built as objects, the ladder's 28 % more rows of the
benchmark batch cost 12-25 % of the throughput (stop 36); as arrays, the benchmark's 50,000 norms take 5-15 %
longer and the whole batch 2-4 % (back-to-back runs, stop 37).

Tried and not kept (stop 42): the other direction, a lower bound by work conservation. Once a kernel with its
first dimension halved (quartered, ...) fills W full waves, each wave of the whole kernel takes at least its time
over W + 1 (a ramp of up to one wave), so the kernel of w waves takes at least w / (W + 1) times it, both less the
fixed time. The networks break it: over the 22 catalog GPUs, two dtypes, 38 vector ops at 1,024-8,192 columns and
256-131,072 rows, 254 of 38,926 doublings come out more than 10 % below the bound (down to 0.59 of it), mostly
16-bit softmax, causal softmax and cross-entropy at 4,096 columns from 8,192 to 32,768 rows: the H200's bf16
softmax at 8,192 / 16,384 / 24,576 rows of 4,096 is predicted at 121 / 126 / 130 us (measured 111 and 222 us for
the first two). The bound (smaller kernels of 2-16 waves) removed all 254 and put the 16,384 rows at 188 us, but
leave-one-GPU-out (three members, ``--resume``) met 43 instead of 46 target cells: Aceso's fp16 causal softmax went
from 2.2-11.8 % to 29.6-94.7 % (Megatron's kernel runs a warp per row, four rows per CTA, so one CTA per row
overstates its waves, and the networks' smaller kernels there are extrapolations) and NeuSight's fp32 norms lost
0.3-2.3 pp; the held-out H200's spec-only cells did not move. With the shipped weights the T4's NeuSight norms
went 11.5 -> 18.3 %: its measured norms speed up with rows faster than the bound allows (30-47 waves of short
rows).

A GPU that was in the training data keeps its fitted offset and throttling slope (``model``); any
other GPU is predicted as the typical GPU from its specs alone.

An optional calibration (``simulator collect --quick``) measured on the target GPU rescales the
GEMM (per dtype) and memory-bound predictions so that they match the measured sustained rates
at the calibration shapes. The calibration GEMMs are large and run near the GPU's sustained matrix
rate, which is what they correct; a GEMM that runs at a fraction s of their (predicted) utilisation is
held back mostly by other things (memory, waves, launch), so it takes the factor to the power s.
Against the uniform factor this moved every GEMM class of the emulated calibration in the
leave-one-GPU-out benchmark the right way (BMM tf32 24.2 -> 20.3 %, fp32 19.1 -> 18.1 %, bf16
22.1 -> 21.2 %; linear tf32 13.4 -> 12.4 %, bf16 16.5 -> 15.8 %), the cells met stayed at 41 of 98; the
same weighting of the memory factor made the held-out H200's norms worse (bf16 21.5 -> 23.6 %).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..errors import PredictorError
from ..specs import GpuSpec
from . import attention
from .features import (GEMM_FEATURES, OFFSET_SLOTS, SLOT_INDEX, VECTOR_FEATURES, gemm_features, grown_vectors,
                       log_power_cap, offset_slot, padded_gemms, throttle_length, vector_features)
from .kernels import OPS, Kernel
from .rates import peak_flops
from .vector_batch import VectorBatch, op_codes

WEIGHTS_DIR = Path(__file__).with_name("weights")
FEATURES = {"gemm": GEMM_FEATURES, "vector": VECTOR_FEATURES}
FEATURE_FNS = {"gemm": gemm_features, "vector": vector_features}
LARGE_GEMM = (1, 8192, 8192, 8192)
#: Version of the model the weights' numbers belong to (``training.export`` writes it): 2 = fixed time in
#: cycles, power cap of fp32 GEMMs; 3 = a measured GPU's offsets per vector op, not per kind. Bump it when a
#: trained parameter changes meaning.
WEIGHTS_FORMAT = 3


def weights_available(folder: Path = WEIGHTS_DIR) -> bool:
    return (folder / "kernel_mlp.npz").is_file() and (folder / "kernel_mlp.json").is_file()


#: Rows per block of ``Network.logit`` (64-wide float32 activations: 1 MiB, cache-resident).
BLOCK_ROWS = 4096


class Network:
    """One utilisation network in numpy (mirror of ``model.UtilisationMLP``): clip to the training
    range, standardise, SiLU layers, logit."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        f32 = {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}
        self.mean, self.std, self.lo, self.hi = f32["mean"], f32["std"], f32["lo"], f32["hi"]
        n = len([k for k in arrays if k.startswith("w")])
        self.layers = [(f32[f"w{i}"], f32[f"b{i}"]) for i in range(n)]

    def logit(self, x: np.ndarray) -> np.ndarray:
        """Logits in float32 (as trained); the latency arithmetic around them stays float64. Rows go through
        in blocks of ``BLOCK_ROWS``, whose activations stay in cache between the layers' passes (a batch of
        50,000 GEMMs: 70 -> 40 ms per network)."""
        x = x[:, :len(self.mean)]  # the columns past the inputs (power budget, clock floor, clock) feed no layer
        out = np.empty(len(x))
        for start in range(0, len(x), BLOCK_ROWS):
            h = (np.clip(x[start:start + BLOCK_ROWS].astype(np.float32), self.lo, self.hi) - self.mean) / self.std
            for i, (w, b) in enumerate(self.layers):
                h = h @ w
                h += b
                if i < len(self.layers) - 1:  # SiLU in place: h / (1 + exp(-h)), without the temporaries
                    e = np.negative(h)
                    with np.errstate(over="ignore"):  # exp(-h) -> inf for very negative h: SiLU -> -0
                        np.exp(e, out=e)
                    e += 1.0
                    h /= e
            out[start:start + len(h)] = h[:, 0]
        return out


def load_weights(folder: Path = WEIGHTS_DIR) -> tuple[list[dict[str, Network]], dict]:
    """Ensemble members' networks and the metadata from ``kernel_mlp.npz`` / ``kernel_mlp.json``;
    PredictorError if missing, trained with other features than this code computes or written for another
    model (``WEIGHTS_FORMAT``)."""
    npz, meta_path = folder / "kernel_mlp.npz", folder / "kernel_mlp.json"
    if not npz.is_file() or not meta_path.is_file():
        raise PredictorError(f"no MLP weights in {folder}; run `simulator fit-predictor --data DIR --out {folder}`")
    meta = json.loads(meta_path.read_text())
    for route, names in FEATURES.items():
        if meta.get("features", {}).get(route) != list(names):
            raise PredictorError(f"MLP weights in {folder} were trained with other {route} features; retrain them")
    if meta.get("format") != WEIGHTS_FORMAT:
        raise PredictorError(f"MLP weights in {folder} are format {meta.get('format')}, this code reads format "
                             f"{WEIGHTS_FORMAT}; retrain them")
    with np.load(npz) as data:
        arrays = {k: data[k] for k in data.files}
    members = [{r: Network({k.split(".", 2)[2]: v for k, v in arrays.items() if k.startswith(f"m{j}.{r}.")})
                for r in FEATURES} for j in range(int(meta["members"]))]
    return members, meta


def _rows(a: Optional[np.ndarray], rows: np.ndarray) -> Optional[np.ndarray]:
    return None if a is None else a[rows]


class MLPPredictor:
    """``latency_s(kernels, gpu)`` from the shipped (or given) weights; see the module docstring."""

    name = "mlp"

    def __init__(self, weights_dir: Optional[Path] = None, calibration: Optional[dict] = None):
        self.members, self.meta = load_weights(Path(weights_dir) if weights_dir else WEIGHTS_DIR)
        self.member_fixed_cycles = [float(c) for c in self.meta["fixed_cycles"]]
        #: Fixed cycles of the ensemble (geometric mean of the members'): over the boost clock, the floor of
        #: every prediction (``fixed_s``).
        self.fixed_cycles = float(np.exp(np.mean(np.log(self.member_fixed_cycles))))
        #: Per member {GPU: {route: (offset, slope)}} for GPUs in the training data (``model``).
        self.gpu_offsets = self.meta.get("gpu_offsets") or [{} for _ in self.members]
        self.calibration = calibration
        self._factors: dict[str, dict[str, float]] = {}

    def _route_latency_s(self, route: str, kernels: Sequence[Kernel], gpu: GpuSpec) -> tuple[np.ndarray, np.ndarray]:
        """(latency, ideal time) of kernels that all go to ``route``: the geometric mean over the
        ensemble members of ``fixed + ideal / sigmoid(logit)``, for a GEMM that does not fill its tiles at
        most that of its tile-padded GEMM (``features.padded_gemms``; the module docstring says why)."""
        batch = VectorBatch.of(kernels) if route == "vector" else kernels
        x, ideal = FEATURE_FNS[route](batch, gpu)
        slots = self._offset_slots(kernels, gpu)
        out = self._member_latency_s(route, slots, gpu, x, ideal)
        if route == "gemm":
            part, xp, ideal_p = padded_gemms(kernels, x, gpu)
            if len(part):
                out[part] = np.minimum(out[part], self._member_latency_s("gemm", _rows(slots, part), gpu, xp, ideal_p))
        if route == "vector":
            part, shift = grown_vectors(x, ideal)
            if len(part):
                xg, ideal_g = vector_features(batch.grown(part, shift), gpu)
                np.minimum.at(out, part, self._member_latency_s("vector", _rows(slots, part), gpu, xg, ideal_g))
        return out, ideal

    def _offset_slots(self, kernels: Sequence[Kernel], gpu: GpuSpec) -> Optional[np.ndarray]:
        """Each kernel's offset slot (``features.OFFSET_SLOTS``) on a GPU of the training data, else None."""
        if not any(gpu.name in offsets for offsets in self.gpu_offsets):
            return None
        codes, ops = op_codes(kernels)
        return np.array([SLOT_INDEX[offset_slot(op)] for op in ops], dtype=np.int64)[codes]

    def _member_latency_s(self, route: str, slot_idx: Optional[np.ndarray], gpu: GpuSpec, x: np.ndarray,
                          ideal: np.ndarray) -> np.ndarray:
        """Geometric mean over the members of ``fixed + ideal / sigmoid(logit)`` for features ``x``; ``slot_idx``
        (``_offset_slots``) selects a measured GPU's offsets."""
        logs = []
        for nets, cycles, offsets, power_c in zip(self.members, self.member_fixed_cycles, self.gpu_offsets,
                                                  self.meta["power_c_pj"]):
            logit = nets[route].logit(x)
            n_in = len(nets[route].mean)
            scale = (np.exp(-log_power_cap(x[:, n_in], np.log(power_c), np, x[:, n_in + 1])) if route == "gemm"
                     else 1.0)
            if gpu.name in offsets:  # a measured GPU keeps what was particular to it
                offset, slope = np.array([offsets[gpu.name][s] for s in OFFSET_SLOTS])[slot_idx].T
                logit = logit + offset + slope * throttle_length(ideal)
            logit = np.clip(logit, -30.0, 30.0)
            logs.append(np.log(cycles / gpu.boost_clock_hz + ideal * (1.0 + np.exp(-logit)) * scale))
        return np.exp(np.mean(logs, axis=0))

    def raw_latency_s(self, kernels: Sequence[Kernel], gpu: GpuSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Uncalibrated (latency, ideal time, route) of each kernel."""
        codes, ops = op_codes(kernels)
        routes = np.array([OPS[op].family if OPS[op].family in ("gemm", "attention") else "vector"
                           for op in ops])[codes]
        out, ideal = np.empty(len(kernels)), np.empty(len(kernels))
        for route in ("gemm", "vector", "attention"):
            idx = np.flatnonzero(routes == route)
            if len(idx):
                subset = [kernels[i] for i in idx]
                out[idx], ideal[idx] = (self._attention_latency_s(subset, gpu) if route == "attention"
                                        else self._route_latency_s(route, subset, gpu))
        return out, ideal, routes

    def _attention_latency_s(self, kernels: Sequence[Kernel], gpu: GpuSpec) -> tuple[np.ndarray, np.ndarray]:
        """Fused attention (``attention``): the main kernel at the large-GEMM utilisation of its dtype,
        or its memory time if longer, plus the backward's memory-bound side kernels."""
        out, ideal = np.empty(len(kernels)), np.empty(len(kernels))
        u_big = {}
        for dtype in sorted({k.dtype for k in kernels}):
            big_s, big_ideal = self._route_latency_s("gemm", [Kernel("gemm", dtype, LARGE_GEMM, "nn")], gpu)
            u_big[dtype] = big_ideal[0] / (big_s[0] - self.fixed_s(gpu))
        for i, k in enumerate(kernels):
            peak = peak_flops(k.dtype, "attention", gpu)
            t_memory = k.bytes / gpu.memory_bandwidth_bytes_per_s
            ideal[i] = max(k.flops / peak, t_memory)
            side = attention.backward_side_kernels(k)
            side_s = float(np.sum(self._route_latency_s("vector", side, gpu)[0])) if side else 0.0
            out[i] = (self.fixed_s(gpu) + max(attention.flash_compute_s(k, gpu, peak, u_big[k.dtype]), t_memory)
                      + side_s)
        return out, ideal

    def fixed_s(self, gpu: GpuSpec) -> float:
        """The ensemble's fixed time on ``gpu`` (s): its fixed cycles at the boost clock."""
        return self.fixed_cycles / gpu.boost_clock_hz

    def latency_s(self, kernels: Sequence[Kernel], gpu: GpuSpec) -> np.ndarray:
        kernels = list(kernels)
        if not kernels:
            return np.zeros(0)
        out, ideal, routes = self.raw_latency_s(kernels, gpu)
        if self.calibration:
            factors = self._calibration_factors(gpu)
            for i, (k, r) in enumerate(zip(kernels, routes)):
                key = k.dtype if r != "vector" else "memory"
                if key in factors:
                    factor, u_cal = factors[key]
                    fixed = self.fixed_s(gpu)
                    # A GEMM takes the (log) correction in proportion to how close it runs to the
                    # calibration GEMMs' utilisation (module docstring).
                    share = min(1.0, ideal[i] / max(out[i] - fixed, 1e-15) / u_cal) if r == "gemm" else 1.0
                    out[i] = max(fixed + (out[i] - fixed) * factor ** share, fixed + ideal[i])
        return out

    def _calibration_factors(self, gpu: GpuSpec) -> dict[str, tuple[float, float]]:
        """Per GEMM dtype (and 'memory'): (the geometric mean over the calibration shapes of measured
        over predicted time, both less the fixed time; the geometric mean of their predicted utilisations)."""
        if gpu.name not in self._factors:
            from .collect import calibration_kernels

            factors = {}
            for key, pairs in calibration_kernels(self.calibration).items():
                fixed = self.fixed_s(gpu)
                predicted, ideal, _ = self.raw_latency_s([k for k, _ in pairs], gpu)
                ratios = [max(t - fixed, 1e-12) / max(p - fixed, 1e-12) for (_, t), p in zip(pairs, predicted)]
                utilisation = ideal / np.maximum(predicted - fixed, 1e-15)
                factors[key] = (float(np.exp(np.mean(np.log(ratios)))), float(np.exp(np.mean(np.log(utilisation)))))
            self._factors[gpu.name] = factors
        return self._factors[gpu.name]
