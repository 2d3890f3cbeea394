"""Unit tests of tile choice and features: candidates, waves, split-K, bounds, specs-only GPU input."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.hardware import load_gpu
from simulator.predictor import features as ft
from simulator.predictor import tiling as tl
from simulator.predictor import rates
from simulator.predictor.kernels import EMBEDDING_INDEX_OPS, Kernel


@pytest.mark.parametrize("name, tile", [("volta_sgemm_128x64_nn", (64, 128)), ("ampere_sgemm_32x32_sliced1x4_tn", (32, 32)),
                                        ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x16_stage4", (128, 64)),
                                        ("sgemm_128x128x8_NT_vec", (128, 128)), ("vectorized_layer_norm_kernel", None),
                                        ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopA_TNT", (128, 320)),
                                        ("Memset (Device);nvjet_sm90_tst_96x128_64x7_2x1_v_bz_TNN", (128, 96))])
def test_tile_from_kernel_name(name, tile):
    assert tl.tile_from_kernel_name(name) == tile


def test_chosen_tiles_are_candidates_of_the_architecture():
    for gpu_name, dtype in (("P100-PCIE-16GB", "fp32"), ("T4", "fp16"), ("A100-SXM4-40GB", "bf16"), ("H100-SXM5-80GB", "fp32")):
        gpu = load_gpu(gpu_name)
        unit = tl.math_unit(Kernel("gemm", dtype, (1, 1, 1, 1)), gpu)
        allowed = {(b, a) for a, b, _ in tl.candidates(gpu, unit)}
        shapes = np.array([[1, 4096, 4096, 4096], [8, 128, 64, 512], [1, 32, 32, 65536], [64, 2048, 2048, 128]])
        tiles = tl.choose_gemm_tiles(shapes, gpu, unit, gpu.peak_flops_per_s[dtype])
        assert {(int(t[0]), int(t[1])) for t in tiles} <= allowed


def test_split_k_only_when_one_wave_leaves_sms_idle():
    gpu = load_gpu("A100-SXM4-40GB")
    tiles = tl.choose_gemm_tiles(np.array([[1, 64, 64, 65536], [1, 8192, 8192, 8192]]), gpu, "tensor", 312e12)
    assert tiles[0, 2] > 1  # 1 output tile, long reduction: split
    assert tiles[1, 2] == 1


def test_waves_and_blocks():
    shapes = np.array([[2, 256, 128, 64]])
    assert tl.gemm_blocks(shapes, 128, 128)[0] == 4
    assert tl.gemm_waves(shapes, 128, 128, 1, sms=2)[0] == 1  # two 128x128 CTAs fit per SM
    blocks, per_cta = tl.vector_blocks(np.array([10, 10]), np.array([1000, 1000]), np.array([10000, 10000]),
                                       np.array([True, False]))
    assert list(blocks) == [10, 20] and list(per_cta) == [1000, 512]


def test_feature_vectors_have_the_documented_width():
    gpu = load_gpu("V100-SXM2-16GB")
    x, ideal = ft.gemm_features([Kernel("gemm", "fp16", (1, 512, 512, 512), "nt")], gpu)
    assert x.shape == (1, len(ft.GEMM_FEATURES) + 3) and np.isfinite(x).all()  # + power budget, floor, clock
    ks = [Kernel(op, "bf16" if op != "layernorm" else "fp32", (64, 1024)) for op in ("add", "layernorm", "softmax_bwd")]
    ks.append(Kernel("embedding", "fp16", (64, 1024, 32000)))
    x, ideal = ft.vector_features(ks, load_gpu("A100-SXM4-40GB"))
    assert x.shape == (4, len(ft.VECTOR_FEATURES) + 1) and np.isfinite(x).all() and (ideal > 0).all()  # + clock


def test_a_fused_layernorm_differs_from_the_native_one_only_in_its_implementation_bit():
    gpu = load_gpu("RTX-3090")
    for suffix in ("", "_bwd"):
        ks = [Kernel(f"layernorm{impl}{suffix}", "fp16", (8192, 2560)) for impl in ("", "_fused")]
        x, ideal = ft.vector_features(ks, gpu)
        col = ft.VECTOR_FEATURES.index("fused_impl")
        assert list(x[:, col]) == [0.0, 1.0] and ideal[0] == ideal[1]
        assert np.array_equal(np.delete(x[0], col), np.delete(x[1], col))


def test_alignment_is_the_widest_load_all_operand_rows_share():
    dims = np.array([[7, 8, 16], [64, 64, 64], [2, 6, 10], [4096, 1024, 30522]])
    assert list(ft.alignment_bytes(dims, np.array([4.0, 2.0, 2.0, 4.0]))) == [4, 16, 4, 8]
    gpu = load_gpu("V100-SXM2-16GB")
    col = ft.GEMM_FEATURES.index("log2_alignment_bytes")
    x, _ = ft.gemm_features([Kernel("gemm", "fp32", (1, 1024, 4096, 1024), "nt"),
                             Kernel("gemm", "fp32", (1, 1023, 4096, 1024), "nt")], gpu)
    assert list(x[:, col]) == [4.0, 2.0]  # 16 bytes vs one fp32 element


def test_ideal_time_is_the_roofline_at_full_peak():
    gpu = load_gpu("A100-SXM4-40GB")
    k = Kernel("gemm", "bf16", (1, 4096, 4096, 4096), "nn")
    _, ideal = ft.gemm_features([k], gpu)
    bound = max(k.flops / gpu.peak_flops_per_s["bf16"], k.bytes / gpu.memory_bandwidth_bytes_per_s)
    assert ideal[0] == pytest.approx(bound)


def test_misaligned_tensor_gemms_on_tma_gpus_are_bounded_by_the_mma_sync_rate():
    aligned, odd_k = Kernel("gemm", "bf16", (1, 4096, 4096, 4096), "nt"), Kernel("gemm", "bf16", (1, 4096, 4096, 4095), "nt")
    h100, a100 = load_gpu("H100-SXM5-80GB"), load_gpu("A100-SXM4-80GB")
    _, ideal = ft.gemm_features([aligned, odd_k], h100)
    assert ideal[0] == pytest.approx(aligned.flops / h100.peak_flops_per_s["bf16"])
    assert ideal[1] == pytest.approx(odd_k.flops / (2 * 1024 * h100.sms * h100.boost_clock_hz))
    _, ideal = ft.gemm_features([aligned, odd_k], a100)  # Ampere's own kernels are mma.sync at any alignment
    assert ideal[1] == pytest.approx(odd_k.flops / a100.peak_flops_per_s["bf16"])
    _, ideal = ft.gemm_features([Kernel("gemm", "fp32", (1, 4096, 4096, 4095), "nt")], h100)  # CUDA cores
    assert ideal[0] == pytest.approx(odd_k.flops / h100.peak_flops_per_s["fp32"])


def test_fp16_gemms_without_tensor_cores_run_at_the_fp32_rate():
    """PyTorch runs fp16 GEMMs on Pascal with fp32 compute: the P100's 2x and the P4's 1/64 fp16 rates
    are not what its GEMMs reach; a GEMM's ideal time and the roofline use the fp32 rate there."""
    from simulator.predictor.rates import peak_flops
    from simulator.predictor.roofline import RooflinePredictor
    k = Kernel("gemm", "fp16", (1, 4096, 4096, 4096), "nt")
    for name in ("P4", "P100-PCIE-16GB"):
        gpu = load_gpu(name)
        assert peak_flops("fp16", "gemm", gpu) == gpu.peak_flops_per_s["fp32"] != gpu.peak_flops_per_s["fp16"]
        x, ideal = ft.gemm_features([k], gpu)
        assert ideal[0] == pytest.approx(k.flops / gpu.peak_flops_per_s["fp32"])
        assert x[0, ft.GEMM_FEATURES.index("tensor_unit")] == 0.0 and tl.math_unit(k, gpu) == "simt"
        assert RooflinePredictor().latency_s([k], gpu)[0] >= ideal[0]
    v100 = load_gpu("V100-SXM2-16GB")
    assert peak_flops("fp16", "gemm", v100) == v100.peak_flops_per_s["fp16"]


