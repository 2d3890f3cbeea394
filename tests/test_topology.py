import pytest

from simulator.topology import build_topology, route
from simulator.topology.routing import route_latency_s

from conftest import make_cluster


def cap(topo, edge):
    return topo.graph.edges[edge]["capacity_bytes_per_s"]


def test_nvswitch_route_goes_through_switch_at_nvlink_rate():
    topo = build_topology(make_cluster(8, kind="nvswitch", gpu="A100-SXM4-80GB"))
    r = route(topo, 0, 5)
    assert r == (("gpu0", "n0.nvswitch"), ("n0.nvswitch", "gpu5"))
    assert cap(topo, r[0]) == pytest.approx(300e9 * 0.8)


def test_nvlink_mesh_is_direct_with_split_bandwidth():
    topo = build_topology(make_cluster(4, kind="nvlink_mesh"))
    assert route(topo, 1, 3) == (("gpu1", "gpu3"),)
    assert cap(topo, ("gpu1", "gpu3")) == pytest.approx(300e9 * 0.8 / 3)


def test_nvlink_pairs_use_pcie_between_pairs():
    topo = build_topology(make_cluster(4, kind="nvlink_pairs", gpu="A100-PCIE-80GB"))
    assert route(topo, 0, 1) == (("gpu0", "gpu1"),)
    assert route(topo, 0, 2) == (("gpu0", "n0.host"), ("n0.host", "gpu2"))


def test_pcie_box_shares_host():
    topo = build_topology(make_cluster(4, kind="pcie", gpu="L4"))
    r = route(topo, 0, 3)
    assert r == (("gpu0", "n0.host"), ("n0.host", "gpu3"))
    assert cap(topo, r[0]) == pytest.approx(16 * 1.969e9 * 0.76)


def test_rail_optimised_inter_node_route_stays_on_rail():
    topo = build_topology(make_cluster(8, nodes=2, gpu="H100-SXM5-80GB", nic_bw=50e9))
    r = route(topo, 3, 11)
    assert r == (("gpu3", "n0.nic3"), ("n0.nic3", "rail3"), ("rail3", "n1.nic3"), ("n1.nic3", "gpu11"))
    cross = route(topo, 3, 12)
    assert ("rail3", "spine") in cross and ("spine", "rail4") in cross


def test_fat_tree_oversubscription_limits_uplinks():
    c = make_cluster(4, nodes=4, nics=1, topology="fat_tree", nodes_per_leaf=2, oversubscription=2.0)
    topo = build_topology(c)
    assert cap(topo, ("leaf0", "spine")) == pytest.approx(2 * 25e9 * 0.94 / 2)
    assert "spine" in {v for e in route(topo, 0, 12) for v in e}


def test_route_latency_adds_hops():
    topo = build_topology(make_cluster(4, kind="nvswitch", intra_latency=2e-6))
    assert route_latency_s(topo, route(topo, 0, 1)) == pytest.approx(2e-6)
