"""The torch model that is trained (torch is imported only by training; inference is ``mlp.py``).

Per kernel: ``latency = t_fixed + t_ideal / u`` with ``u = sigmoid(MLP(features))`` in (0, 1) and
``t_fixed`` one fitted number of cycles for every kernel over the GPU's boost clock (launch and ramp time
on the device). Per
measurement (a timing that covers one or several kernels), the kernel latencies are summed; a host- or
event-timed reading (``dataset`` explains the timing methods) adds an overhead and cannot go below a
floor, both per (source, op label) and scaled by ``h = exp(host_factor[source, GPU])``:

    measured = a * h + smoothmax_p(sum(kernel latencies), f * h),   smoothmax_p(k, f) = (k^p + f^p)^(1/p)

with p = ``training.TIMING_P`` (4). A host loop that calls an op back to back, or records its end event
after returning from the call, waits for whichever is longer, the kernel or the host's own work after
the launch (the floor); what the host does before the launch adds (the overhead). NeuSight's A100 add
reads a flat 26.7 us from 60 KB to 16 MB (kernel time 0.1-14 us at the bandwidth its large adds reach),
then tracks the kernel, 8 us above it at 45 MB and below it at 130 MB; Aceso's layer norm backward on
the A100 reads 143 us flat up to 8192 x 1024. Read as a plain sum (until stop 16), the small
readings forced either the overhead up, and then every mid-size kernel came out tens of microseconds
too fast, or kernel time up (see below); read as a pure maximum, nothing bounded the small kernels'
own time. This project's ``collect``, which synchronises around every call, reads additively on the
H200 (event minus device time: 16-20 us for fp32 adds from 1.7 to 369 us, ~117 us for a layer norm
backward from 2.5 to 629 us), but its device times are what training reads. One-member leave-one-GPU-out
runs over all ten chips (seeds 0 / 1), sum -> pure smooth max (one term, p = 4) -> overhead + smooth
max: target cells 23 / 25 -> 25 / 25 -> 23 / 23 of 98; class means norm fp32 25.1 / 35.2 -> 27.7 / 23.6
-> 20.7 / 17.7 %, softmax fp32 21.1 / 25.6 -> 23.4 / 23.9 -> 20.0 / 20.2 %, elementwise fp16 17.0 /
16.9 -> 14.3 / 14.4 -> 14.0 / 14.0 %, elementwise fp32 12.9 / 19.8 -> 13.8 / 14.7 -> 12.9 / 11.2 %;
held-out H200 suite norm fp32 149 / 278 -> 195 / 147 -> 116 / 90 %, but its NeuSight-shaped vector
kernels (0.1-10 ms, device time) elementwise 10.9 / 11.3 -> 18.8 / 18.0 -> 15.8 / 13.9 % and norm
12.8 / 13.3 -> 21.9 / 22.7 -> 18.6 / 17.9 %. End to end (one member on all data, ``benchmarks/e2e_accuracy.py``): Megatron 11.7 -> 6.7 ->
8.4 %, V100 training 7.4 -> 2.4 -> 4.2 %, inference 5.7 -> 6.7 -> 6.2 %.

The overhead terms are nuisance parameters: they exist only to read the host-timed sources
correctly and are not used to predict kernels. ``host_factor`` is L2-regularised towards 0, which is
the value used for a GPU never seen.

Host-timed readings cannot tell a label's overhead from a slow small kernel: both fit, and training
keeps whichever it starts near. Started at 13 us for every label, the overheads stayed there (NeuSight's
elementwise labels at 13-18 us, Aceso's layer norm backward at 18-28 us) while the shortest readings
were 26-37 us (NeuSight's elementwise ops of 0.3-0.5 us ideal time) and ~140 us (Aceso's layer norm
backward at 2048 x 1024), so the networks learnt the rest as kernel time: a 512 x 1024 fp32 add at
14-18 us on the H200, which runs it in 1.7 us. Each label now starts at what its shortest readings
leave unexplained by a kernel at 0.7 of the roofline (``training.initial_overheads_s``; the floor
starts there, the additive overhead at 0.3 of it, ``OVERHEAD_START_SHARES``). With a plain sum, one-member
leave-one-GPU-out runs over all ten chips (seeds 0 / 1), held-out H200 suite (device time): norm fp32
414 -> 149 / 427 -> 278 %, bf16 252 -> 50 / 239 -> 109 %, elementwise fp32 168 -> 63 / 201 -> 144 %,
softmax fp32 71 -> 34 / 94 -> 68 % (elementwise bf16 336 -> 73 / 177 -> 197 %); class means over all held-out GPUs: norm fp32 45.5 -> 25.1 / 47.0 -> 35.2 %, elementwise
fp32 21.5 -> 12.9 / 24.1 -> 19.8 %, softmax fp32 25.5 -> 21.1 / 28.5 -> 25.6 %, elementwise fp16
15.0 -> 17.0 / 14.0 -> 16.9 % (the held-out A40's Vidur ops 22 -> 32 %), Aceso fp32 norms on the
Turing and Volta cards 14 -> 20-22 %; target cells 23 -> 23 / 22 -> 25 of 98.

Per (source, GPU) and offset slot (GEMMs, and each vector op: add, rope, layernorm_bwd, ...;
``features.OFFSET_SLOTS``), the utilisation logit also gets an offset and a
slope in the kernel's length past ``THROTTLE_ONSET_S`` (``logit + offset + slope * throttle_length``),
L2-regularised towards 0 (weight 0.1 on their mean over six slots, i.e. 1/60 per offset, now the GEMMs'
``FitConfig.unit_offset_l2``: in one-member leave-one-GPU-out runs over all nine chips, 0.1 instead of
0.01 met 20 instead of 15 of 76 target cells -- bmm fp16 18.4 -> 13.7 %, tf32 17.4 -> 12.4 % --
because the shared networks, not the offsets, then carry what GPUs have in common; 1.0 also met 20
but fp32 linear worsened 23.3 -> 26.7 %). They absorb what is particular to one measured GPU --
the P4 and P100 PCIe cards slowing to 0.2-0.3 of peak on GEMMs of a second or more, a source's own
kernel implementations -- so that the shared networks learn what holds across GPUs. A GPU never
measured gets 0 (the typical GPU): in leave-one-GPU-out runs (one member, 30 epochs) this cut the
mean error over four held-out chips from 21.7 to 19.5 % and the worst cell from 60 to 41 %. A
measured GPU keeps its offsets (shipped in the weights' metadata). Giving a held-out GPU the terms of
the training GPU of its power class instead (<= 75 W boards: T4 <-> P4; stop 11, full-benchmark fold
models) made it worse: P4 fp32 linear 20 -> 26 % with the offsets alone and 81 % with the slope too (the
held-out test shapes were measured cooler than NeuSight's training shapes), T4 linear 36 -> 34 / 72 %.

Slots per vector kind rather than one per network (stop 12): with one vector offset, Vidur's vLLM RMSNorm on
the A100 PCIe 80GB (0.36 of the bandwidth, where its A40 reaches 0.59) set that GPU's offset for every vector
kernel (-0.61; the A40's +0.55), so the shipped model predicted its training layer norm backward at 0.22-0.26
of the bandwidth and its softmax at 0.36-0.41 (Aceso's A100 SXM4 measures 0.37-0.43 for the former, NeuSight's
A100 PCIe 0.6-0.8 for fp32 softmax); with slots 0.35-0.38 and 0.43-0.44. Leave-one-GPU-out (one member, nine
chips) is unchanged within noise (25 of 76 cells both ways): held-out GPUs get no offsets either way, and the
held-out A40 Vidur norm went 56 -> 23 % while the A100 80GB's went 23 -> 36 %.

Slots per vector op rather than per kind (stop 30): a vector kernel is whatever the measuring framework
launched (PyTorch's vectorised add, vLLM's rotary embedding and silu_and_mul, Aceso's layer norm), and one
op's kernel on one GPU can be slow for reasons no other kernel shares. Vidur's vLLM silu_and_mul and rotary
kernels on the A100 PCIe 80GB run at about 0.52 of the bandwidth, where the A40 runs the same kernels at the
roofline; with one offset per kind the shared network learnt that slowness and passed it on: the held-out
A40's swiglu came out 33 % too slow (11 % from one fold trained without those two A100 labels). Each vector
op now has its own offset and slope per (source, GPU), at an L2 weight of 0.1 / 39 each
(``FitConfig.vector_offset_l2``: the old weight spread over all slots), while a GEMM offset keeps 1/60. The
vector offsets at 1/60 too (as strong per offset as before) moved the held-out vector cells both ways
(34 target cells, seed 1; H200 bf16 norm 24.5 -> 30.2 %, A100 PCIe fp32 elementwise 12.1 -> 16.8 %); the
GEMM offset at 0.1 / 39 too made the held-out GeForce BMMs 20-80 % too slow (RTX 2080 Ti fp16 23 -> 41 %),
as weak GEMM offsets did before. One-member leave-one-GPU-out over all ten chips, seeds 1 / 0: target cells
30 -> 33 / 30 -> 34 of 98 (with calibration 40 -> 42 / 42 -> 42); class means elementwise bf16 30.2 -> 21.2
/ 30.0 -> 21.2 %, fp16 14.8 -> 12.2 / 14.8 -> 12.3 %, fp32 11.2 -> 10.6 / 11.3 -> 10.8 %, norm bf16 24.5 ->
22.3 / 22.9 -> 20.0 %, fp16 19.9 -> 18.8 / 19.5 -> 18.8 %; held-out A40 Vidur elementwise 27.6 -> 15.2 /
27.6 -> 15.1 %, H200 suite elementwise fp32 37.9 -> 31.3 / 38.9 -> 32.2 %; GEMM classes within 0.7 pp. Worse:
P100 fp32 norm 10.5 -> 19.9 / 10.3 -> 15.6 %, T4 fp32 norm 9.2 -> 11.5 / 8.7 -> 11.1 %, H200 bf16 softmax
50.7 -> 53.2 / 51.9 -> 52.9 %, fp8 linear 9.3 -> 9.8 / 8.6 -> 9.6 %. The shared fixed time fell from about
3,600 to 1,460 cycles (RTX 2080 Ti fold; shipped weights 3,440-3,670 -> 1,435-1,450, i.e. 1.0 us at the A100's
1.41 GHz): per-op offsets take over part of what the common floor explained. Tiny kernels on GPUs never
measured are now closer to what the H200 suite's profiler saw (a 64 x 1024 bf16 copy on the H100: 1.3 us; the
H200 ran a 512 x 1024 fp32 copy in 1.4 us), but wiggle more: fp32 gelu of 64 -> 128 rows, 2.23 -> 1.82 us.

The slope is never positive (``slope = -softplus(raw - 4)``): a card heating up on a long kernel can only
lose clock. With a free sign, the GPUs that hold their clocks on long fp32 GEMMs (V100, A100, 2080 Ti)
took positive slopes and the shared network settled between them and the throttling P4 / T4 / P100, so
a held-out GPU was predicted as a half-throttled one. Constrained, only the throttlers carry slopes:
one-member leave-one-GPU-out runs over all nine chips, seeds 0 / 1: linear fp32 23.6 -> 20.3 / 24.0 ->
20.5 %, bmm fp32 20.4 -> 19.0 / 20.3 -> 19.2 % (held-out V100 PCIe linear fp32 42.8 -> 31.1 % with
seed 0), other classes within +-1 pp; target cells 22 -> 21 / 21 -> 23 of 76.

One fixed time for every kernel (stop 19; until then one per network). Launching a kernel, scheduling
its blocks and draining them is the GPU front end's work, whatever the kernel computes. With a fixed
time per network, the GEMM network's went to 4.7 us when the H200 was held out (3.8 us with it in),
where the H200 runs a whole tiny GEMM in 2.9-3.5 us: no tiny GEMM is device-timed in the other sources
(Vidur's smallest are GEMVs reading 4 MB or more of weights, 6 us on the A100 and 10 us on the A40), so
the constant stood in for those GEMVs' low bandwidth, and every small GEMM on a fast GPU paid for it.
Shared, the vector kernels pin it (2.1-2.3 us in that fold) and the network explains the GEMVs. One-member
leave-one-GPU-out over all ten chips, seeds 0 / 1: class means bmm bf16 18.3 -> 16.6 / 17.8 -> 16.5 %,
linear bf16 15.0 -> 12.3 / 16.4 -> 14.7 %, linear fp8 11.9 -> 9.4 / 12.3 -> 10.6 %, the others within
+-0.7 pp; target cells 29 -> 31 / 29 -> 28 of 98 (the cells moving either way were within 0.5 pp of a
threshold, bar the RTX 3090's tf32 bmm: 8.9 -> 11.1 / 10.9 %). Capping the GEMM network's fixed time
at 2 us instead did the same for the GEMMs (linear bf16 12.4 / 14.6 %) but is a constant of ours.

The fixed time is counted in cycles (stop 26): scheduling, ramping and draining a kernel's blocks is
clocked work, so a GPU at 1.98 GHz (the H200) should pay less time than one at 1.4 GHz. The feature
matrices carry the clock as their last column (``features.clock_column``). The shipped weights fit about
3,600 cycles (2.6 us at the A100's 1.41 GHz, 1.8 us at 1.98 GHz; in seconds it was 1.5 us for every GPU);
the fold without the H200 fits about 3,980 cycles (2.0 us on the H200; 2.1-2.3 us in seconds before).
One-member leave-one-GPU-out over all ten chips, seeds 0 / 1, against seconds:
held-out H200 suite elementwise bf16 34.8 -> 30.1 / 35.3 -> 30.5 %, fp32 42.6 -> 39.0 / 42.9 -> 38.4 %,
norm bf16 28.2 -> 23.3 / 28.0 -> 25.9 %, fp32 39.2 -> 34.3 / 43.5 -> 39.6 %; class means linear bf16
12.6 -> 12.1 / 14.5 -> 12.8 %, fp8 9.0 -> 8.6 / 10.3 -> 9.4 %; worse: H200 softmax bf16 48.2 -> 51.6 /
47.0 -> 50.8 % (16 readings); other class means within 0.5 pp. Target cells went 33 -> 29 / 30 -> 30: cells that moved 0.2-1.5 pp across their
thresholds either way (lost: P4 norm 10.6 -> 12.1, T4 softmax 11.3 -> 12.6, P100 elementwise, RTX 2080 Ti
elementwise and norm fp32; won: Titan RTX bmm fp16, V100 SXM2 norm fp16, H200 fp8 linear).

Power cap for fp32 GEMMs (stop 22): ``u = cap x sigmoid(logit)`` with ``cap`` a smooth min(1, budget / c)
(``features.log_power_cap``, knee sharpness p = 16), ``budget`` the board power over the fp32 CUDA-core
peak (pJ per FLOP, a spec ratio) and ``c`` one energy per FLOP fitted with the networks, shared by every
GPU (``log_power_c_pj``). A board that cannot feed its CUDA cores at full clock sustains less of the fp32
peak on long GEMMs: measured (90th percentile over fp32 GEMMs of >= 0.2 ms ideal time) T4 (8.6 pJ) 0.57,
H200 (10.4) 0.77-0.79, A100 PCIe (12.8) 0.86, P4 (13.6) 0.86, against 0.89-1.06 at budgets of 17-27 pJ
(V100, Turing GeForce, P100). Tensor-core GEMMs are not capped: their budgets say nothing consistent
across generations (the 300 W A100 PCIe 80GB at 0.96 pJ runs fp16 at 0.71-0.76, the H200 at 0.71 pJ bf16
at 0.74-0.82). Earlier power descriptors were network inputs and identified GPUs (``features``); this
is one physical parameter. Fitted per leave-one-GPU-out fold (one member): c = 11.6-13.0 pJ with p = 16,
also 11.6 with the T4 held out (p = 4: 10.3-12.5, but 6.6-7.1 without the T4). One-member runs over all
ten chips, seeds 0 / 1, against no cap: target cells 30 -> 32 / 26 -> 31 of 98 (p = 4: 33 / 32, p = 8:
33 / 32); linear fp32 17.9 -> 13.0 / 18.2 -> 12.9 %, bmm fp32 19.9 -> 16.1 / 19.4 -> 15.3 %; held-out H200
fp32 linear 16.5 -> 4.6 %, T4 fp32 linear 40.4 -> 20.8 %, V100 PCIe fp32 linear 21.4 -> 16.0 %; P100
fp32 linear 25.3 -> 27.3 % (uncapped, and slower than the typical GPU on K >= 16384), other classes within
+-1.5 pp. p = 16 was kept for the stable c across folds. The cap stops at the GPU's base clock over its boost clock
(``features.log_power_cap``, stop 34). The shipped weights (c = 12.5 pJ) put power-limited parts never
measured below their fp32 peak on an 8192^3 GEMM: L4 (2.4 pJ) 0.31 (0.15 without the floor), L40S 0.35
(0.24), H100 PCIe 0.59 (0.50), A40 0.64 (0.55), H100 SXM 0.76, B200 0.91 -- no measurement of those checks it.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .features import THROTTLE_ONSET_S, log_power_cap

HIDDEN = (64, 64, 64)

OVERHEAD_SCALE_S = 1e-5  # overhead = softplus(raw) x 10 us
#: A label's (additive overhead, floor) start as these shares of ``training.initial_overheads_s``; the
#: split stays near where it starts. (0, 1) instead, one-member leave-one-GPU-out over all ten chips, seeds
#: 0 / 1: target cells 23 / 23 -> 26 / 25 of 98, but norm fp32 20.7 / 17.7 -> 27.7 / 23.7 %, softmax fp32
#: 20.0 / 20.2 -> 25.0 / 25.0 %, held-out H200 bf16 elementwise 126 / 109 -> 192 / 369 % (like the pure maximum).
OVERHEAD_START_SHARES = (0.3, 1.0)
#: slope = -softplus(raw + SLOPE_SHIFT): raw starts at 0, where weight decay also pulls it, which is
#: a slope of -softplus(-4) = -0.018 (no throttling).
SLOPE_SHIFT = -4.0


#: Start of the power cap's energy per FLOP (pJ): below every training GPU's budget, i.e. no cap at first.
#: Started at 12 instead (p = 4), the fits ended within 0.3 pJ of the same values.
POWER_C_START_PJ = 8.0


class UtilisationMLP(nn.Module):
    """Features clipped to the training range (no wild extrapolation for an unusual kernel or GPU),
    standardised -> SiLU MLP -> one logit (utilisation = sigmoid(logit)).

    Tried and not kept (stop 33): Gaussian noise (sd 0.1) on the standardised inputs while training, as a
    smoothness prior between GPUs. One member, seed 1: 41 -> 35 target cells (held-out A100 PCIe fp32 norm
    6.6 -> 14.5 %, H200 bf16 linear 8.2 -> 10.8 %; norm fp32 13.8 -> 15.5 %, bmm fp32 15.3 -> 14.9 %)."""

    def __init__(self, n_features: int, stats, hidden: tuple[int, ...] = HIDDEN):
        super().__init__()
        for name, value in zip(("mean", "std", "lo", "hi"), stats):
            self.register_buffer(name, torch.as_tensor(value, dtype=torch.float32))
        layers: list[nn.Module] = []
        width = n_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.SiLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)
        with torch.no_grad():  # start near 50 % utilisation
            self.net[-1].weight.mul_(0.1)
            self.net[-1].bias.fill_(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.maximum(torch.minimum(x, self.hi), self.lo)
        return self.net((x - self.mean) / self.std).squeeze(-1)


class KernelModel(nn.Module):
    """Both networks, the fixed kernel times and the timing-overhead nuisance parameters."""

    def __init__(self, routes: dict[str, tuple[int, tuple]], n_labels: int, n_hosts: int,
                 hidden: tuple[int, ...] = HIDDEN, n_units: int = 0, n_slots: int = 1, overhead_init_s=None,
                 timing_p: float = 0.0):
        super().__init__()
        self.timing_p = timing_p
        self.nets = nn.ModuleDict({r: UtilisationMLP(n, stats, hidden) for r, (n, stats) in routes.items()})
        self.log_fixed_cycles = nn.Parameter(torch.tensor(math.log(2000.0)))
        self.log_power_c_pj = nn.Parameter(torch.tensor(math.log(POWER_C_START_PJ)))
        # Per label: (additive overhead, floor), each softplus(raw) x OVERHEAD_SCALE_S.
        start = torch.full((max(n_labels, 1),), 1.3e-5)
        if overhead_init_s is not None and len(overhead_init_s):
            start = torch.as_tensor(overhead_init_s, dtype=torch.float32)
        v = start[:, None] * torch.tensor(OVERHEAD_START_SHARES)[None, :] / OVERHEAD_SCALE_S
        self.overhead_raw = nn.Parameter(torch.where(v > 20.0, v, torch.log(torch.expm1(torch.clamp(v, min=1e-3)))))
        self.host_factor = nn.Parameter(torch.zeros(max(n_hosts, 1)))
        self.unit_offset = nn.Parameter(torch.zeros(max(n_units, 1), n_slots))
        self.unit_slope_raw = nn.Parameter(torch.zeros(max(n_units, 1), n_slots))

    def unit_slope(self) -> torch.Tensor:
        """Throttling slopes per (unit, slot), <= 0 (see the module docstring)."""
        return -nn.functional.softplus(self.unit_slope_raw + SLOPE_SHIFT)

    def kernel_latency_s(self, route: str, x: torch.Tensor, ideal_s: torch.Tensor,
                         unit_idx: torch.Tensor | None = None, slot_idx: torch.Tensor | None = None) -> torch.Tensor:
        n_in = self.nets[route].mean.shape[0]
        logit = self.nets[route](x[:, :n_in])
        capped = route == "gemm"  # GEMMs: the columns after the inputs are the power budget and clock floor
        scale = (torch.exp(-log_power_cap(x[:, n_in], self.log_power_c_pj, torch, x[:, n_in + 1])) if capped
                 else torch.ones(()))
        if unit_idx is not None:
            long = torch.relu(torch.log2(ideal_s / THROTTLE_ONSET_S))
            logit = logit + self.unit_offset[unit_idx, slot_idx] + self.unit_slope()[unit_idx, slot_idx] * long
        fixed_s = torch.exp(self.log_fixed_cycles - x[:, -1]) * 1e-9  # last column: ln(boost clock / GHz)
        return fixed_s + ideal_s * (1.0 + torch.exp(-logit)) * scale

    def label_overhead_s(self, label_idx: torch.Tensor) -> torch.Tensor:
        """[n, 2]: labels' (additive overhead, floor) on the typical host (``host_factor`` 0, as for a
        GPU never seen)."""
        return nn.functional.softplus(self.overhead_raw[label_idx]) * OVERHEAD_SCALE_S

    def overhead_s(self, label_idx: torch.Tensor, host_idx: torch.Tensor, timed_on_host: torch.Tensor) -> torch.Tensor:
        base = self.label_overhead_s(label_idx)
        return torch.where(timed_on_host[:, None], base * torch.exp(self.host_factor[host_idx])[:, None],
                           torch.zeros_like(base))


def unit_offsets(model: KernelModel, slots) -> dict[str, "object"]:
    """{slot: [n_units, 2] array of (offset, slope)} of a trained model."""
    off, slope = model.unit_offset.detach().numpy(), model.unit_slope().detach().numpy()
    return {s: [[float(off[u, i]), float(slope[u, i])] for u in range(off.shape[0])] for i, s in enumerate(slots)}


def export_net(net: UtilisationMLP) -> dict[str, "object"]:
    """The numpy arrays of one network, for ``mlp.py`` (weights transposed to x @ W + b)."""
    out = {k: getattr(net, k).numpy() for k in ("mean", "std", "lo", "hi")}
    linears = [m for m in net.net if isinstance(m, nn.Linear)]
    for i, lin in enumerate(linears):
        out[f"w{i}"] = lin.weight.detach().numpy().T.copy()
        out[f"b{i}"] = lin.bias.detach().numpy().copy()
    return out
