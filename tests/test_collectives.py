import pytest

from simulator.collectives import estimate, lower_collective, tuning
from simulator.collectives.cost import candidates, nvls_eligible
from simulator.collectives.pipelines import graph_for, ring_search
from simulator.hardware import load_gpu
from simulator.loading import load_cluster
from simulator.specs import ClusterSpec, IntraNodeSpec
from simulator.topology import build_topology

from conftest import make_cluster

GIB = 2**30


def topo_of(name, nodes=None):
    return build_topology(load_cluster(name, nodes))


@pytest.fixture(scope="module")
def dgx_a100():
    return topo_of("dgx-a100")


@pytest.fixture(scope="module")
def dgx1():
    return topo_of("dgx1-v100")


def busbw_gbps(topo, n, algorithm=None, size=8 * GIB, nodes=1):
    g = topo.cluster.gpus_per_node
    group = tuple(k * g + i for k in range(nodes) for i in range(n // nodes))
    return estimate(topo, "all_reduce", group, size, algorithm).busbw_bytes_per_s / 1e9


# ---- published bus bandwidth anchors (network-model.md section 3), within 5% ---------------------------------

@pytest.mark.parametrize("cluster,n,nodes,algorithm,measured", [
    ("dgx-a100", 8, 1, "ring", 232.5),
    ("dgx-h100", 8, 1, "ring", 367.5),
    ("dgx-h100", 8, 1, "nvls", 480.0),
    ("dgx-a100-2node", 16, 2, "ring", 192.0),
    ("dgx-h100-2node", 16, 2, "ring", 380.0),
])
def test_published_busbw_anchors(cluster, n, nodes, algorithm, measured):
    assert busbw_gbps(topo_of(cluster), n, algorithm, nodes=nodes) == pytest.approx(measured, rel=0.05)


def test_nvls_busbw_grows_with_gpus_like_nccl_1455():
    topo = topo_of("dgx-h100")  # measured 370/420/440/460/480 GB/s at 4..8 GPUs
    for n, measured in [(4, 370), (5, 420), (6, 440), (7, 460), (8, 480)]:
        assert busbw_gbps(topo, n, "nvls") == pytest.approx(measured, rel=0.05)


def test_a100_ring_busbw_grows_with_ring_size_like_vtrain(dgx_a100):
    # vTrain's nccl-tests on DGX A100 at 1 GiB: 197 (2 GPUs), 222 (4), 229 (8) GB/s
    for n, measured in [(2, 197.3), (4, 221.9), (8, 229.3)]:
        assert busbw_gbps(dgx_a100, n, size=GIB) == pytest.approx(measured, rel=0.03)


def test_dgx1_rings_pack_the_cube_mesh_links(dgx1):
    # vTrain's nccl-tests on DGX-1 at 1 GiB: 2 GPUs share one link, 8 GPUs use all six links
    for n, measured in [(2, 22.6), (3, 45.1), (6, 45.8), (8, 134.5)]:
        assert busbw_gbps(dgx1, n, size=GIB) == pytest.approx(measured, rel=0.05)
    assert len(ring_search(dgx1, list(range(8)))) > 1


def test_hgx4_mesh_uses_every_link():
    topo = topo_of("hgx-a100-4gpu-40gb")
    rings = ring_search(topo, [0, 1, 2, 3])
    assert sum(rate for _, rate in rings) == pytest.approx(3 * 100e9 * 0.78, rel=1e-6)


def test_pcie_pairs_ring_is_limited_by_pcie():
    topo = topo_of("a100-pcie-nvlink-pairs", 1)  # Vidur: 4-GPU all-reduce saturates at ~24 GB/s
    assert busbw_gbps(topo, 4, "ring") == pytest.approx(24.0, rel=0.05)
    assert busbw_gbps(topo, 2) == pytest.approx(197.0, rel=0.05)  # the bridge


# ---- algorithm and protocol selection ------------------------------------------------------------------------

def test_protocol_moves_from_ll_to_simple_with_size(dgx_a100):
    protos = [estimate(dgx_a100, "all_reduce", tuple(range(8)), s).protocol for s in (1024, 4 * 2**20, GIB)]
    assert protos == ["LL", "LL128", "Simple"]


def test_nvls_only_on_hopper_nvswitch(dgx_a100):
    h100 = topo_of("dgx-h100")
    assert nvls_eligible(h100, tuple(range(8))) and not nvls_eligible(dgx_a100, tuple(range(8)))
    assert estimate(h100, "all_reduce", tuple(range(8)), GIB).algorithm == "nvls"
    assert estimate(h100, "all_reduce", tuple(range(8)), 1024).algorithm == "ring"


def test_no_ll128_on_pcie():
    topo = topo_of("l4x4-pcie")
    assert {c.protocol for c in candidates(topo, "all_reduce", (0, 1, 2, 3))} == {"LL", "Simple"}


def test_tree_is_a_multi_node_candidate_and_hierarchical_only_when_asked():
    topo = topo_of("dgx-h100-2node")
    group = tuple(range(16))
    algos = {c.algorithm for c in candidates(topo, "all_reduce", group)}
    assert {"ring", "tree", "hierarchical"} <= algos
    assert estimate(topo, "all_reduce", group, GIB).algorithm != "hierarchical"
    assert estimate(topo, "all_reduce", group, GIB, algorithm="hierarchical").algorithm == "hierarchical"
    with pytest.raises(ValueError):
        estimate(topo, "all_gather", group, GIB, algorithm="nvls")


def test_chosen_candidate_is_the_one_nccls_tuner_rates_fastest(dgx_a100):
    group = tuple(range(8))
    for size in (8, 2**16, 2**22, 2**28):
        best = estimate(dgx_a100, "all_reduce", group, size)
        pool = candidates(dgx_a100, "all_reduce", group)
        assert all(best.candidate.tuner_time_s(size) <= c.tuner_time_s(size) + 1e-15 for c in pool)
        assert best.time_s == best.candidate.time_s(size)


def test_two_node_tree_is_faster_than_nccl_thinks_so_large_messages_run_rings():
    topo = build_topology(make_cluster(4, nodes=2, nics=1, nic_bw=25e9))
    group = tuple(range(8))
    forced_tree = estimate(topo, "all_reduce", group, GIB, "tree")
    chosen = estimate(topo, "all_reduce", group, GIB)
    assert chosen.algorithm == "ring" and forced_tree.time_s < chosen.time_s  # nccl#1576: only when forced


def test_simple_calls_through_an_nvswitch_pay_a_latency_the_tuner_does_not_see(dgx_a100, dgx1):
    def gap_s(topo, n=8):
        ring = next(c for c in candidates(topo, "all_reduce", tuple(range(n))) if c.protocol == "Simple")
        return ring.time_s(1.0) - ring.tuner_time_s(1.0)

    assert gap_s(dgx_a100) == pytest.approx(62e-6)  # 20 us per call + 3 us per step, 14 steps
    assert gap_s(dgx_a100, 2) == pytest.approx(26e-6)  # 2 steps
    assert gap_s(dgx1) == 0.0  # direct NVLink
    ll = next(c for c in candidates(dgx_a100, "all_reduce", tuple(range(8))) if c.protocol == "LL")
    assert ll.time_s(1.0) == ll.tuner_time_s(1.0)


def test_ll128_rings_are_chosen_at_nccls_rate_but_run_slower(dgx_a100):
    # vTrain's DGX A100 nccl-tests, 8 GPUs: 16 MiB in 232 us, NCCL's LL128 range (up to ~22 MiB)
    est = estimate(dgx_a100, "all_reduce", tuple(range(8)), 16 * 2**20)
    assert est.protocol == "LL128" and est.time_s == pytest.approx(232e-6, rel=0.1)
    phase = est.candidate.phases[0]
    assert phase.algbw_bytes_per_s == pytest.approx(phase.tuner_bytes_per_s * tuning.LL128_RING_SUSTAINED / 0.92)


@pytest.mark.parametrize("mib,measured", [(16, 220), (64, 347), (256, 436), (1024, 464)])
def test_mid_size_nvls_busbw_follows_the_h200_curve(mib, measured):
    # stas00's HGX H200 nccl-tests curve (network-model.md 3.1); not used to fit anything
    assert busbw_gbps(topo_of("dgx-h100"), 8, size=mib * 2**20) == pytest.approx(measured, rel=0.15)


def test_zero_latency_fabric_has_zero_latency_collectives():
    topo = build_topology(make_cluster(4, intra_latency=0.0))
    assert estimate(topo, "all_reduce", (0, 1, 2, 3), 1.0).time_s < 1e-9


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"])
def test_every_collective_has_a_plan_and_busbw_factor(dgx_a100, op):
    est = estimate(dgx_a100, op, tuple(range(8)), GIB)
    assert est.time_s > 0 and est.busbw_bytes_per_s > 0
    assert lower_collective(dgx_a100, op, tuple(range(8)), GIB).flows


def test_single_rank_and_empty_calls_are_free(dgx_a100):
    assert lower_collective(dgx_a100, "all_reduce", (3,), 1e9).flows == ()
    assert estimate(dgx_a100, "all_reduce", (0, 1), 0).time_s == 0.0


# ---- channel graphs ----------------------------------------------------------------------------------------

def test_multi_node_ring_has_one_channel_per_nic_on_its_rail():
    topo = topo_of("dgx-h100-2node")
    graph = graph_for(topo, "ring", tuple(range(16)), 2 * 15 / 16)
    assert graph.channels == 8
    for pipe in graph.pipelines:
        rails = {v for hop in pipe.hops for _, v in hop if v.startswith("rail")}
        assert len(rails) == 1 and "spine" not in {v for hop in pipe.hops for _, v in hop}


def test_two_node_tree_sends_less_over_the_network_than_the_ring():
    topo = build_topology(make_cluster(4, nodes=2, nics=1, nic_bw=25e9))  # one NIC per node: the limit
    ring = estimate(topo, "all_reduce", tuple(range(8)), GIB, "ring")
    tree = estimate(topo, "all_reduce", tuple(range(8)), GIB, "tree")
    assert ring.busbw_bytes_per_s == pytest.approx(25e9 * 0.94, rel=0.02)
    # a ring sends 2(n-1)/n of the buffer out of each node, the two trees together about 1x (nccl#1576)
    assert tree.busbw_bytes_per_s == pytest.approx(25e9 * 0.94 * 0.92 * 2 * 7 / 8, rel=0.02)


def test_one_node_chain_runs_at_its_graph_rate_not_the_tuners_092():
    # 4 V100s on two POWER9 sockets: the chain crosses the X-bus once each way, the ring twice one way, so the
    # chain's bus bandwidth is 1.5x the ring's (Aceso measured 80 against 53-55 GB/s)
    topo = build_topology(load_cluster("v100x4-power9"))
    ring = estimate(topo, "all_reduce", (0, 1, 2, 3), GIB, "ring")
    tree = estimate(topo, "all_reduce", (0, 1, 2, 3), GIB, "tree")
    assert tree.protocol == "Simple"
    assert tree.busbw_bytes_per_s == pytest.approx(1.5 * ring.busbw_bytes_per_s, rel=0.02)


def test_tree_correction_is_nccls_table_indexed_by_log2_of_size_over_64():
    mib = 2**20
    assert tuning.tree_correction("Simple", 127 * mib) == 0.8  # floor(log2(S / 64)) = 20
    assert tuning.tree_correction("Simple", 128 * mib) == 0.9  # 21: Aceso's RTX 3090 switches ring -> tree here
    assert tuning.tree_correction("Simple", 512 * mib) == 1.0  # past the table
    assert tuning.tree_correction("LL", 64) == 1.0 and tuning.tree_correction("Simple", 63) == 1.0
    assert tuning.tree_correction("LL128", 1 * mib) == 0.7


def test_tree_correction_steers_a_chain_box_to_the_ring_at_mid_sizes():
    # Aceso's V100 4-GPU all-reduce runs at ring speed from 16 to 80 MiB and at chain speed from 84 MiB on
    topo = topo_of("v100x4-power9")
    group = (0, 1, 2, 3)
    assert estimate(topo, "all_reduce", group, 32 * 2**20).algorithm == "ring"
    assert estimate(topo, "all_reduce", group, 100 * 2**20).algorithm == "tree"
    assert estimate(topo, "all_reduce", group, GIB).algorithm == "tree"
    tree, ring = (estimate(topo, "all_reduce", group, 32 * 2**20, a) for a in ("tree", "ring"))
    assert tree.time_s < ring.time_s  # the tuner's correction, not the real rate, picks the ring


def test_no_p2p_box_shares_the_staging_budget():
    c = ClusterSpec(name="t", gpu=load_gpu("RTX-2080"), nodes=1, gpus_per_node=4,
                    intra_node=IntraNodeSpec(kind="pcie", gpu_p2p=False, gpus_per_pcie_switch=1))
    topo = build_topology(c)
    p2p = estimate(topo, "send_recv", (0, 1), GIB).busbw_bytes_per_s
    ring = estimate(topo, "all_gather", (0, 1, 2, 3), GIB, "ring").busbw_bytes_per_s
    assert p2p == pytest.approx(0.66 * 15.76e9, rel=0.01)  # Aceso's RTX 2080 pair: 9.9 MiB/ms = 10.4 GB/s
    # every GPU sends and receives through its staging, and the staged ring loses D steps of S/n to its pipeline
    assert ring == pytest.approx(p2p / 2 * 0.75 / (0.75 + 0.45 / 4), rel=0.05)


def test_staged_rings_lose_their_pipeline_fill_like_acesos_pcie_boxes():
    topo = topo_of("rtx2080ti-x8-pcie")  # Aceso's RTX 2080 all-reduce: 4.07 / 4.95 / 5.27 GB/s at 2 / 4 / 8 GPUs
    for n, measured in [(2, 4.07), (4, 4.95), (8, 5.27)]:
        assert busbw_gbps(topo, n, size=GIB) == pytest.approx(measured, rel=0.06)


def test_staged_all_to_all_across_sockets_is_bound_by_staging_not_the_socket_link():
    topo = topo_of("rtx2080ti-x8-pcie")  # four GPUs per socket; Aceso's 8-GPU all-to-all: 6.2 GB/s of S / t
    est = estimate(topo, "all_to_all", tuple(range(8)), GIB)
    # every GPU sends and receives 7/8 of S through one staging budget; half of all bytes cross the sockets
    assert est.algbw_bytes_per_s == pytest.approx(0.66 * 15.76e9 / (2 * 7 / 8), rel=0.05)
    assert est.algbw_bytes_per_s == pytest.approx(6.2e9, rel=0.06)


def test_send_recv_is_the_route_bottleneck():
    topo = build_topology(make_cluster(4, kind="nvlink_mesh"))
    est = estimate(topo, "send_recv", (1, 3), 1e9)
    cap = topo.graph.edges["gpu1", "gpu3"]["capacity_bytes_per_s"]
    assert est.time_s == pytest.approx(1e-6 + tuning.hop_latency_us("nvlink", "Simple") * 1e-6 + 1e9 / cap)


def test_small_sends_run_ll_and_a_simple_send_through_an_nvswitch_pays_a_switch_step():
    topo = topo_of("dgx-a100")  # Vidur's DGX A100 sends: 10 us at 10 KiB, 13 us at 18 KiB (harness included)
    small, large = (estimate(topo, "send_recv", (0, 7), s) for s in (16384, 16385))
    assert (small.protocol, large.protocol) == ("LL", "Simple")
    step_us = tuning.hop_latency_us("nvlink", "Simple") - tuning.hop_latency_us("nvlink", "LL")
    assert large.time_s - small.time_s == pytest.approx((step_us + tuning.NVSWITCH_SIMPLE_STEP_US) * 1e-6, rel=0.05)
    bridged = topo_of("a100-pcie-nvlink-pairs")  # a direct NVLink bridge: no switch step
    assert (estimate(bridged, "send_recv", (0, 1), 16385).time_s - estimate(bridged, "send_recv", (0, 1), 16384).time_s
            == pytest.approx(step_us * 1e-6, rel=0.05))
    # LL moves 8-byte stores with 4 bytes of data: the flow model carries twice the payload
    plan = lower_collective(topo, "send_recv", (0, 7), 16384)
    assert sum(f.size_bytes for f in plan.flows) == pytest.approx(2 * 16384)
    assert estimate(topo, "send_recv", (0, 7), 1024, protocol="Simple").protocol == "Simple"


def test_all_to_all_picks_each_sends_protocol_by_its_own_size():
    topo = topo_of("dgx-a100")
    group = tuple(range(8))
    assert estimate(topo, "all_to_all", group, 8 * 16384).protocol == "LL"  # 16 KiB to each peer
    assert estimate(topo, "all_to_all", group, 8 * 16384 + 8).protocol == "Simple"
    assert estimate(topo, "all_to_all", group, 2**30).protocol == "Simple"