def test_mma_operand_rate_marks_half_rate_tensor_cores_only():
    col = ft.GEMM_FEATURES.index("log2_mma_operand_rate")

    def rate(gpu, dtype):
        return ft.gemm_features([Kernel("gemm", dtype, (1, 2048, 2048, 2048), "nt")], load_gpu(gpu))[0][0, col]

    # GeForce fp16 and tf32 with fp32 accumulation: half the operand bytes per SM-clock of a full-rate part
    for gpu, dtype in (("RTX-3090", "fp16"), ("RTX-3090", "tf32"), ("RTX-2080-Ti", "fp16")):
        assert rate(gpu, dtype) == pytest.approx(-1, abs=0.02)
    for gpu in ("V100-SXM2-16GB", "Titan-RTX", "A40", "T4"):  # full rate
        assert rate(gpu, "fp16") == pytest.approx(0, abs=0.02)
    for gpu in ("A100-SXM4-80GB", "H100-SXM5-80GB", "B200"):  # above full rate: clipped, not told apart
        assert rate(gpu, "bf16") == 0 and rate(gpu, "tf32") == 0
    assert rate("RTX-3090", "fp32") == 0 and rate("P100-PCIE-16GB", "fp16") == 0  # CUDA cores


def test_mn_major_operands_counts_transposes_only_where_wgmma_needs_k_major():
    col = ft.GEMM_FEATURES.index("mn_major_operands")

    def count(gpu, dtype, layout, m=2048):
        return ft.gemm_features([Kernel("gemm", dtype, (1, m, 2048, 2048), layout)], load_gpu(gpu))[0][0, col]

    # x W^T reads both operands along k; dY W reads W along n; dY^T X reads both along m / n
    assert [count("H100-SXM5-80GB", "tf32", x) for x in ("nt", "nn", "tn")] == [0, 1, 2]
    assert count("H200-SXM-141GB", "fp8", "tn") == 2
    assert count("H100-SXM5-80GB", "bf16", "tn") == 0  # wgmma transposes 16-bit operands itself
    assert count("A100-SXM4-80GB", "tf32", "tn") == 0  # mma.sync kernels: no K-major-only instruction
    assert count("H100-SXM5-80GB", "tf32", "tn", m=2047) == 0  # misaligned: Ampere kernels (gemm_peaks)


