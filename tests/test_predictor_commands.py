"""predict-kernels / collect / fit-predictor: argument handling, CSV format, clean failures."""
from __future__ import annotations

import csv
import json

import pytest

from simulator.cli import main
from simulator.errors import ConfigError, PredictorError
from simulator.predictor import collect
from simulator.predictor.kernel_csv import kernel_from_row
from simulator.predictor.kernels import Kernel

CSV = """OPName,B,M,N,K,H,Latency,Kernel Name,dtype
bmm,16,128,64,128,,0.1,volta_sgemm_128x64_nn,
linear,1,2048,1024,4096,,0.5,x,bf16
ln,,,,,,0.01,y,
softmax,4096,,,,512,0.01,y,fp16
"""


def test_row_conversion():
    assert kernel_from_row({"OPName": "bmm", "B": "2", "M": "3", "N": "4", "K": "5"}, 2, "f") == \
        Kernel("gemm", "fp32", (2, 3, 5, 4), "nn")
    assert kernel_from_row({"OPName": "linear", "B": "2", "M": "3", "N": "4", "K": "5"}, 2, "f") == \
        Kernel("gemm", "fp32", (1, 6, 5, 4), "nt")  # nn.Linear over B x M rows
    assert kernel_from_row({"OPName": "gelu", "B": "2", "H": "7", "dtype": "bf16"}, 2, "f") == Kernel("gelu", "bf16", (2, 7))
    with pytest.raises(ConfigError, match="line 3: OPName = 'conv': unknown op"):
        kernel_from_row({"OPName": "conv", "B": "1", "H": "1"}, 3, "f")
    assert kernel_from_row({"OPName": "bmm", "B": "2.0", "M": "3", "N": "4", "K": "5"}, 2, "f").shape == (2, 3, 5, 4)
    for bad in ("1.5", "-4", "x", "inf"):  # never truncated or wrapped into another kernel
        with pytest.raises(ConfigError, match=f"M = '{bad}': expected a whole number"):
            kernel_from_row({"OPName": "bmm", "B": "2", "M": bad, "N": "4", "K": "5"}, 2, "f")
    with pytest.raises(ConfigError, match="dtype"):
        kernel_from_row({"OPName": "add", "B": "1", "H": "1", "dtype": "int8"}, 3, "f")


