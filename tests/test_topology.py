import pytest

from simulator.hardware import load_gpu
from simulator.specs import ClusterSpec, IntraNodeSpec
from simulator.collectives import lower_collective
from simulator.collectives.cost import estimate
from simulator.topology import build_topology, route
from simulator.topology.links import SOCKET_PROXY_ONE_WAY_BYTES_PER_S, SOCKET_PROXY_TOTAL_BYTES_PER_S
from simulator.topology.routing import bottleneck_bytes_per_s, path_kind, route_latency_s

from conftest import make_cluster


def cap(topo, edge):
    return topo.graph.edges[edge]["capacity_bytes_per_s"]


def test_nvswitch_route_goes_through_switch_at_nvlink_rate():
    topo = build_topology(make_cluster(8, kind="nvswitch", gpu="H100-SXM5-80GB"))
    r = route(topo, 0, 5)
    assert r == (("gpu0", "n0.nvswitch"), ("n0.nvswitch", "gpu5"))
    assert cap(topo, r[0]) == pytest.approx(450e9 * 0.815)


def test_ga100_links_run_at_the_nvlink3_efficiency():
    # below the 274 GB/s copy-engine peak (stas00); NCCL send/recv measures 227-244 (Vidur), 247 (Aceso)
    topo = build_topology(make_cluster(8, kind="nvswitch", gpu="A100-SXM4-80GB"))
    assert cap(topo, ("gpu0", "n0.nvswitch")) == pytest.approx(300e9 * 0.78)


def test_nvlink_mesh_is_direct_with_split_bandwidth():
    topo = build_topology(make_cluster(4, kind="nvlink_mesh", gpu="H100-SXM5-80GB"))
    assert route(topo, 1, 3) == (("gpu1", "gpu3"),)
    assert cap(topo, ("gpu1", "gpu3")) == pytest.approx(450e9 * 0.815 / 3)


def test_nvlink_pairs_use_pcie_between_pairs():
    topo = build_topology(make_cluster(4, kind="nvlink_pairs", gpu="A100-PCIE-80GB"))
    assert route(topo, 0, 1) == (("gpu0", "gpu1"),)
    assert route(topo, 0, 2) == (("gpu0", "n0.pcie0"), ("n0.pcie0", "gpu2"))
    assert path_kind(topo, route(topo, 0, 2)) == "pcie"


def test_pcie_box_shares_switch():
    topo = build_topology(make_cluster(4, kind="pcie", gpu="L4"))
    r = route(topo, 0, 3)
    assert r == (("gpu0", "n0.pcie0"), ("n0.pcie0", "gpu3"))
    assert cap(topo, r[0]) == pytest.approx(16 * 1.969e9 * 0.76)


def test_pcie_tree_crosses_sockets_at_cpu_link_rate():
    c = ClusterSpec(name="t", gpu=load_gpu("L4"), nodes=1, gpus_per_node=8,
                    intra_node=IntraNodeSpec(kind="pcie", gpus_per_pcie_switch=2, cpu_sockets=2,
                                             cpu_interconnect_bandwidth_bytes_per_s=20e9))
    topo = build_topology(c)
    assert route(topo, 0, 1) == (("gpu0", "n0.pcie0"), ("n0.pcie0", "gpu1"))  # same switch: turns there
    cross = route(topo, 0, 7)
    assert ("n0.cpu0", "n0.cpu1") in cross and bottleneck_bytes_per_s(topo, cross) == pytest.approx(20e9)


def test_no_p2p_goes_through_host_memory_and_shares_the_staging_budget():
    c = ClusterSpec(name="t", gpu=load_gpu("RTX-2080"), nodes=1, gpus_per_node=2,
                    intra_node=IntraNodeSpec(kind="pcie", gpu_p2p=False))
    topo = build_topology(c)
    there, back = route(topo, 0, 1), route(topo, 1, 0)
    assert any(".cpu" in v for _, v in there)
    stage0 = ("n0.pcie0.stage0.in", "n0.pcie0.stage0.out")
    assert stage0 in there and stage0 in back  # GPU 0's sends and receives share one edge
    assert cap(topo, stage0) == pytest.approx(0.66 * 16 * 0.985e9)


def test_hybrid_cube_mesh_links_and_nvb_paths():
    c = ClusterSpec(name="t", gpu=load_gpu("V100-SXM2-32GB"), nodes=1, gpus_per_node=8,
                    intra_node=IntraNodeSpec(kind="hybrid_cube_mesh"))
    topo = build_topology(c)
    assert cap(topo, ("gpu0", "gpu3")) == pytest.approx(2 * 25e9 * 0.90)
    assert cap(topo, ("gpu0", "gpu1")) == pytest.approx(25e9 * 0.90)
    assert sum(cap(topo, ("gpu0", v)) for v in topo.graph.successors("gpu0") if v.startswith("gpu")) == \
        pytest.approx(6 * 25e9 * 0.90)
    r = route(topo, 4, 3)  # no direct link: through one intermediate GPU over NVLink (NCCL's NVB)
    assert len(r) == 2 and path_kind(topo, r) == "nvlink"
    assert route(topo, 4, 3, via=[3, 4]) != r  # not through GPUs outside the communicator