def test_power_budget_is_board_watts_over_the_fp32_peak_for_cuda_core_gemms_only():
    t4 = load_gpu("T4")
    ks = [Kernel("gemm", d, (1, 1024, 1024, 1024), "nt") for d in ("fp32", "fp16")]
    x, _ = ft.gemm_features(ks, t4)
    budget = len(ft.GEMM_FEATURES)  # the column after the network's inputs
    assert 2 ** x[0, budget] == pytest.approx(70 / t4.peak_flops_per_s["fp32"] * 1e12)  # 8.6 pJ per FLOP
    assert x[1, budget] == ft.UNCAPPED_LOG2_PJ  # tensor cores: no cap
    assert np.exp(x[0, -1]) == pytest.approx(t4.boost_clock_hz / 1e9)  # last: the clock, for the fixed cycles


def test_power_cap_is_a_smooth_min_of_one_and_budget_over_energy():
    log_c = np.log(12.0)
    budget_pj = np.array([3.0, 6.0, 12.0, 24.0, 2.0 ** ft.UNCAPPED_LOG2_PJ])
    cap = np.exp(ft.log_power_cap(np.log2(budget_pj), log_c, np))
    assert (np.diff(cap) > 0).all() and (cap <= 1.0).all()
    assert cap[0] == pytest.approx(0.25, rel=1e-6) and cap[1] == pytest.approx(0.5, rel=1e-3)
    assert cap[2] == pytest.approx(2 ** (-1 / ft.POWER_CAP_P)) and cap[3] > 0.999 and cap[4] == pytest.approx(1.0)


def test_power_cap_never_takes_a_gpu_below_its_base_clock():
    """The L4 (72 W, 2.4 pJ per fp32 FLOP) would be capped at 0.2 of its boost clock by the energy alone;
    its base clock (795 of 2040 MHz) is the floor. A mildly capped T4 stays on the energy cap."""
    log_c = np.log(12.5)
    for name, on_floor in (("L4", True), ("T4", False)):
        gpu = load_gpu(name)
        x, _ = ft.gemm_features([Kernel("gemm", "fp32", (1, 8192, 8192, 8192), "nt")], gpu)
        budget, floor = x[0, len(ft.GEMM_FEATURES)], x[0, len(ft.GEMM_FEATURES) + 1]
        assert np.exp(floor) == pytest.approx(gpu.base_clock_hz / gpu.boost_clock_hz)
        energy_only = float(np.exp(ft.log_power_cap(np.array([budget]), log_c, np))[0])
        cap = float(np.exp(ft.log_power_cap(np.array([budget]), log_c, np, np.array([floor])))[0])
        assert cap == pytest.approx(max(energy_only, np.exp(floor)))
        assert (energy_only < np.exp(floor)) == on_floor


