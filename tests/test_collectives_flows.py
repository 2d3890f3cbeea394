"""Two paths, one answer: the closed form and the flow model agree when nothing overlaps (within 2%), and
the flow model slows calls down when they share links."""
import random

import pytest

from simulator.collectives import estimate, lower_collective
from simulator.engine import CommTask, Program, run
from simulator.engine.runner import run_calls
from simulator.loading import known_names, load_cluster
from simulator.topology import build_topology

from conftest import make_cluster


def flow_times_s(topo, plans, starts_s=None):
    return run_calls(topo, plans, starts_s)


def flow_time_s(topo, plans):
    return max(run_calls(topo, plans))

SIZES = (8, 4096, 2**20, 2**26, 2**31)
CASES = [  # (cluster, nodes, collective, group)
    ("dgx-a100", None, "all_reduce", tuple(range(8))),
    ("dgx-a100", None, "all_gather", (0, 1, 2)),
    ("dgx-a100", None, "reduce_scatter", tuple(range(8))),
    ("dgx-a100", None, "broadcast", (2, 3, 4, 5)),
    ("dgx-a100", None, "all_to_all", tuple(range(8))),
    ("dgx-a100", None, "send_recv", (0, 5)),
    ("dgx-h100", None, "all_reduce", tuple(range(8))),
    ("dgx1-v100", None, "all_reduce", tuple(range(8))),
    ("dgx1-v100", None, "all_reduce", (0, 1, 2, 3, 4)),
    ("hgx-a100-4gpu-40gb", None, "reduce", (0, 1, 2, 3)),
    ("a100-pcie-nvlink-pairs", 1, "all_reduce", (0, 1, 2, 3)),
    ("rtx2080ti-x8-pcie", None, "all_reduce", tuple(range(8))),
    ("rtx3090x4-nvlink-pairs", 2, "all_reduce", tuple(range(8))),
    ("v100x4-power9", None, "all_reduce", (0, 1, 2, 3)),  # a chain (tree) from 64 MiB
    ("rtx3090x8-pcie", None, "all_to_all", tuple(range(8))),  # host staging shared by sends and receives
    ("dgx-h100-2node", None, "all_reduce", tuple(range(16))),
    ("dgx-h100-2node", None, "all_gather", tuple(range(16))),
    ("dgx-h100-2node", None, "all_to_all", tuple(range(16))),
    ("dgx-a100-2node", None, "all_reduce", (0, 8)),
    ("dgx-a100-2node-200gbe", None, "all_reduce", tuple(range(16))),  # socket proxies, channels per GPU
    ("dgx-a100-2node-200gbe", None, "all_to_all", (0, 1, 8, 9)),
    ("a100-pcie-nvlink-pairs", 2, "send_recv", (0, 4)),
]


@pytest.mark.parametrize("name,nodes,op,group", CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_closed_form_and_flows_agree_when_alone(name, nodes, op, group):
    topo = build_topology(load_cluster(name, nodes))
    for size in SIZES:
        closed = estimate(topo, op, group, size).time_s
        flows = flow_time_s(topo, [lower_collective(topo, op, group, size)])
        assert flows == pytest.approx(closed, rel=0.02), (op, size)


OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv")


@pytest.mark.parametrize("name", known_names("topologies"))
def test_closed_form_and_flows_agree_on_random_calls_of_every_shipped_cluster(name):
    """Property form of the above: seeded random groups (any GPUs, any number of them, across nodes) and sizes."""
    rnd = random.Random(name)
    cluster = load_cluster(name)
    nodes = min(cluster.nodes, 4)
    topo = build_topology(load_cluster(name, nodes))
    gpus = nodes * cluster.gpus_per_node
    for op in OPS:
        group = tuple(sorted(rnd.sample(range(gpus), 2 if op == "send_recv" else rnd.randint(2, gpus))))
        for size in (rnd.choice((8, 4096, 65536)), rnd.choice((2**20, 2**24)), rnd.choice((2**27, 2**31))):
            closed = estimate(topo, op, group, size).time_s
            assert flow_time_s(topo, [lower_collective(topo, op, group, size)]) == pytest.approx(closed, rel=0.02), \
                (op, group, size)


@pytest.mark.parametrize("algorithm,protocol", [("ring", "LL"), ("ring", "LL128"), ("tree", "Simple"),
                                                ("hierarchical", "Simple"), ("tree", "LL")])
def test_agreement_holds_for_every_forced_candidate(algorithm, protocol):
    topo = build_topology(load_cluster("dgx-h100-2node"))
    group = tuple(range(16))
    for size in (2**16, 2**28):
        closed = estimate(topo, "all_reduce", group, size, algorithm, protocol).time_s
        plan = lower_collective(topo, "all_reduce", group, size, algorithm, protocol)
        assert flow_time_s(topo, [plan]) == pytest.approx(closed, rel=0.02)


def test_engine_runs_a_lone_call_in_closed_form_time():
    topo = build_topology(load_cluster("dgx-h100-2node"))
    group = tuple(range(16))
    task = CommTask(0, group, "all_reduce", (group,), 2**30, (), "ar", "dp")
    trace = run(Program((task,), group, {r: 1 for r in group}), topo)
    assert trace.end_s == pytest.approx(estimate(topo, "all_reduce", group, 2**30).time_s, rel=0.02)


def test_pipeline_send_overlapping_a_dp_all_reduce_shares_the_nics():
    """One stage's data-parallel all-reduce (8 GPUs, one per node... here rank 3 and 11 of two nodes) and a
    pipeline send on the same NIC: each is slower than alone, and together they take longer than either."""
    topo = build_topology(load_cluster("dgx-h100-2node"))
    size = 2**30
    ar = lower_collective(topo, "all_reduce", (3, 11), size)
    send = lower_collective(topo, "send_recv", (3, 11), size)
    alone = [flow_time_s(topo, [ar]), flow_time_s(topo, [send])]
    together = flow_times_s(topo, [ar, send])
    assert together[0] > alone[0] * 1.2 and together[1] > alone[1] * 1.2


def test_two_tp_groups_sharing_a_pcie_switch_slow_each_other():
    topo = build_topology(make_cluster(4, kind="pcie", gpu="L4"))  # one switch, shared by both groups
    a = lower_collective(topo, "all_reduce", (0, 1), 2**28)
    b = lower_collective(topo, "all_reduce", (2, 3), 2**28)
    alone = flow_time_s(topo, [a])
    assert flow_time_s(topo, [a, b]) == pytest.approx(alone, rel=0.02)  # disjoint ports: no sharing
    c = lower_collective(topo, "all_reduce", (0, 2), 2**28)
    assert flow_times_s(topo, [a, c])[0] > alone * 1.2  # GPU 0's port now carries both


def test_a_late_call_takes_its_share_then_the_rest():
    topo = build_topology(load_cluster("dgx-a100"))
    p = lower_collective(topo, "send_recv", (0, 1), 2**30)
    alone = flow_time_s(topo, [p])
    t = flow_times_s(topo, [p, p], starts_s=[0.0, alone / 2])
    # the first moves half alone, then shares: both take 1.5x (the second finishes its last half alone)
    assert t[0] == pytest.approx(alone * 1.5, rel=0.01) and t[1] == pytest.approx(alone * 1.5, rel=0.01)
