import numpy as np
import pytest

from simulator.errors import KernelTooLarge, PredictorError, SimulatorError
from simulator.hardware import load_gpu
from simulator.predictor import OPS, Kernel, MemoisedPredictor, RooflinePredictor
from simulator.predictor.kernels import gemm


def test_gemm_flops_and_bytes():
    k = gemm(m=64, n=32, k=16, dtype="bf16", b=2)
    assert k.flops == 2 * 2 * 64 * 32 * 16
    assert k.bytes == 2 * 2 * (64 * 16 + 16 * 32 + 64 * 32)


def test_every_op_counts_nonnegative():
    shapes = {"gemm": (1, 8, 8, 8), "flash_attn": (1, 2, 16, 16, 8, 1), "flash_attn_bwd": (1, 2, 16, 16, 8, 0),
              "embedding": (8, 4, 10), "embedding_bwd": (8, 4, 10), "adam": (100,), "adam_unfused": (100,),
              "copy": (10,), "reduce": (10,)}
    for op in OPS:
        k = Kernel(op, "fp16", shapes.get(op, (4, 8)))
        assert k.flops >= 0 and k.bytes > 0, op


def test_causal_flash_halves_flops_and_backward_is_2_5x():
    full = Kernel("flash_attn", "bf16", (1, 4, 256, 256, 64, 0))
    causal = Kernel("flash_attn", "bf16", (1, 4, 256, 256, 64, 1))
    bwd = Kernel("flash_attn_bwd", "bf16", (1, 4, 256, 256, 64, 0))
    assert causal.flops == full.flops / 2 and bwd.flops == 2.5 * full.flops


def test_causal_softmax_reads_only_the_unmasked_half():
    full, causal = Kernel("softmax", "fp16", (4096, 2048)), Kernel("softmax_causal", "fp16", (4096, 2048))
    assert causal.bytes / full.bytes == pytest.approx(0.75, rel=1e-3)  # read half + write all, of read + write
    bwd = Kernel("softmax_causal_bwd", "fp16", (4096, 2048))
    assert bwd.bytes / Kernel("softmax_bwd", "fp16", (4096, 2048)).bytes == pytest.approx(2 / 3, rel=1e-3)
    assert causal.flops / full.flops == pytest.approx(0.5, rel=1e-3)


def test_unknown_op_rejected():
    with pytest.raises(ValueError):
        Kernel("nope", "fp32", (1,))


@pytest.mark.parametrize("op,shape", [("embedding", (4096, 4096)), ("gemm", (8, 8, 8)),
                                      ("flash_attn", (1, 2, 16, 16)), ("layernorm", (2, 3, 4)),
                                      ("softmax_causal", (4096,)), ("softmax_causal_bwd", (2, 3, 4))])
def test_shape_of_the_wrong_length_rejected(op, shape):
    """A shape an op cannot count is a ValueError at construction (predict-kernels turns it into a
    one-line error), never an unpacking traceback later."""
    with pytest.raises(ValueError, match="dimensions"):
        Kernel(op, "fp16", shape)


@pytest.mark.parametrize("op,shape", [("layernorm", (10**20, 4096)), ("gemm", (1, 2**31, 2**31, 2**31)),
                                      ("adam", (2**63,))])
def test_shape_beyond_any_gpu_rejected(op, shape):
    """A kernel moving 2^62 elements or more is a user's size gone wrong (the predictors count shapes in int64,
    and wrapped silently or raised OverflowError): a ValueError for predict-kernels, one line for simulate."""
    with pytest.raises(KernelTooLarge, match="more than any GPU holds") as err:
        Kernel(op, "fp16", shape)
    assert isinstance(err.value, ValueError) and isinstance(err.value, SimulatorError)
    Kernel("adam", "fp32", (7 * 10**10,))  # a 70B model's unsharded optimizer step is large, not absurd
    Kernel("flash_attn", "bf16", (64, 128, 2**20, 2**20, 128, 1))


def test_optimizer_counts_every_element_of_its_shape():
    assert Kernel("adam", "bf16", (1000, 3)).bytes == Kernel("adam", "bf16", (3000,)).bytes


def test_roofline_compute_vs_memory_bound():
    gpu = load_gpu("A100-SXM4-80GB")
    big = gemm(8192, 8192, 8192, "bf16")
    add = Kernel("add", "bf16", (8192, 8192))
    t = RooflinePredictor().latency_s([big, add], gpu)
    assert t[0] == pytest.approx(big.flops / (312e12 * 0.8))
    assert t[1] == pytest.approx(add.bytes / (2039e9 * 0.8))


def test_roofline_floor_and_dtype_support():
    gpu = load_gpu("V100-SXM2-32GB")
    assert RooflinePredictor().latency_s([Kernel("add", "fp32", (1, 1))], gpu)[0] == pytest.approx(4e-6)
    with pytest.raises(PredictorError, match="bf16"):
        RooflinePredictor().latency_s([gemm(8, 8, 8, "bf16")], gpu)


def test_fp32_gemm_uses_cuda_cores_and_tf32_tensor_cores():
    gpu = load_gpu("A100-SXM4-80GB")
    t = RooflinePredictor().latency_s([gemm(4096, 4096, 4096, "fp32"), gemm(4096, 4096, 4096, "tf32")], gpu)
    assert t[0] / t[1] == pytest.approx(156 / 19.5)


def test_memoised_predictor_matches_inner():
    gpu = load_gpu("T4")
    ks = [gemm(128, 128, 128, "fp16"), Kernel("gelu", "fp16", (64, 64))] * 3
    inner = RooflinePredictor()
    assert np.allclose(MemoisedPredictor(inner).latency_s(ks, gpu), inner.latency_s(ks, gpu))
