"""The collective benchmark's Aceso loader (benchmarks/collective_accuracy.py): units converted once."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import collective_accuracy as ca  # noqa: E402

MIB = 2**20


def test_aceso_sizes_are_mib_and_times_ms(tmp_path, monkeypatch):
    # Aceso writes the models' tensors in MiB: GPT-Neo's 2048 x 2560 fp16 activation is "10"
    base = tmp_path / "sailor" / "aceso" / "A100-40" / "profiled-data-fp16"
    base.mkdir(parents=True)
    (base / "prim_GPT-Neo-2.7_all_reduce_2gpus.csv").write_text("data_size(MB),time(ms)\n10,0.5\n1000000000,1\n")
    (base / "prim_GPT-Neo-2.7_all_gather_2gpus.csv").write_text("data_size(MB),time(ms)\n10,0.5\n")
    (base / "p2p_intra_node.csv").write_text("1,1024\n13.64,235.74\n")
    monkeypatch.setattr(ca, "ACESO_BOXES", {"A100-40": "hgx-a100-8gpu-40gb"})
    points = ca._aceso(tmp_path)
    ar = [p for p in points if p.op == "all_reduce"]
    assert len(ar) == 1 and ar[0].size_bytes == 10 * MIB and ar[0].time_s == pytest.approx(0.5e-3)
    (ag,) = [p for p in points if p.op == "all_gather"]
    assert ag.size_bytes == 2 * 10 * MIB and ag.copy_bytes == 2 * 10 * MIB  # gathers n x the tensor
    p2p = {p.size_bytes: p.time_s for p in points if p.op == "send_recv"}
    assert p2p[1024 * MIB] == pytest.approx(1024 / 235.74 * 1e-3)  # the column is MiB per ms


def test_held_out_systems_build_and_one_gpu_drives_one_nic():
    import collective_anchors as anchors

    rows = {r["anchor"]: r for r in anchors.held_out()}
    assert len(rows) == len(anchors.HELD_OUT) and all(r["model_GBps"] > 0 for r in rows.values())
    # a node's single GPU reaches its own rail's NIC only (400 Gb/s = 50 GB/s), not the node's four
    assert rows["H100, 2 nodes x 1 GPU, 4x NDR, 32 MB"]["model_GBps"] < 50


def test_a_p2p_read_sender_runs_a_buffer_ahead_only_between_ga100s_over_nvlink():
    """Vidur times the sender: over GA100 NVLink (NCCL's P2P read) it copies into its own buffer at its own rate
    and finishes a buffer ahead of the receiver; over other GPUs' NVLink it finishes with the transfer."""
    h = {"vidur_copy_Bps": 340e9, "vidur_p2p_buffer_bytes": 6 * MIB, "vidur_buffer_bytes": 0.0}
    send = lambda cluster, size: ca.Point("x", "vidur", cluster, 1, "send_recv", (0, 1), size, 1.0)  # noqa: E731
    topo = ca.topo_for("a100-pcie-nvlink-pairs", 1)
    link = ca.bottleneck_bytes_per_s(topo, ca.route(topo, 0, 1))  # 0.78 x 300 GB/s
    small, big = send("a100-pcie-nvlink-pairs", 4 * MIB), send("a100-pcie-nvlink-pairs", 64 * MIB)
    small_s, big_s = ca.model_s(small), ca.model_s(big)
    assert ca.sender_s(small, small_s, h) == pytest.approx(small_s - 4 * MIB / link + 4 * MIB / 340e9)
    assert ca.sender_s(big, big_s, h) == pytest.approx(big_s - 6 * MIB / link)  # past the buffer: the link's pace
    h100 = send("dgx-h100", 4 * MIB)
    assert ca.sender_s(h100, ca.model_s(h100), h) == ca.model_s(h100)


def test_contributors_shares_add_up_to_each_halfs_mape():
    pt = lambda op, n, size, t: ca.Point("box", "vidur", "dgx-a100", 1, op, tuple(range(n)), size, t)  # noqa: E731
    points = [pt("all_reduce", 2, MIB, 1.0), pt("all_reduce", 2, 2 * MIB, 1.0), pt("send_recv", 2, 4 * MIB, 1.0),
              pt("all_reduce", 4, 1024, 1.0)]
    model = [1.2, 1.0, 0.7, 2.0]  # errors 20, 0, 30 % from 1 MiB; 100 % below
    rows = {(r["sizes"], r["op"], r["gpus"]): r for r in ca.contributors(points, model, min_share_pp=0.0)}
    large = [r for (half, *_), r in rows.items() if half == ">=1 MiB"]
    assert sum(r["share_pp"] for r in large) == pytest.approx(50.0 / 3)  # the half's MAPE
    assert rows[">=1 MiB", "send_recv", 2]["share_pp"] == pytest.approx(10.0)
    assert rows[">=1 MiB", "all_reduce", 2]["mape"] == pytest.approx(10.0)
    assert rows["<1 MiB", "all_reduce", 4]["share_pp"] == pytest.approx(100.0)
    assert [r["op"] for r in ca.contributors(points, model, min_share_pp=20.0)] == ["all_reduce"]  # the 100 % group
