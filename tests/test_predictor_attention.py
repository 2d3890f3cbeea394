"""Fused attention from specs (``predictor/attention.py``): tile counts, the SFU term, the backward's side
kernels, and the estimate against the H200 suite's measured cuDNN attention (never trained on)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.hardware import load_gpu
from simulator.predictor import attention
from simulator.predictor.dataset import load_collected
from simulator.predictor.kernels import Kernel
from simulator.predictor.mlp import MLPPredictor, weights_available

H200_SUITE = Path(__file__).resolve().parent.parent / "simulator" / "predictor" / "measured" / "h200"


def test_score_tiles_full_causal_and_bottom_right_aligned():
    assert attention.score_tiles(1024, 1024, False) == 64
    assert attention.score_tiles(1024, 1024, True) == 8 * 9 // 2  # diagonal tiles in full
    assert attention.score_tiles(128, 1024, True) == 8  # the last query rows see every key
    assert attention.score_tiles(1, 4096, True) == 32
    assert attention.score_tiles(1000, 1000, True) == attention.score_tiles(1024, 1024, True)


def test_exponentials_make_small_heads_slower_per_flop():
    gpu = load_gpu("A100-SXM4-80GB")
    peak = gpu.peak_flops_per_s["bf16"]
    per_flop = []
    for d in (64, 128):
        k = Kernel("flash_attn", "bf16", (2, 2048 // d, 8192, 8192, d, 0))
        per_flop.append(attention.flash_compute_s(k, gpu, peak, 0.9) / k.flops)
    assert per_flop[0] > 1.1 * per_flop[1]
    # without the SFU the two head dims would cost the same per FLOP: the term is the exponential's
    k = Kernel("flash_attn", "bf16", (1, 27, 8192, 8192, 64, 0))  # 27 x 64 query tiles = 16 full waves
    sfu_s = attention.flash_compute_s(k, gpu, peak, 0.9) - k.flops / (peak * 0.9)
    elements = 27 * 8192 * 8192
    assert sfu_s == pytest.approx(elements / (16 * gpu.sms * gpu.boost_clock_hz), rel=1e-6)


def test_backward_side_kernels_move_the_bytes_of_d_dq_zeroing_and_conversion():
    k = Kernel("flash_attn_bwd", "bf16", (2, 4, 1024, 1024, 64, 1))
    n = 2 * 4 * 1024 * 64
    side = attention.backward_side_kernels(k)
    assert sum(s.bytes for s in side) == pytest.approx(n * (2 * 2 + 4 + 4 + 2), rel=1e-6)
    assert attention.backward_side_kernels(Kernel("flash_attn", "bf16", k.shape)) == []


@pytest.mark.skipif(not weights_available(), reason="no shipped MLP weights")
def test_h200_suite_fused_attention_within_15_percent():
    """The suite's 16 causal cuDNN calls (head dim 64 / 128, 1k-8k tokens; device time). The estimate it
    replaced (FlashAttention-2's utilisation ratios, blind to head dim) was 20 % off on average, 56 % at
    worst; this one averages 9-10 %."""
    rows, gpus = load_collected(H200_SUITE)
    gpu = next(iter(gpus.values()))
    mlp = MLPPredictor()
    att = [m for m in rows if any(k.family == "attention" for k in m.kernels)]
    assert len(att) == 16
    ratio = np.array([float(np.sum(mlp.latency_s(list(m.kernels), gpu))) / m.latency_s for m in att])
    assert np.mean(np.abs(ratio - 1)) < 0.15, ratio
    assert (np.abs(ratio - 1) < 0.3).all(), ratio
