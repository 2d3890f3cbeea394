import pytest

from simulator.collectives import lower_collective
from simulator.collectives.algorithms import ring_orders
from simulator.topology import build_topology

from conftest import make_cluster


@pytest.fixture
def node8():
    return build_topology(make_cluster(8, kind="nvswitch", gpu="A100-SXM4-80GB"))


def test_ring_all_reduce_traffic(node8):
    plan = lower_collective(node8, "all_reduce", tuple(range(8)), 8e6)
    assert len(plan.flows) == 8
    assert all(f.size_bytes == pytest.approx(2 * 7 / 8 * 8e6) for f in plan.flows)
    assert {(f.src, f.dst) for f in plan.flows} == {(i, (i + 1) % 8) for i in range(8)}
    assert plan.latency_s == pytest.approx(14 * 1e-6)


@pytest.mark.parametrize("op,fraction,steps", [("all_gather", 3 / 4, 3), ("reduce_scatter", 3 / 4, 3)])
def test_ring_gather_scatter(node8, op, fraction, steps):
    plan = lower_collective(node8, op, (0, 1, 2, 3), 4e6)
    assert all(f.size_bytes == pytest.approx(fraction * 4e6) for f in plan.flows)
    assert plan.latency_s == pytest.approx(steps * 1e-6)


def test_send_recv_broadcast_all_to_all(node8):
    assert lower_collective(node8, "send_recv", (2, 5), 10.0).flows[0].size_bytes == 10.0
    assert len(lower_collective(node8, "broadcast", (0, 1, 2), 10.0).flows) == 2
    a2a = lower_collective(node8, "all_to_all", (0, 1, 2, 3), 40.0)
    assert len(a2a.flows) == 12 and a2a.flows[0].size_bytes == 10.0


def test_single_rank_group_is_free(node8):
    plan = lower_collective(node8, "all_reduce", (3,), 1e9)
    assert plan.flows == () and plan.latency_s == 0


def test_multi_node_ring_uses_one_channel_per_nic():
    topo = build_topology(make_cluster(4, nodes=2, nics=4))
    rings = ring_orders(topo, tuple(range(8)))
    assert len(rings) == 4
    exits = {ring[3] for ring in rings}  # last GPU of node 0 in each ring: all different
    assert len(exits) == 4