def test_cube_mesh_needs_eight_gpus():
    with pytest.raises(ValueError, match="hybrid_cube_mesh"):
        ClusterSpec(name="t", gpu=load_gpu("V100-SXM2-32GB"), nodes=1, gpus_per_node=4,
                    intra_node=IntraNodeSpec(kind="hybrid_cube_mesh"))


def test_rail_optimised_inter_node_route_stays_on_rail():
    topo = build_topology(make_cluster(8, nodes=2, gpu="H100-SXM5-80GB", nic_bw=50e9))
    r = route(topo, 3, 11)
    assert ("n0.nic3", "rail3") in r and ("rail3", "n1.nic3") in r and "spine" not in {v for e in r for v in e}
    assert r[0][0] == "gpu3" and r[-1][1] == "gpu11"
    cross = route(topo, 3, 12)
    assert ("rail3", "spine") in cross and ("spine", "rail4") in cross


def test_more_nics_than_gpus_and_shared_nics():
    many = build_topology(make_cluster(2, nodes=2, nics=4))
    assert many.nics_of(0) == ["n0.nic0", "n0.nic1"] and many.nics_of(3) == ["n1.nic2", "n1.nic3"]
    few = build_topology(make_cluster(8, nodes=2, nics=2))
    assert few.nics_of(3) == ["n0.nic0"] and few.nics_of(4) == ["n0.nic1"]


def test_fat_tree_oversubscription_limits_uplinks():
    c = make_cluster(4, nodes=4, nics=1, topology="fat_tree", nodes_per_leaf=2, oversubscription=2.0)
    topo = build_topology(c)
    assert cap(topo, ("leaf0", "spine")) == pytest.approx(2 * 25e9 * 0.94 / 2)
    assert "spine" in {v for e in route(topo, 0, 12) for v in e}


def test_socket_transport_stages_through_the_cpu():
    c = make_cluster(2, nodes=2, nics=1, transport="socket")
    r = route(build_topology(c), 0, 2)
    assert ("n0.cpu0", "n0.proxy0.in") in r and ("n0.proxy0.out", "n0.nic0") in r
    assert ("n1.nic0", "n1.proxy2.in") in r and ("n1.proxy2.out", "n1.cpu0") in r


def test_socket_proxy_caps_a_rank_not_the_port():
    """One rank's proxy thread moves 7.7 GB/s one way and 11.7 both ways together; two ranks per node have
    two proxies (a 400 Gb/s port so that only the proxies limit)."""
    c = make_cluster(2, nodes=2, nics=1, transport="socket", nic_bw=50e9)
    topo = build_topology(c)
    one_way = estimate(topo, "send_recv", (0, 2), 1e9)
    assert 1e9 / one_way.time_s == pytest.approx(SOCKET_PROXY_ONE_WAY_BYTES_PER_S, rel=0.01)
    both = estimate(topo, "all_reduce", (0, 2), 1e9, algorithm="ring", protocol="Simple")
    assert both.busbw_bytes_per_s == pytest.approx(SOCKET_PROXY_TOTAL_BYTES_PER_S / 2, rel=0.02)
    pair = lower_collective(topo, "all_to_all", (0, 1, 2, 3), 1e9)
    assert len({e for f in pair.flows for e in f.edges if ".proxy" in e[0] and e[1].endswith(".out")}) == 4


def test_route_latency_adds_hops():
    topo = build_topology(make_cluster(4, kind="nvswitch", intra_latency=2e-6))
    assert route_latency_s(topo, route(topo, 0, 1)) == pytest.approx(2e-6)


def test_socket_rings_spread_channels_over_the_gpus():
    """A CPU-attached NIC is as far from every GPU: one ring channel per member GPU, each with its own proxy,
    so 4 GPUs per node fill a 200 Gb/s port that one GPU per node cannot."""
    topo = build_topology(make_cluster(4, nodes=2, nics=1, transport="socket"))
    one = estimate(topo, "all_reduce", (0, 4), 1e9, algorithm="ring", protocol="Simple")
    four = estimate(topo, "all_reduce", tuple(range(8)), 1e9, algorithm="ring", protocol="Simple")
    assert four.channels == 4 and one.channels == 1
    assert one.busbw_bytes_per_s == pytest.approx(SOCKET_PROXY_TOTAL_BYTES_PER_S / 2, rel=0.02)
    assert four.busbw_bytes_per_s == pytest.approx(25e9 * 0.94, rel=0.05)