@pytest.mark.parametrize("predictor", ["roofline", "mlp"])
def test_predict_kernels_writes_predicted_ms(tmp_path, predictor):
    from simulator.predictor.mlp import weights_available

    if predictor == "mlp" and not weights_available():
        pytest.skip("no shipped weights")
    src = tmp_path / "in.csv"
    src.write_text(CSV.replace("ln,,,,,,", "ln,64,,,,1024,"))
    out = tmp_path / "out.csv"
    assert main(["predict-kernels", "--gpu", "NVIDIA_A100-PCIE-40GB", "--input", str(src), "--output", str(out),
                 "--predictor", predictor]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 and all(float(r["predicted_ms"]) > 0 for r in rows)
    assert rows[0]["Kernel Name"] == "volta_sgemm_128x64_nn"  # other columns are kept


def test_predict_kernels_dtype_the_gpu_lacks(tmp_path, capsys):
    """A bf16 GEMM row on a GPU without bf16 is a one-line error naming the file, line and dtype."""
    src = tmp_path / "in.csv"
    src.write_text(CSV.replace("ln,,,,,,", "ln,64,,,,1024,"))
    assert main(["predict-kernels", "--gpu", "Tesla_T4", "--input", str(src), "--output", "-",
                 "--predictor", "roofline"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{src}: line 3: dtype = 'bf16'" in err and "T4 has no bf16" in err


def test_predict_kernels_user_errors(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("B,H\n1,2\n")
    assert main(["predict-kernels", "--gpu", "A100-40", "--input", str(src), "--output", str(tmp_path / "o.csv"),
                 "--predictor", "roofline"]) == 2
    assert "OPName" in capsys.readouterr().err
    assert main(["predict-kernels", "--gpu", "no-such-gpu", "--input", str(src), "--output", "x"]) == 2
    assert main(["predict-kernels", "--gpu", "A100-40", "--input", str(tmp_path / "missing.csv"), "--output", "x"]) == 2
    src.write_text("OPName,B,H\nembedding,4096,1024\n")  # an embedding needs (tokens, hidden, vocab)
    assert main(["predict-kernels", "--gpu", "A100-40", "--input", str(src), "--output", "-"]) == 2
    assert "line 2: OPName = 'embedding'" in capsys.readouterr().err
    src.write_text("OPName,B,M,N,K\nlinear,1,512,512,\nVECsoftmax,4,512,,\n")  # a missing K, then a missing H
    assert main(["predict-kernels", "--gpu", "A100-40", "--input", str(src), "--output", "-"]) == 2
    assert "line 2: K = '': missing (bmm/linear rows need B, M, N, K" in capsys.readouterr().err
    src.write_text("OPName,B,M,N,K\nVECsoftmax,4,512,,\n")
    assert main(["predict-kernels", "--gpu", "A100-40", "--input", str(src), "--output", "-"]) == 2
    assert "line 2: H = None: missing" in capsys.readouterr().err


def test_gpu_from_yaml_file(tmp_path):
    from simulator.predictor.commands import resolve_gpu_arg

    path = tmp_path / "gpu.yaml"
    path.write_text("gpu:\n  base: A100-SXM4-40GB\n  name: my-a100\n  tdp_W: 300\n")
    gpu = resolve_gpu_arg(str(path))
    assert gpu.name == "my-a100" and gpu.tdp_w == 300 and gpu.sms == 108


def test_collect_fails_cleanly_without_cuda(tmp_path):
    with pytest.raises(PredictorError, match="CUDA|torch"):
        collect.run_collect(tmp_path / "out", quick=True)


BLOCK_HEAVY = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pydantic", "simpy", "networkx", "yaml"}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from simulator.cli import main
"""


@pytest.mark.parametrize("args, status, stream, text", [
    (["collect", "--help"], 0, "out", "--quick"),
    (["collect", "--out", "OUT", "--quick"], 2, "err", "error: `simulator collect` needs"),
    (["collect", "--out", "OUT", "--ops", "gemm", "layernorm_fused"], 2, "err",
     "error: --ops layernorm_fused: not in the collection suite"),  # torch has no fused (apex) LayerNorm
])
def test_collect_runs_without_pydantic_simpy_networkx_or_yaml(tmp_path, args, status, stream, text):
    # GPU machines often have only torch and numpy: `collect` must load there (issue 3, item 6).
    import subprocess
    import sys

    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    proc = subprocess.run([sys.executable, "-c", BLOCK_HEAVY + f"sys.exit(main({args!r}))"],
                          capture_output=True, text=True)
    assert proc.returncode == status, proc.stderr
    assert text in (proc.stdout if stream == "out" else proc.stderr)
    assert "Traceback" not in proc.stderr


def test_collect_writes_json_gpu_file_without_yaml(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **kw: (_ for _ in ()).throw(ImportError(name))
                        if name == "yaml" else real_import(name, *a, **kw))
    collect.write_mapping(tmp_path / "gpu.yaml", {"name": "x", "sms": 2})
    monkeypatch.undo()
    import yaml

    assert yaml.safe_load((tmp_path / "gpu.yaml").read_text()) == {"name": "x", "sms": 2}


TINY = {"gemm": (2, 16, 32, 16), "attention": (1, 2, 8, 8, 16, 1)}


def test_collect_builders_run_every_suite_op_on_cpu():
    # Each op of the default suite must have a torch call that runs; checked on small CPU tensors
    # (only the GPU timing needs CUDA).
    torch = pytest.importorskip("torch")
    suite = collect.default_suite(dtypes=["fp32", "bf16", "tf32", "fp8"])
    assert all((k.op, k.layout, k.shape[0]) == ("gemm", "nt", 1) for k in suite if k.dtype == "fp8")
    kinds = {(k.op, k.dtype, k.layout, k.family) for k in suite}
    assert {op for op, *_ in kinds} >= {"gemm", "flash_attn", "flash_attn_bwd", "layernorm_bwd", "adam", "rmsnorm"}
    assert all(k.family == "gemm" for k in suite if k.dtype == "tf32")
    from simulator.predictor.dataset import NEUSIGHT_OPS  # `collect --input` measures NeuSight's test rows

    kinds |= {(op, "fp32", "", Kernel(op, "fp32", (4, 16)).family) for op in NEUSIGHT_OPS.values() if op != "gemm"}
    for op, dtype, layout, family in sorted(kinds):
        shape = TINY.get(family, (100,) if op == "adam" else (4, 16))
        shape = (1, *shape[1:]) if dtype == "fp8" else shape
        k = Kernel(op, dtype, shape, layout)
        result = collect.builder(k)(torch, k, torch.device("cpu"))()
        if family == "gemm":
            b, m, n, _ = shape
            assert tuple(result.shape) in ((b, m, n), (m, n))


def test_collect_pure_parts(tmp_path):
    suite = collect.default_suite(["gemm", "layernorm"], ["bf16"])
    assert suite and {k.op for k in suite} == {"gemm", "layernorm"} and len(set(suite)) == len(suite)
    assert collect.median_s([3.0, 1.0, 2.0]) == pytest.approx(2e-3)
    path = tmp_path / "cal.yaml"
    path.write_text("gemm:\n  bf16: {shape: [1, 8192, 8192, 8192], flops_per_s: 6.0e14}\n"
                    "copy: {shape: [16384, 16384], dtype: fp32, bytes_per_s: 3.0e12}\n")
    kernels = collect.calibration_kernels(collect.read_calibration(path))
    assert kernels["bf16"][0][1] == pytest.approx(2 * 8192**3 / 6e14)
    assert kernels["memory"][0][1] == pytest.approx(8 * 16384**2 / 3e12)
    path.write_text("gemm:\n  bf16: {flops_per_s: 1}\n")
    with pytest.raises(ConfigError):
        collect.read_calibration(path)


def test_predict_kernels_reads_gzip_and_rejects_binary(tmp_path):
    import gzip

    src = tmp_path / "in.csv.gz"
    with gzip.open(src, "wt") as fh:
        fh.write("OPName,B,H\ngelu,8,1024\n")
    out = tmp_path / "out.csv"
    assert main(["predict-kernels", "--gpu", "L4", "--input", str(src), "--output", str(out), "--predictor", "roofline"]) == 0
    assert float(next(csv.DictReader(out.open()))["predicted_ms"]) > 0
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\x8b\x00\xff")
    assert main(["predict-kernels", "--gpu", "L4", "--input", str(bad), "--output", str(out)]) == 2


def test_predict_kernels_writes_stdout_for_dash(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("OPName,B,H\ngelu,8,1024\n")
    assert main(["predict-kernels", "--gpu", "L4", "--input", str(src), "--output", "-", "--predictor", "roofline"]) == 0
    row = next(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert row["OPName"] == "gelu" and float(row["predicted_ms"]) > 0
    assert not (tmp_path / "-").exists()


def test_fit_predictor_refuses_a_folder_without_the_shared_sources(tmp_path, capsys):
    """A wrong --data must not train silently on the project's own H200 folders alone."""
    pytest.importorskip("torch")
    (tmp_path / "data").mkdir()
    assert main(["fit-predictor", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no NeuSight, Vidur or Aceso measurements" in err[0]
    assert not (tmp_path / "w").exists()


def _slowed_weights(tmp_path):
    """A copy of the shipped weights whose fixed kernel time is 1000x: what `fit-predictor --out` could write."""
    import json
    import shutil

    from simulator.predictor.mlp import WEIGHTS_DIR, weights_available

    if not weights_available():
        pytest.skip("no shipped MLP weights")
    out = tmp_path / "weights"
    shutil.copytree(WEIGHTS_DIR, out)
    meta = json.loads((out / "kernel_mlp.json").read_text())
    meta["fixed_cycles"] = [c * 1000 for c in meta["fixed_cycles"]]
    (out / "kernel_mlp.json").write_text(json.dumps(meta))
    return out


def test_weights_flag_uses_the_given_weights(tmp_path, capsys):
    weights = _slowed_weights(tmp_path)
    src = tmp_path / "in.csv"
    src.write_text("OPName,B,H,dtype\nadd,64,1024,bf16\n")
    ms = []
    for extra in ([], ["--weights", str(weights)]):
        assert main(["predict-kernels", "--gpu", "H100-SXM5-80GB", "--input", str(src), "--output", "-"] + extra) == 0
        ms.append(float(next(csv.DictReader(capsys.readouterr().out.splitlines()))["predicted_ms"]))
    assert ms[1] > 100 * ms[0]
    step = []
    for extra in ([], ["--weights", str(weights)]):
        assert main(["simulate", "--cluster", "hgx-a100-4gpu-40gb", "--workload", "gpt2-large", "--dp", "4",
                     "--json", "-"] + extra) == 0
        step.append(json.loads(capsys.readouterr().out)["step_time_s"])
    assert step[1] > 2 * step[0]


@pytest.mark.parametrize("args, problem", [
    (["--weights", "{tmp}/none"], "--weights = '{tmp}/none': no kernel_mlp.npz and kernel_mlp.json in it"),
    (["--weights", "{tmp}", "--predictor", "roofline"], "--weights = '{tmp}': only the mlp predictor takes it"),
    (["--calibration", "{tmp}/c.yaml", "--predictor", "roofline"], "--calibration = '{tmp}/c.yaml': only the mlp"),
])
def test_weights_and_calibration_flags_fail_in_one_line(tmp_path, capsys, args, problem):
    src = tmp_path / "in.csv"
    src.write_text("OPName,B,H\nadd,64,1024\n")
    args = [a.format(tmp=tmp_path) for a in args]
    for command in (["predict-kernels", "--gpu", "L4", "--input", str(src), "--output", "-"],
                    ["simulate", "--cluster", "hgx-a100-4gpu-40gb", "--workload", "gpt2-large", "--dp", "4"]):
        assert main(command + args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and problem.format(tmp=tmp_path) in err[0]


def test_fit_predictor_refuses_a_collected_folder_collect_did_not_write(tmp_path, capsys):
    pytest.importorskip("torch")
    (tmp_path / "mine").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "mine" / "kernels.csv").write_text("op,dtype,shape,latency_s\nadd,fp32,4x4,1e-5\n")
    assert main(["fit-predictor", "--data", str(tmp_path / "data"), "--collected", str(tmp_path / "mine"),
                 "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--collected" in err[0] and "no gpu.yaml in it" in err[0]
    assert not (tmp_path / "w").exists()


def test_predict_kernels_reads_collects_format_and_compares_with_the_measured_time(tmp_path, capsys):
    """A folder `collect` wrote is predict-kernels input too: each row predicted as the call it timed, and the
    error against its measured times summarised on stderr."""
    mul = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float> >();void softmax_warp_backward()"
    src = tmp_path / "kernels.csv"
    src.write_text("op,dtype,shape,layout,latency_s,kernel_name,profiled_s\n"
                   "gemm,bf16,1x4096x4096x4096,nt,3.1e-4,nvjet,2.9e-4\n"
                   f"softmax_bwd,fp32,8192x1024,,2e-4,\"{mul}\",4e-5\n"
                   "softmax_bwd,fp32,8192x1024,,2e-4,,\n")
    assert main(["predict-kernels", "--gpu", "H200-SXM-141GB", "--input", str(src), "--output", "-",
                 "--predictor", "roofline"]) == 0
    captured = capsys.readouterr()
    rows = list(csv.DictReader(captured.out.splitlines()))
    assert [r["op"] for r in rows] == ["gemm", "softmax_bwd", "softmax_bwd"]
    assert float(rows[1]["predicted_ms"]) > 1.5 * float(rows[2]["predicted_ms"])  # the Mul's time added
    err = captured.err.splitlines()
    assert err[0].startswith("# predicted vs measured") and "n=3" in err[1] and "MAPE" in err[1]
    assert any(line.split()[1:3] == ["gemm", "bf16"] and "n=1" in line for line in err)
    bad = tmp_path / "bad.csv"
    bad.write_text("op,dtype,shape\nadd,fp32,4x4x4\n")
    assert main(["predict-kernels", "--gpu", "L4", "--input", str(bad), "--output", "-"]) == 2
    assert "bad.csv: line 2: shape = '4x4x4': add takes a shape of 1 or 2 dimensions" in capsys.readouterr().err


def test_predict_kernels_without_measured_times_prints_no_comparison(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("OPName,B,H\nadd,64,1024\n")
    assert main(["predict-kernels", "--gpu", "L4", "--input", str(src), "--output", "-", "--predictor", "roofline"]) == 0
    assert capsys.readouterr().err == ""
    src.write_text("OPName,B,H,Latency\nadd,64,1024,0.01\n")  # NeuSight's Latency, ms
    assert main(["predict-kernels", "--gpu", "L4", "--input", str(src), "--output", "-", "--predictor", "roofline"]) == 0
    assert "n=1" in capsys.readouterr().err