def test_gpu_enters_only_through_specs():
    """Two GPUs with identical specs but different names get identical features."""
    a = load_gpu("A100-SXM4-40GB")
    b = a.model_copy(update={"name": "renamed"})
    ks = [Kernel("gemm", "bf16", (1, 1000, 3000, 700), "tn"), Kernel("gelu", "bf16", (100, 4000))]
    for fn, k in ((ft.gemm_features, ks[:1]), (ft.vector_features, ks[1:])):
        np.testing.assert_array_equal(fn(k, a)[0], fn(k, b)[0])


def test_vector_kinds_cover_every_non_matrix_op():
    from simulator.predictor.kernels import OPS

    for op, cls in OPS.items():
        if cls.family not in ("gemm", "attention"):
            assert ft.vector_kind(op) in ft.VECTOR_KINDS


def test_row_over_l1_scales_with_row_bytes_and_the_gpus_l1():
    col = ft.VECTOR_FEATURES.index("log2_row_over_l1")
    ks = [Kernel("softmax", "fp32", (64, 8192)), Kernel("softmax", "fp16", (64, 8192)), Kernel("add", "fp32", (64, 8192))]
    a100, p100 = load_gpu("A100-SXM4-40GB"), load_gpu("P100-PCIE-16GB")  # 192 vs 24 KiB
    xa, xp = ft.vector_features(ks, a100)[0][:, col], ft.vector_features(ks, p100)[0][:, col]
    assert xa[0] == pytest.approx(np.log2(32 / 192)) and xa[1] == pytest.approx(xa[0] - 1)
    assert xp[0] == pytest.approx(min(np.log2(32 / 24), ft.ROW_OVER_L1_RANGE[1]))
    assert xa[2] == xp[2] == ft.ROW_OVER_L1_RANGE[0]  # not a row-wise op


def test_integer_rate_is_64_lanes_per_sm_from_volta_on():
    a100, a40, p4 = load_gpu("A100-SXM4-40GB"), load_gpu("A40"), load_gpu("P4")
    assert rates.integer_ops_per_s(a100) == pytest.approx(64 * a100.sms * a100.boost_clock_hz)
    assert rates.integer_ops_per_s(a40) == pytest.approx(64 * a40.sms * a40.boost_clock_hz)  # 128 fp32 lanes
    assert rates.integer_ops_per_s(p4) == pytest.approx(p4.peak_flops_per_s["fp32"] / 2)  # shared cores


def test_embedding_ideal_time_is_its_index_arithmetic():
    """PyTorch's embedding gather is bound by locating each element, not by DRAM: its ideal time follows the
    integer rate (SMs x clock), on the A40 and on the 2.5x faster-memory A100 80GB and H200 alike."""
    k = Kernel("embedding", "bf16", (4096, 8192, 32000))
    for name in ("A100-PCIE-80GB", "A40", "H200-SXM-141GB"):
        gpu = load_gpu(name)
        ideal = ft.vector_features([k], gpu)[1][0]
        assert ideal == pytest.approx(4096 * 8192 * EMBEDDING_INDEX_OPS / rates.integer_ops_per_s(gpu))
        assert ideal > k.bytes / gpu.memory_bandwidth_bytes_per_s
    assert k.flops == 0  # integer work is not FLOPs: MFU never counts it


def test_weight_gradient_layout_shares_the_data_gradient_features():
    """``tn`` GEMMs are only ever timed inside a backward sum, so they get ``nn``'s features (the network
    cannot learn them apart); ``nt`` stays distinct."""
    gpu = load_gpu("A100-SXM4-80GB")
    shape = (1, 1280, 5120, 4096)
    x = {lay: ft.gemm_features([Kernel("gemm", "bf16", shape, lay)], gpu)[0] for lay in ("nn", "nt", "tn")}
    assert np.array_equal(x["tn"], x["nn"])
    assert not np.array_equal(x["nt"], x["nn"])
