import json
import subprocess
import sys

import pytest

from simulator.cli import main

BASE = ["simulate", "--cluster", "hgx-a100-4gpu-40gb", "--workload", "gpt2-large", "--predictor", "roofline"]


def test_simulate_prints_summary(capsys):
    assert main(BASE + ["--dp", "4", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    for word in ("step time", "compute", "exposed comm", "bubble", "tokens/s", "MFU", "memory per GPU", "cost"):
        assert word in out


def test_summary_names_the_plan_options_that_differ_from_the_defaults(capsys):
    assert main(BASE + ["--dp", "4", "--dtype", "fp16", "--attention", "fused-softmax", "--recompute", "full"]) == 0
    plan_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("plan:"))
    assert "attention=fused-softmax" in plan_line and "recompute=full" in plan_line and "loss=" not in plan_line


def test_json_to_stdout_has_step_time_first(capsys):
    assert main(BASE + ["--tp", "4", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data)[0] == "step_time_s" and data["step_time_s"] > 0
    assert data["plan"]["tp"] == 4 and data["memory"]["fits"] in (True, False)


def test_trace_file_is_chrome_format(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(BASE + ["--pp", "4", "--global-batch", "8", "--trace", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all(e["dur"] >= 0 for e in complete)
    assert {e["pid"] for e in complete} == {0, 1, 2, 3}


@pytest.mark.parametrize("args,needle", [
    (["--dp", "3"], "dp*tp*pp = 3*1*1 = 3"),
    (["--dp", "-1"], "--dp = -1"),
    (["--dp", "x"], "invalid int value"),
    (["--tp", "3", "--dp", "1"], "tp=3 does not divide 20 attention heads"),
    (["--dp", "4", "--dtype", "fp64"], "--dtype = 'fp64'"),
    (["--dp", "4", "--schedule", "zb"], "--schedule = 'zb'"),
    (["--dp", "4", "--global-batch", "6"], "global batch 6 is not a multiple"),
    (["--dp", "4", "--json", "/nonexistent/dir/x.json"], "cannot write"),
    (["--dp", "4", "--bogus"], "unrecognized arguments"),
    (["--dp", "4", "--seq-len", str(10**20)], "more than any GPU holds"),
    (["--dp", "4", "--global-batch", str(4 * 10**20)], "the simulator runs each one and takes at most 100,000"),
    (["--dp", "4", "--global-batch", str(4 * 50_000)], "36 layers per stage x 50,000 micro-batches"),
])
def test_bad_input_one_line_exit_2(args, needle, capsys):
    assert main(BASE + args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_bad_files_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text("gpu: NoSuchGPU\nnodes: 1\ngpus_per_node: 4\nintra_node: {kind: pcie}\n")
    assert main(["simulate", "--cluster", str(bad), "--workload", "gpt2-large", "--dp", "4"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "gpu = 'NoSuchGPU'" in err and err.count("\n") == 1
    assert main(["simulate", "--cluster", "missing-cluster", "--workload", "gpt2-large"]) == 2
    assert "--cluster = 'missing-cluster'" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "simulator", "simulate", "--cluster", "dgx-a100", "--workload",
                           "gpt2-large", "--dp", "8", "--predictor", "roofline", "--json", "-"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["step_time_s"] > 0


def _step_s(args, capsys) -> float:
    assert main(args + ["--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)["step_time_s"]


def test_calibration_slows_a_gpu_that_sustains_less(tmp_path, capsys):
    """A calibration measuring half the tf32 GEMM rate the MLP predicts makes the step slower; the
    roofline predictor refuses a calibration with a one-line error."""
    from simulator.hardware import load_gpu
    from simulator.predictor import Kernel, get_predictor

    pytest.importorskip("simulator.predictor.mlp")
    shape = (1, 4096, 4096, 4096)
    gpu = load_gpu("A100-SXM4-40GB")
    predicted_s = get_predictor("mlp").latency_s([Kernel("gemm", "tf32", shape, "nn")], gpu)[0]
    cal = tmp_path / "cal.yaml"
    cal.write_text(f"gemm:\n  tf32:\n    shape: {list(shape)}\n    flops_per_s: {2 * 4096**3 / predicted_s / 2}\n")
    base = ["simulate", "--cluster", "hgx-a100-4gpu-40gb", "--workload", "gpt2-large", "--dp", "4", "--dtype", "tf32"]
    plain, calibrated = _step_s(base + ["--predictor", "mlp"], capsys), _step_s(base + ["--calibration", str(cal)], capsys)
    assert calibrated > 1.2 * plain
    assert main(base + ["--predictor", "roofline", "--calibration", str(cal)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--calibration" in err and "\n" not in err
