import pytest

from simulator.api import program_for, simulate
from simulator.engine import CommTask, ComputeTask, Program, run
from simulator.topology import build_topology

from conftest import make_cluster, plan, tiny_model


def test_streams_overlap_compute_and_comm():
    topo = build_topology(make_cluster(2, kind="nvswitch"))
    tasks = (
        ComputeTask(0, 0, 1.0, (), "a", "forward"),
        CommTask(1, (0, 1), "all_reduce", ((0, 1),), 240e9 * 0.5, (0,), "ar", "dp"),  # ~0.5 s of traffic
        ComputeTask(2, 0, 1.0, (0,), "b", "forward"),  # independent of the all-reduce: overlaps it
        ComputeTask(3, 1, 1.0, (), "c", "forward"),
    )
    trace = run(Program(tasks, (0, 1), {0: 1, 1: 1}), topo)
    assert trace.end_s == pytest.approx(2.0)
    ar = [i for i in trace.intervals if i.stream == "comm"]
    assert len(ar) == 2 and ar[0].start_s == pytest.approx(1.0)


def test_dependency_cycle_is_reported():
    topo = build_topology(make_cluster(2))
    tasks = (ComputeTask(0, 0, 1.0, (1,), "a", "forward"), ComputeTask(1, 0, 1.0, (), "b", "forward"))
    with pytest.raises(RuntimeError, match="deadlocked"):
        run(Program(tasks, (0,), {0: 1}), topo)


def test_program_structure_tp_pp():
    cluster, model = make_cluster(4), tiny_model()
    prog = program_for(cluster, model, plan(tp=2, pp=2, global_batch_size=2), "roofline")
    assert prog.ranks == (0, 2)  # one representative per stage
    comms = [t for t in prog.tasks if isinstance(t, CommTask)]
    sends = [t for t in comms if t.collective == "send_recv"]
    assert len(sends) == 2 * 2  # 2 micro-batches: activations forward, gradients backward
    tp = [t for t in comms if t.category == "tp"]
    layers_per_stage = 2
    # per micro-batch per stage: 4 per layer + embedding (stage 0) or 3 loss + 1 head (last stage)
    assert len(tp) == 2 * (2 * 4 * layers_per_stage) + 2 * 1 + 2 * 4
    assert prog.to_json()["tasks"][0]["kind"] in ("ComputeTask", "CommTask")


@pytest.mark.parametrize("fields,nodes", [
    (dict(dp=2, tp=2), 1),
    (dict(pp=2, tp=2, global_batch_size=4), 1),
    (dict(dp=2, pp=2, global_batch_size=8, schedule="gpipe"), 1),
    (dict(dp=4, tp=2, pp=2, global_batch_size=8, dtype="fp32"), 4),
])
def test_collapsed_equals_full_simulation(fields, nodes):
    cluster = make_cluster(4, nodes=nodes) if nodes > 1 else make_cluster(fields.get("dp", 1) * fields.get("tp", 1) * fields.get("pp", 1))
    p = plan(**fields)
    a = simulate(cluster, tiny_model(), p, "roofline", collapse=True)
    b = simulate(cluster, tiny_model(), p, "roofline", collapse=False)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-9)
    assert a.compute_s == pytest.approx(b.compute_s, rel=1e-9)


def test_host_overhead_floors_a_segment_at_its_kernel_count():
    from simulator.parallel.lowering import segments
    from simulator.predictor.kernels import vector
    from simulator.workload.transformer import Compute

    class Fixed:
        def latency_s(self, kernels, gpu):
            return [10e-6] * len(kernels)

    steps = [Compute(f"k{i}", vector("add", 8, 8, "fp16")) for i in range(5)]
    cluster = make_cluster()
    assert segments(steps, Fixed(), cluster)[0].duration_s == pytest.approx(50e-6)
    assert segments(steps, Fixed(), cluster, host_s=4e-6)[0].duration_s == pytest.approx(50e-6)  # GPU-bound
    assert segments(steps, Fixed(), cluster, host_s=30e-6)[0].duration_s == pytest.approx(150e-6)  # host-bound
