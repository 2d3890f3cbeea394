"""Properties the simulator must satisfy whatever the inputs."""
from hypothesis import given, settings
from hypothesis import strategies as st

from unittest import mock

import pytest

from simulator.api import program_for, simulate
from simulator.collectives import tuning
from simulator.engine import CommTask, ComputeTask
from simulator.topology import build_topology, route
from simulator.topology.routing import route_latency_s

from conftest import make_cluster, plan, tiny_model

FREE = dict(intra_bw=1e30, intra_latency=0.0)


@pytest.mark.parametrize("dp,micro,accum", [(2, 1, 1), (4, 2, 3), (8, 1, 2)])
def test_zero_cost_network_dp_equals_one_gpu(dp, micro, accum):
    model = tiny_model()
    many = simulate(make_cluster(dp, **FREE), model, plan(dp=dp, micro_batch_size=micro,
                                                          global_batch_size=dp * micro * accum), "roofline")
    one = simulate(make_cluster(1, **FREE), model, plan(micro_batch_size=micro, global_batch_size=micro * accum),
                   "roofline")
    assert many.step_time_s == pytest.approx(one.step_time_s, rel=1e-9)


PLANS = [dict(dp=4), dict(tp=4), dict(pp=4, global_batch_size=4), dict(dp=2, tp=2), dict(dp=2, pp=2, global_batch_size=8)]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(PLANS), st.floats(1e9, 1e12), st.floats(1.0, 10.0), st.sampled_from(["nvswitch", "pcie", "nvlink_mesh"]))
def test_more_bandwidth_is_never_slower(fields, bw, factor, kind):
    """Without the NVSwitch latency NCCL's tuner does not see: with it, faster links can make the tuner
    pick Simple over LL for a small all-reduce that then runs 20 us + 3 us per step longer (as NCCL does)."""
    model, p = tiny_model(), plan(**fields)
    with mock.patch.object(tuning, "NVSWITCH_SIMPLE_CALL_US", 0.0), mock.patch.object(tuning, "NVSWITCH_SIMPLE_STEP_US", 0.0):
        slow = simulate(make_cluster(4, kind=kind, intra_bw=bw), model, p, "roofline").step_time_s
        fast = simulate(make_cluster(4, kind=kind, intra_bw=bw * factor), model, p, "roofline").step_time_s
    assert fast <= slow * (1 + 1e-9)


PLANS_8 = [dict(dp=8), dict(dp=2, tp=4), dict(tp=4, pp=2, global_batch_size=4), dict(dp=2, tp=2, pp=2, global_batch_size=8)]


@settings(max_examples=10, deadline=None)
@given(st.sampled_from(PLANS_8), st.floats(1e9, 1e12))
def test_more_bandwidth_is_never_slower_across_nodes(fields, nic_bw):
    model, p = tiny_model(layers=8), plan(**fields)
    slow = simulate(make_cluster(4, nodes=2, nic_bw=nic_bw), model, p, "roofline").step_time_s
    fast = simulate(make_cluster(4, nodes=2, nic_bw=nic_bw * 2), model, p, "roofline").step_time_s
    assert fast <= slow * (1 + 1e-9)


def test_one_micro_batch_pipeline_is_serial_sum():
    model = tiny_model(layers=8, tied_embeddings=False)
    cluster = make_cluster(4, kind="nvlink_mesh")
    p = plan(pp=4, micro_batch_size=2, global_batch_size=2, dtype="fp32")
    prog = program_for(cluster, model, p, "roofline")
    topo = build_topology(cluster)
    compute = {r: {"forward": 0.0, "backward": 0.0, "optimizer": 0.0} for r in prog.ranks}
    for t in prog.tasks:
        if isinstance(t, ComputeTask):
            compute[t.rank][t.category] += t.duration_s
    sends = [t for t in prog.tasks if isinstance(t, CommTask) and t.collective == "send_recv"]
    send_time = {}
    for t in sends:
        edges = route(topo, *t.groups[0])
        cap = min(topo.graph.edges[e]["capacity_bytes_per_s"] for e in edges)
        proto = "LL" if t.size_bytes <= 16384 else "Simple"  # NCCL_P2P_LL_THRESHOLD; LL carries 4 B per 8 B store
        rate = min(cap / 2, tuning.ll_max_busbw(cluster.gpu.architecture, 1)) if proto == "LL" else cap
        latency_s = route_latency_s(topo, edges) + tuning.hop_latency_us("nvlink", proto) * 1e-6
        send_time[t.groups[0]] = latency_s + t.size_bytes / rate
    ranks = list(prog.ranks)
    fwd_end = sum(compute[r]["forward"] for r in ranks) + sum(send_time[(a, b)] for a, b in zip(ranks, ranks[1:]))
    b_end, ends = fwd_end, []
    for i, r in reversed(list(enumerate(ranks))):
        b_end += compute[r]["backward"]
        ends.append(b_end + compute[r]["optimizer"])
        if i > 0:
            b_end += send_time[(r, ranks[i - 1])]
    result = simulate(cluster, model, p, "roofline")
    assert result.step_time_s == pytest.approx(max(ends), rel=1e-9)


def test_results_identical_across_runs():
    cluster, model = make_cluster(4, nodes=2), tiny_model()
    p = plan(dp=2, tp=2, pp=2, global_batch_size=8)
    runs = [simulate(cluster, model, p, "roofline").to_json() for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]


def test_breakdown_adds_up():
    r = simulate(make_cluster(4), tiny_model(), plan(dp=2, pp=2, global_batch_size=8), "roofline")
    for row in r.ranks:
        assert row.compute_s + row.exposed_comm_s + row.idle_s == pytest.approx(r.step_time_s, rel=1e-9)


def test_gpipe_bubble_shrinks_with_more_micro_batches():
    model, cluster = tiny_model(layers=8), make_cluster(4, **FREE)
    frac = []
    for m in (4, 8, 16):
        r = simulate(cluster, model, plan(pp=4, global_batch_size=m, schedule="gpipe"), "roofline")
        frac.append(r.bubble_s / r.step_time_s)
    assert frac[0] > frac[1] > frac[2]


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(PLANS), st.sampled_from([64, 128, 512]), st.sampled_from(["decoder", "encoder"]),
       st.sampled_from(["mlp", "roofline"]))
def test_fewer_passes_over_the_scores_are_never_slower(fields, seq_len, architecture, predictor):
    """One fused softmax kernel each way, or no dropout, never makes a step slower or use more memory."""
    model = tiny_model(seq_len=seq_len, architecture=architecture)
    cluster = make_cluster(4)
    base = plan(dtype="fp16", attention="unfused", **fields)
    ref = simulate(cluster, model, base, predictor)
    for m, p in ((model, base.model_copy(update=dict(attention="fused-softmax"))),
                 (model.model_copy(update=dict(hidden_dropout=0.0, attention_dropout=0.0)), base)):
        r = simulate(cluster, m, p, predictor)
        assert r.step_time_s <= ref.step_time_s * (1 + 1e-9)
        assert r.peak_memory_bytes <= ref.peak_memory_bytes
