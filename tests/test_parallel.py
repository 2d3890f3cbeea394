import pytest

from simulator.errors import InfeasiblePlan
from simulator.parallel import Mesh, check_plan
from simulator.parallel.schedules import SCHEDULES

from conftest import make_cluster, plan, tiny_model


def test_mesh_tp_innermost_and_round_trip():
    mesh = Mesh(dp=2, tp=4, pp=3)
    assert mesh.group("tp", 5) == (4, 5, 6, 7)
    assert mesh.group("dp", 5) == (1, 5)
    for r in range(24):
        assert mesh.rank(*mesh.coords(r)) == r
    assert mesh.group("embedding", 1) == (1, 17)
    assert mesh.next_stage(1, 1) == 9


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("stages,mbs", [(1, 1), (4, 1), (4, 8), (3, 2)])
def test_schedules_run_each_microbatch_forward_before_backward(name, stages, mbs):
    for s in range(stages):
        order = SCHEDULES[name](s, stages, mbs)
        assert sorted(order) == sorted([("F", i) for i in range(mbs)] + [("B", i) for i in range(mbs)])
        assert all(order.index(("F", i)) < order.index(("B", i)) for i in range(mbs))


def test_1f1b_warmup_depth():
    order = SCHEDULES["1f1b"](0, 4, 8)
    assert order[:4] == [("F", 0), ("F", 1), ("F", 2), ("F", 3)] and order[4] == ("B", 0)
    assert SCHEDULES["1f1b"](3, 4, 8)[:2] == [("F", 0), ("B", 0)]


@pytest.mark.parametrize("p,reason", [
    (plan(dp=3), "dp\\*tp\\*pp = 3"),
    (plan(tp=4, dp=1, pp=1), None),
    (plan(tp=3, dp=1, global_batch_size=1), "tp=3 does not divide 8 attention heads"),
    (plan(pp=3, dp=1, global_batch_size=1), "pp=3 does not divide 4 layers"),
    (plan(dp=4, global_batch_size=6), "global batch 6 is not a multiple"),
    (plan(dp=4, dtype="fp16", attention="fused-softmax"), None),
    (plan(dp=4, dtype="fp32", attention="fused-softmax"), "half-precision kernel, not for dtype fp32"),
])
def test_check_plan_reasons(p, reason):
    cluster = make_cluster(4) if p.num_gpus in (4, 3) else make_cluster(p.num_gpus)
    if reason is None:
        check_plan(p, cluster, tiny_model())
    else:
        with pytest.raises(InfeasiblePlan, match=reason):
            check_plan(p, cluster, tiny_model())


def test_fused_softmax_key_range_checked():
    long = tiny_model(seq_len=32768)
    with pytest.raises(InfeasiblePlan, match="takes 17-16,384 keys, not seq_len 32,768"):
        check_plan(plan(dp=4, dtype="bf16", attention="fused-softmax"), make_cluster(4), long)
    check_plan(plan(dp=4, dtype="bf16", attention="flash"), make_cluster(4), long)


def test_dtype_support_checked():
    with pytest.raises(InfeasiblePlan, match="no bf16"):
        check_plan(plan(dp=4, dtype="bf16"), make_cluster(4, kind="pcie", gpu="T4"), tiny_model())
