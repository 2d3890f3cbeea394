import json

import pytest

from simulator.cli import main
from simulator.collectives.commands import parse_sizes


def test_size_specs():
    assert parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]
    assert parse_sizes("2048,10240,1048576") == [2048, 10240, 1048576]
    assert parse_sizes("1G:1G") == [2**30]


def test_table_has_nccl_tests_columns(capsys):
    assert main(["collective", "--cluster", "dgx-a100", "--op", "all_reduce", "--gpus", "8", "--sizes", "1K:8G"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "busbw" in out[1] and "algorithm" in out[1] and "protocol" in out[1]
    rows = [line.split() for line in out[2:]]
    assert len(rows) == 24 and rows[0][0] == "1024" and rows[-1][0] == str(8 * 2**30)
    assert rows[0][5] == "LL" and rows[-1][5] == "Simple"
    assert float(rows[-1][3]) == pytest.approx(229, rel=0.03)  # DGX A100 ring busbw


def test_json_rows(capsys):
    assert main(["collective", "--cluster", "dgx-h100-2node", "--op", "all_gather", "--gpus", "16", "--nodes", "2",
                 "--sizes", "2048,1048576", "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["size_bytes"] for r in rows] == [2048, 1048576]
    assert {"size_bytes", "time_s", "algbw", "busbw", "algorithm", "protocol"} <= set(rows[0])
    assert rows[1]["busbw"] == pytest.approx(rows[1]["algbw"] * 15 / 16)


def test_one_gpu_is_valid_json_without_bandwidths(capsys):
    """A single GPU moves nothing: time 0 and no bandwidth (null), never Infinity/NaN (not JSON)."""
    assert main(["collective", "--cluster", "dgx-a100", "--gpus", "1", "--sizes", "1M", "--json", "-"]) == 0
    text = capsys.readouterr().out
    assert "Infinity" not in text and "NaN" not in text
    row = json.loads(text)[0]
    assert row["time_s"] == 0 and row["algbw"] is None and row["busbw"] is None


def test_flow_model_matches_closed_form(capsys):
    args = ["collective", "--cluster", "dgx-h100", "--gpus", "8", "--sizes", "64M", "--json", "-"]
    assert main(args) == 0
    closed = json.loads(capsys.readouterr().out)[0]["time_s"]
    assert main(args + ["--model", "flow"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["time_s"] == pytest.approx(closed, rel=0.02)


def test_forced_algorithm_and_send_recv_across_nodes(capsys):
    assert main(["collective", "--cluster", "dgx-h100", "--gpus", "8", "--sizes", "1G", "--algo", "ring",
                 "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["algorithm"] == "ring"
    assert main(["collective", "--cluster", "dgx-h100-2node", "--op", "send_recv", "--gpus", "2", "--nodes", "2",
                 "--sizes", "1G", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["busbw"] == pytest.approx(47, rel=0.05)  # one NDR NIC


@pytest.mark.parametrize("args,needle", [
    (["--op", "allreduce"], "--op = 'allreduce'"),
    (["--sizes", "1X"], "--sizes = '1X'"),
    (["--sizes", "8G:1K"], "below its start"),
    (["--gpus", "0"], "--gpus = 0"),
    (["--gpus", "12", "--nodes", "1"], "cannot spread evenly"),
    (["--gpus", "16", "--nodes", "2"], "has only 1 node"),
    (["--gpus", "16"], "--gpus = 16: needs 2 nodes of 8 GPUs; dgx-a100 has 1"),
    (["--algo", "nvls"], "not available"),
    (["--model", "packet"], "--model = 'packet'"),
])
def test_bad_input_one_line_exit_2(args, needle, capsys):
    base = ["collective", "--cluster", "dgx-a100", "--gpus", "8", "--sizes", "1K"]
    assert main(base + args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


NCCL_TESTS_LOG = """# nThread 1 nGpus 8 minBytes 1048576 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid  12345 on   dgx-a100 device  0 [0x07] NVIDIA A100-SXM4-80GB
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    40.00   26.21   45.88      0    39.00   26.89   47.05      0
  1073741824     268435456     float     sum      -1   8000.0  134.22  234.88      0   7990.0  134.39  235.18      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 140.4
"""


def test_nccl_tests_logs_are_read_by_their_header(tmp_path):
    from simulator.collectives.nccl_tests import read_nccl_tests

    new, old = tmp_path / "new.log", tmp_path / "old.log"
    new.write_text(NCCL_TESTS_LOG)
    # nccl-tests before the root column: time is the 5th column
    old.write_text("#  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  error\n"
                   "   2048    512  float   sum  12.5   0.16   0.29  0e+00  12.0   0.17   0.30  0e+00\n")
    assert read_nccl_tests(str(new)) == [(1048576, pytest.approx(40e-6)), (2**30, pytest.approx(8e-3))]
    assert read_nccl_tests(str(old)) == [(2048, pytest.approx(12.5e-6))]


def test_compare_prints_the_measured_time_and_error(tmp_path, capsys):
    log = tmp_path / "ar.log"
    log.write_text(NCCL_TESTS_LOG)
    assert main(["collective", "--cluster", "dgx-a100", "--gpus", "8", "--compare", str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "measured(us)" in out[1] and "error(%)" in out[1]
    rows = [line.split() for line in out[2:4]]
    assert [r[0] for r in rows] == ["1048576", "1073741824"] and rows[1][-2] == "8000.00"
    predicted_us = float(rows[1][1])
    assert float(rows[1][-1]) == pytest.approx(100 * (predicted_us / 8000 - 1), abs=0.06)
    assert out[4].startswith("# model vs measured: MAPE") and "below 1 MiB -" in out[4]
    assert main(["collective", "--cluster", "dgx-a100", "--gpus", "8", "--compare", str(log), "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["measured_time_s"] == pytest.approx(40e-6) and "error_pct" in rows[0]


@pytest.mark.parametrize("text, needle", [
    ("", "no nccl-tests data lines"),
    ("#  size  count  type  redop  root  time\n  1024  256  float  sum  -1  abc\n", "line 2"),
    ("#  size  count  type  redop  root  time\n  1024  256  float  sum  -1  0.0\n", "positive size and time"),
])
def test_compare_bad_logs_one_line_exit_2(tmp_path, capsys, text, needle):
    log = tmp_path / "bad.log"
    log.write_text(text)
    assert main(["collective", "--cluster", "dgx-a100", "--gpus", "8", "--compare", str(log)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert main(["collective", "--cluster", "dgx-a100", "--gpus", "8", "--compare", str(log), "--sizes", "1K"]) == 2
