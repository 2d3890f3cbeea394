"""Training pipeline smoke tests (a few seconds, synthetic data) and the NeuSight baseline."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.hardware import load_gpu
from simulator.predictor import training as tr
from simulator.predictor.dataset import Measurement
from simulator.predictor.kernels import Kernel

torch = pytest.importorskip("torch")


def synthetic_rows(n: int = 120) -> tuple[list[Measurement], dict]:
    """Measurements that follow a roofline at 60 % plus 5 us, on two GPUs, one host-timed group; fp16 and
    fp32 GEMMs."""
    rng = np.random.default_rng(0)
    gpus = {g: load_gpu(g) for g in ("T4", "A100-SXM4-40GB")}
    rows = []
    for i in range(n):
        gpu = gpus["T4" if i % 2 else "A100-SXM4-40GB"]
        if i % 3:
            dtype = "fp16" if i % 3 == 1 else "fp32"  # fp32: CUDA cores, under the power cap
            k = Kernel("gemm", dtype, tuple(int(x) for x in rng.integers(16, 2048, 4)), "nt")
            peak = gpu.peak_flops_per_s[dtype]
        else:
            k = Kernel("add", "fp16", tuple(int(x) for x in rng.integers(16, 4096, 2)))
            peak = gpu.peak_flops_per_s["fp32"]
        t = 5e-6 + max(k.flops / peak, k.bytes / gpu.memory_bandwidth_bytes_per_s) / 0.6
        kernels = (k, k) if i % 5 == 0 else (k,)
        timing = "host" if i % 7 == 0 else "kernel"
        rows.append(Measurement(kernels, gpu.name, t * len(kernels) + (2e-5 if timing == "host" else 0), "syn", timing,
                                "op"))
    return rows, gpus


def test_fit_export_and_load(tmp_path):
    from simulator.predictor.mlp import MLPPredictor

    rows, gpus = synthetic_rows()
    d = tr.design(rows, gpus)
    assert set(d.routes) == {"gemm", "vector"} and len(d) == len(rows)
    assert len(d.routes["gemm"][2]) == sum(len(m.kernels) for m in rows if m.kernels[0].family == "gemm")
    config = tr.FitConfig(epochs=4, batch_rows=32, hidden=(8,), threads=1)
    models = tr.fit_ensemble(d, config, members=2)
    first = tr.predict_rows(models[0], d)
    again = tr.predict_rows(tr.fit(d, config), d)
    np.testing.assert_allclose(first, again, rtol=1e-5)  # seeded: deterministic
    tr.export(models, d, tmp_path, {"data_hash": "x"})
    mlp = MLPPredictor(tmp_path)
    kernels = [m.kernels[0] for m in rows[:10]]
    numpy_s = mlp.latency_s(kernels, gpus[rows[0].gpu])
    assert (numpy_s > 0).all() and np.isfinite(numpy_s).all()
    sub = tr.design([m for m in rows[:10] if m.gpu == rows[0].gpu], gpus)  # torch vs numpy, kernel by kernel
    unit = torch.tensor(d.units.index(f"{rows[0].source}:{rows[0].gpu}"))  # a measured GPU keeps its offsets
    for route, (x, ideal, _) in sub.routes.items():
        with torch.no_grad():
            per_member = [np.log(m.kernel_latency_s(route, torch.tensor(x, dtype=torch.float32),
                                                    torch.tensor(ideal, dtype=torch.float32),
                                                    unit.expand(len(x)), torch.as_tensor(sub.slots[route])).numpy())
                          for m in models]
        ks = [k for m in rows[:10] if m.gpu == rows[0].gpu for k in m.kernels if tr.route_of(k) == route]
        np.testing.assert_allclose(mlp.latency_s(ks, gpus[rows[0].gpu]), np.exp(np.mean(per_member, axis=0)), rtol=1e-4)
    assert mlp.meta["members"] == 2 and "syn:op" in mlp.meta["timing_overhead_s"] and "syn:op" in mlp.meta["timing_floor_s"]
    assert len(mlp.meta["fixed_cycles"]) == 2 and all(c > 0 for c in mlp.meta["fixed_cycles"])  # one per member
    slopes = [s for member in mlp.meta["gpu_offsets"] for routes in member.values() for _, s in routes.values()]
    assert slopes and max(slopes) <= 0.0  # throttling only ever slows a kernel down
    assert all(set(per_gpu) == set(tr.OFFSET_SLOTS) for member in mlp.meta["gpu_offsets"] for per_gpu in member.values())


def test_subset_keeps_kernels_with_their_rows():
    rows, gpus = synthetic_rows(30)
    d = tr.design(rows, gpus)
    mask = np.arange(len(rows)) % 2 == 0
    sub = d.subset(mask)
    assert len(sub) == mask.sum()
    n_kernels = sum(len(m.kernels) for m, keep in zip(rows, mask) if keep)
    assert sum(len(row) for _, _, row in sub.routes.values()) == n_kernels
    assert all(row.max() < len(sub) for _, _, row in sub.routes.values() if len(row))


def test_classes_groups_and_weights():
    rows, gpus = synthetic_rows(12)
    assert {tr.op_class(m) for m in rows} == {"bmm", "elementwise"}
    assert tr.holdout_group(load_gpu("A100-PCIE-40GB")) == tr.holdout_group(load_gpu("A100-SXM4-40GB"))
    assert tr.holdout_group(load_gpu("T4")) != tr.holdout_group(load_gpu("RTX-2080-Ti"))
    w = tr.group_weights(rows)
    assert w.mean() == pytest.approx(1.0) and (w > 0).all()


def test_neusight_baseline_smoke():
    from simulator.predictor.neusight import NeuSightBaseline

    rows, gpus = synthetic_rows(60)
    single = [m for m in rows if len(m.kernels) == 1]
    model = NeuSightBaseline(epochs=1, width=16, depth=3).fit(single, gpus)
    p = model.predict(rows, gpus)
    assert p.shape == (len(rows),) and (p >= 0).all()


def test_timed_reading_is_additive_then_a_floor():
    """p = 0: overhead + kernel; p > 0: overhead + smooth max(kernel, floor), which tends to the floor for
    tiny kernels and to the kernel for long ones; numpy and torch agree."""
    k = np.array([1e-7, 1e-6, 1e-5, 1e-4, 1e-3])
    o, f = np.full(5, 5e-6), np.full(5, 20e-6)
    np.testing.assert_allclose(tr.timed_reading_s(k, o, f, 0.0, np), o + k)
    smooth = tr.timed_reading_s(k, o, f, 4.0, np)
    assert (np.diff(smooth) > 0).all() and (smooth >= o + np.maximum(k, f)).all()
    assert smooth[0] == pytest.approx(25e-6, rel=1e-3) and smooth[-1] == pytest.approx(1e-3 + 5e-6, rel=1e-3)
    as_torch = tr.timed_reading_s(*(torch.tensor(a) for a in (k, o, f)), 4.0, torch).numpy()
    np.testing.assert_allclose(as_torch, smooth)


def test_emulated_calibration_inverts_the_timing():
    """The calibration reads a host-timed kernel's own time back out of the reading."""
    from simulator.predictor import evaluation as ev

    k = Kernel("add", "fp32", (8192, 8192))
    timing = {"timing_overhead_s": {"s:op": 5e-6}, "timing_floor_s": {"s:op": 20e-6}, "timing_p": 4.0}
    reading = float(tr.timed_reading_s(np.array([300e-6]), np.array([5e-6]), np.array([20e-6]), 4.0, np)[0])
    cal = ev.emulated_calibration([Measurement((k,), "T4", reading, "s", "host", "op")], timing)
    assert cal["copy"]["bytes_per_s"] == pytest.approx(k.bytes / 300e-6, rel=1e-6)


