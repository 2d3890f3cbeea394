"""Unit tests of the measured-data loaders: unit, shape and timing conversions on tiny inline samples."""
from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ConfigError
from simulator.predictor import dataset as ds
from simulator.predictor import evaluation as ev
from simulator.predictor.aceso import aceso_kernels, aceso_model_shapes
from simulator.predictor.kernels import OPS, Kernel


def write_csv_gz(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_neusight_bmm_swaps_reduction_and_converts_ms(tmp_path):
    row = {"OPName": "bmm", "Latency": "0.5", "Device": "Tesla T4", "Kernel Name": "volta_sgemm_128x64_nn",
           "B": "8", "M": "64", "N": "32", "K": "16"}
    write_csv_gz(tmp_path / "neusight/kernels/train/bmm/Tesla_T4.csv.gz", [row])
    (m,) = ds.load_neusight(tmp_path, "train")
    assert m.kernels == (Kernel("gemm", "fp32", (8, 64, 16, 32), "nn"),)  # N (reduction) -> k
    assert m.latency_s == pytest.approx(0.5e-3)
    assert (m.gpu, m.source, m.timing, m.kernel_name) == ("T4", "neusight", "event", "volta_sgemm_128x64_nn")


def test_neusight_linear_and_vector_rows():
    lin = ds.neusight_kernel("linear", {"B": "1", "M": "128", "N": "1024", "K": "4096"})
    assert lin == Kernel("gemm", "fp32", (1, 128, 4096, 1024), "nt")
    assert ds.neusight_kernel("addu", {"B": "4", "H": "8"}) == Kernel("add_scalar", "fp32", (4, 8))
    assert ds.neusight_kernel("ln", {"B": "4", "H": "8"}).op == "layernorm"


def test_vidur_shapes_follow_tensor_parallel_sharding():
    cfg = {"n_embd": "4096", "n_expanded_embd": "11008", "n_head": "32", "n_kv_head": "8", "use_gated_mlp": "True",
           "vocab_size": "32000"}
    (qkv,) = ds.vidur_kernels("attn_pre_proj", 100, 2, cfg, "rmsnorm")
    assert qkv.shape == (1, 100, (32 + 16) * 128 // 2, 4096) and qkv.dtype == "fp16"
    (up,) = ds.vidur_kernels("mlp_up_proj", 100, 2, cfg, "rmsnorm")
    assert up.shape == (1, 100, 11008, 4096)  # gated: 2 x ffn / tp
    (act,) = ds.vidur_kernels("mlp_act", 100, 2, cfg, "rmsnorm")
    assert act == Kernel("swiglu", "fp16", (100, 5504))


def test_aceso_decomposition():
    s = aceso_model_shapes("OPT-350", 2)
    assert s.tokens == 4096 and s.head_dim == 64
    assert aceso_kernels("enc-attention-qkv", "fwd", "fp16", s) == (Kernel("gemm", "fp16", (1, 4096, 3072, 1024), "nt"),)
    (bwd,) = aceso_kernels("enc-attention-qkv", "bwd", "fp16", s)  # input gradient only
    assert bwd.shape == (1, 4096, 1024, 3072)
    score = aceso_kernels("enc-attention-score", "bwd", "fp32", s, gemm_dtype="tf32")
    assert [k.dtype for k in score] == ["tf32", "tf32"] and score[0].shape == (32, 2048, 64, 2048)
    # fp32 takes Megatron's torch path: scale, mask, softmax; backward the softmax's two kernels, the mask's, the
    # scale's. The row kernel comes first (it names the measurement's class).
    fwd32 = aceso_kernels("enc-attention-softmax", "fwd", "fp32", s)
    assert [k.op for k in fwd32] == ["softmax", "mul_scalar", "masked_fill"]
    assert {k.shape for k in fwd32} == {(2 * 16 * 2048, 2048)} and {k.dtype for k in fwd32} == {"fp32"}
    bwd32 = aceso_kernels("enc-attention-softmax", "bwd", "fp32", s, gemm_dtype="tf32")
    assert [k.op for k in bwd32] == ["softmax_bwd", "mul", "masked_fill", "mul_scalar"]
    (sm,) = aceso_kernels("enc-attention-softmax", "bwd", "fp16", s)  # causal: reads half of grad and output
    assert sm.op == "softmax_causal_bwd" and sm.bytes == pytest.approx(2 * (2 * 32 * 2048 * 2049 / 2 + 32 * 2048 * 2048))
    assert aceso_kernels("gpt-post-process", "fwd", "fp16", s) == ()
    # Norm backward: the input gradient (3 tensors) and the gamma/beta gradient (2 more reads).
    ln = aceso_kernels("enc-1st-layernorm", "bwd", "fp32", s)
    assert [k.op for k in ln] == ["layernorm_fused_bwd", "norm_weight_bwd"]
    assert [k.bytes // (4 * 4096 * 1024) for k in ln] == [3, 2]


def test_aceso_loader_skips_tp_and_failed_ops(tmp_path):
    folder = tmp_path / "sailor/aceso/A100-40/profiled-data-fp32"
    folder.mkdir(parents=True)
    text = "op_name,forward-compute,backward-compute\nenc-attention-dense,100.0,10000000.000\n"
    (folder / "OPT-350_mbs1_tp1_algo0.csv").write_text(text)
    (folder / "OPT-350_mbs1_tp2_algo0.csv").write_text(text)
    (m,) = ds.load_aceso(tmp_path)
    assert m.latency_s == pytest.approx(100e-6) and m.label == "enc-attention-dense:fwd"
    assert m.kernels[0].dtype == "tf32" and m.gpu == "A100-SXM4-40GB" and m.timing == "host"


def test_data_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv(ds.DATA_ENV, str(tmp_path))
    assert ds.data_dir() == tmp_path
    assert ds.data_dir(tmp_path) == tmp_path
    with pytest.raises(ConfigError):
        ds.data_dir(tmp_path / "missing")


def test_collected_folder_round_trip(tmp_path):
    from simulator.predictor.collect import write_kernels_csv

    (tmp_path / "gpu.yaml").write_text("name: my-gpu\narchitecture: ampere\nsms: 108\nbase_clock_MHz: 1000\n"
                                       "boost_clock_MHz: 1410\ntdp_W: 400\nmemory_GiB: 40\nmemory_bandwidth_GBps: 1555\n"
                                       "l2_MiB: 40\npeak_TFLOPS: {fp32: 19.5, bf16: 312}\n")
    k = Kernel("gemm", "bf16", (1, 64, 64, 64), "nt")
    write_kernels_csv(tmp_path / "kernels.csv", [(k, 1.5e-5, ""), (k, 3e-5, "nvjet_x", 4e-6)])
    rows, gpus = ds.load_collected(tmp_path)
    assert rows[0].kernels == (k,) and rows[0].latency_s == pytest.approx(1.5e-5) and rows[0].timing == "event"
    # The profiler's device time, where recorded, is the measurement (the event median has host dispatch in it).
    assert (rows[1].latency_s, rows[1].timing, rows[1].kernel_name) == (pytest.approx(4e-6), "kernel", "nvjet_x")
    assert gpus["my-gpu"].sms == 108


def test_shipped_h200_collection_loads_and_names_its_gemm_tiles():
    from simulator.predictor.tiling import tile_from_kernel_name

    folders = ds.collected_folders(ds.REPO_ROOT)
    assert [f.name for f in folders] == ["h200", "h200-fp8-fp16-test", "h200-neusight-test"]
    rows, gpus = ds.load_collected(folders[0])
    assert list(gpus) == ["H200-SXM-141GB"] and len(rows) > 1000
    assert all(m.timing == "kernel" and 0 < m.latency_s < 1 for m in rows)
    gemms = [m for m in rows if m.kernels[0].family == "gemm"]
    named = [m for m in gemms if tile_from_kernel_name(m.kernel_name)]
    assert len(named) > 0.9 * len(gemms)
    # NeuSight's test shapes measured on the H200: a test split, evaluated beside NeuSight's own, never trained on.
    test_rows, _ = ds.load_collected(folders[2])
    assert {m.split for m in test_rows} == {"test"}
    assert {ev.dataset_of(m) for m in test_rows} == {"neusight-test"}


def test_collected_softmax_backward_is_the_mul_and_row_kernel_the_profiler_saw():
    k = Kernel("softmax_bwd", "bf16", (2048, 1024))
    names = ("void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, "
             "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >();"
             "void (anonymous namespace)::softmax_warp_backward<c10::BFloat16, c10::BFloat16, float, 10>()")
    assert ds.collected_kernels(k, names) == (Kernel("mul", "bf16", (2048, 1024)), k)
    assert ds.collected_kernels(k, "void softmax_warp_backward<float>()") == (k,)
    rows, _ = ds.load_collected(ds.collected_folders(ds.REPO_ROOT)[0])
    sm = [m for m in rows if m.label == "softmax_bwd"]
    assert sm and all([x.op for x in m.kernels] == ["mul", "softmax_bwd"] for m in sm)


def test_data_hash_is_order_independent(tmp_path):
    a = ds.Measurement((Kernel("add", "fp32", (2, 2)),), "T4", 1e-5, "x", "kernel", "add")
    b = ds.Measurement((Kernel("mul", "fp32", (2, 2)),), "T4", 2e-5, "x", "kernel", "mul")
    assert ds.data_hash([a, b]) == ds.data_hash([b, a]) != ds.data_hash([a])


def test_shared_data_loads(shared_data):
    rows = ds.load_neusight(shared_data, "test")
    assert len(rows) > 10_000 and {m.gpu for m in rows} >= {"T4", "A100-PCIE-40GB"}
    aceso = ds.load_aceso(shared_data)
    assert any(m.kernels[0].dtype == "tf32" for m in aceso) and all(m.latency_s < 10 for m in aceso)


def test_best_scale_mape_removes_a_uniform_error_and_never_exceeds_the_plain_mape():
    import numpy as np

    rows = [ds.Measurement([Kernel("add", "fp32", (1024, n))], "T4", 1e-5 * n / 1024, "neusight", "kernel", "add")
            for n in (1024, 2048, 4096, 8192)]
    measured = np.array([m.latency_s for m in rows])
    (uniform, _), = ev.best_scale_mape_by_group(rows, 1.7 * measured).values()
    assert uniform == pytest.approx(0.0, abs=1e-9)
    skewed = measured * np.array([0.8, 1.1, 1.3, 2.0])
    (plain, n), = ev.mape_by_group(rows, skewed).values()
    (scaled, n_scaled), = ev.best_scale_mape_by_group(rows, skewed).values()
    # for ratios 0.8, 1.1, 1.3, 2.0 the best factor is 1 / 1.3 (a grid search over factors agrees): 26.9 % against 40 %
    assert n == n_scaled == 4 and scaled == pytest.approx(100 * 0.7 / 2.6, abs=1e-9) and plain == pytest.approx(40.0)


def test_label_shares_split_a_cells_mape_by_label():
    import numpy as np

    rows = [ds.Measurement([Kernel(op, "fp16", (1024, 1024))], "A40", 1e-5, "vidur", "kernel", op)
            for op in ("add", "add", "rope", "rope")]
    shares = ev.label_shares(rows, 1e-5 * np.array([1.2, 1.0, 0.5, 0.5]))  # errors 20, 0, 50, 50 %
    (cell,) = {c for c, _ in shares}
    (mape, _), = ev.mape_by_group(rows, 1e-5 * np.array([1.2, 1.0, 0.5, 0.5])).values()
    assert sum(v["share_pp"] for v in shares.values()) == pytest.approx(mape) == pytest.approx(30.0)
    assert shares[cell, "add"]["share_pp"] == pytest.approx(5.0) and shares[cell, "add"]["mape"] == pytest.approx(10.0)
    assert shares[cell, "rope"]["median_ratio"] == pytest.approx(0.5) and shares[cell, "rope"]["n"] == 2


def _user_folder(path, rows: str):
    path.mkdir()
    (path / "gpu.yaml").write_text("name: my-gpu\narchitecture: ampere\nsms: 108\nbase_clock_MHz: 1000\n"
                                   "boost_clock_MHz: 1410\ntdp_W: 400\nmemory_GiB: 40\nmemory_bandwidth_GBps: 1555\n"
                                   "l2_MiB: 40\npeak_TFLOPS: {fp32: 19.5, bf16: 312}\n")
    (path / "kernels.csv").write_text("op,dtype,shape,layout,latency_s,kernel_name,profiled_s\n" + rows)
    return path


def test_load_all_trains_on_a_users_collected_folders(tmp_path):
    """``fit-predictor --collected``: a user's folder joins training (even one named *-test), once."""
    mine = _user_folder(tmp_path / "mine-test", "add,bf16,512x1024,,3e-5,,2e-6\ngemm,bf16,1x64x64x64,nt,1e-5,,\n")
    base, _ = ds.load_all(tmp_path / "no-shared-data")
    rows, gpus = ds.load_all(tmp_path / "no-shared-data", collected=[mine, mine, ds.collected_folders(ds.REPO_ROOT)[0]])
    added = [m for m in rows if m.source == "mine-test"]
    assert len(rows) == len(base) + 2 and len(added) == 2  # the shipped folder again adds nothing
    assert {m.split for m in added} == {"train"} and [m.timing for m in added] == ["kernel", "event"]
    assert gpus["my-gpu"].sms == 108
    with pytest.raises(ConfigError, match="--collected = .*no kernels.csv or gpu.yaml in it"):
        ds.load_all(tmp_path, collected=[tmp_path])


@pytest.mark.parametrize("row, problem", [
    ("add,bf16,512xab,,3e-5,,", "line 2: shape = '512xab': expected whole numbers"),
    ("conv,bf16,4x4,,3e-5,,", "line 2: op = 'conv': unknown kernel op"),
    ("add,int4,4x4,,3e-5,,", "line 2: dtype = 'int4'"),
    ("add,fp32,4x4x4,,3e-5,,", "line 2: shape = '4x4x4': add takes a shape of 1 or 2 dimensions"),
    ("add,fp32,4x4,,,,", "line 2: latency_s = '': missing or empty"),
    ("add,fp32,4x4,,-1,,", "line 2: latency_s = '-1': not a positive time"),
    ("add,fp32,4x4,,1e-5,,abc", "line 2: profiled_s = 'abc': not a number"),
])
def test_a_collected_folders_bad_row_is_a_one_line_error(tmp_path, row, problem):
    folder = _user_folder(tmp_path / "mine", row + "\n")
    with pytest.raises(ConfigError, match=f"kernels.csv: {problem}"):
        ds.load_collected(folder)


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from(sorted(OPS)), st.sampled_from(["fp32", "bf16", "fp16", "tf32", "fp8"]),
       st.sampled_from(["nt", "nn", "tn"]), st.floats(1e-7, 10.0))
def test_collect_rows_read_back_as_written(data, op, dtype, layout, seconds):
    """What ``collect`` writes, ``predict-kernels``, ``collect --input`` and ``fit-predictor --collected`` read
    back unchanged (one parser: ``kernel_csv.collected_kernel``)."""
    import tempfile

    from simulator.predictor.collect import write_kernels_csv
    from simulator.predictor.kernel_csv import read_kernel_rows

    n = data.draw(st.sampled_from(sorted(OPS[op].dims)))
    dims = data.draw(st.lists(st.integers(1, 1 << 20), min_size=n, max_size=n))
    k = Kernel(op, dtype, tuple(dims), layout if op == "gemm" else "")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.csv"
        write_kernels_csv(path, [(k, seconds, "name", seconds / 2)])
        rows, _, kernels = read_kernel_rows(str(path))
        assert kernels == [k]
        assert ds._collected_row(rows[0], "x") == (k, pytest.approx(seconds / 2), "kernel")