def test_each_vector_op_has_its_own_offset_and_the_penalties_are_apart():
    """A measured GPU's slow kernel of one vector op (vLLM's silu_and_mul) must not move its other vector ops,
    and GEMM offsets are held closer to 0 than vector-op ones (``training._offset_penalty``)."""
    from simulator.predictor.features import OFFSET_SLOTS, offset_slot
    from simulator.predictor.model import KernelModel

    assert len({offset_slot(op) for op in ("swiglu", "rope", "add", "layernorm", "layernorm_bwd")}) == 5
    assert offset_slot("gemm") == OFFSET_SLOTS[0] == "gemm"
    model = KernelModel({}, 1, 1, n_units=2, n_slots=len(OFFSET_SLOTS))
    with torch.no_grad():
        model.unit_slope_raw.fill_(-50.0)  # slopes ~0: the penalty is the offsets'
        model.unit_offset[0, 0] = 1.0  # a GEMM offset
        gemm = float(tr._offset_penalty(model, tr.FitConfig()))
        model.unit_offset.zero_()
        model.unit_offset[0, OFFSET_SLOTS.index("vector:swiglu")] = 1.0
        vector = float(tr._offset_penalty(model, tr.FitConfig()))
    config = tr.FitConfig()
    assert gemm == pytest.approx(config.unit_offset_l2 / 2) and vector == pytest.approx(config.vector_offset_l2 / 2)
    assert gemm > vector
