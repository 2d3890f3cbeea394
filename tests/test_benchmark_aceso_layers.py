"""The e2e benchmark's Aceso layer check (benchmarks/e2e_aceso.py): what it reads and what it simulates."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import e2e_aceso as ea  # noqa: E402

from simulator.predictor import get_predictor  # noqa: E402
from simulator.workload.transformer import Collective, Compute, Shard, layer_backward, layer_forward  # noqa: E402


def test_reads_megatrons_split_only(tmp_path):
    folder = tmp_path / "sailor" / "aceso" / "layer_time"
    folder.mkdir(parents=True)
    (folder / "V100-16.csv").write_text("mbs,tp,algo,fwd,bwd,fwd+bwd\n1,2,0,0.005,0.007,0.012\n1,2,1,0.006,0.006,0.012\n")
    assert ea.layer_cases(tmp_path) == [dict(gpu="V100-16", micro_batch=1, tp=2, fwd_s=0.005, bwd_s=0.007)]


def test_megatron_layer_scales_the_scores_and_computes_no_weight_gradients():
    sh = Shard(ea.OPT_350M, 1, 2, "fp32", attention="unfused")
    fwd, bwd = ea.megatron_steps(sh, backward=False), ea.megatron_steps(sh, backward=True)
    ops = lambda steps: [s.kernel.op for s in steps if isinstance(s, Compute)]  # noqa: E731
    i = ops(fwd).index("mul_scalar")
    assert ops(fwd)[:i] + ops(fwd)[i + 1:] == ops(layer_forward(sh))  # one kernel more: the scale, before the mask
    assert ops(fwd)[i + 1:i + 3] == ["masked_fill", "softmax"]
    assert not any(s.name.endswith(".wgrad") for s in bwd)
    assert len(ops(bwd)) == len(ops(layer_backward(sh))) - 4 + 1  # four linears' wgrad out, the scale's in
    assert ops(bwd)[ops(bwd).index("softmax_bwd") + 1:][:2] == ["masked_fill", "mul_scalar"]
    assert [s for s in bwd if isinstance(s, Collective)] == [s for s in layer_backward(sh) if isinstance(s, Collective)]


def test_layer_time_adds_the_tensor_parallel_all_reduces():
    from simulator.loading import load_cluster
    from simulator.topology import build_topology

    cluster = load_cluster("v100x4-power9")
    topo, pred = build_topology(cluster), get_predictor("roofline")
    sh1, sh2 = (Shard(ea.OPT_350M, 1, tp, "fp32", attention="unfused") for tp in (1, 2))
    t1 = ea.layer_time_s(ea.megatron_steps(sh1, False), pred, cluster, topo, 1)
    t2 = ea.layer_time_s(ea.megatron_steps(sh2, False), pred, cluster, topo, 2)
    compute2 = sum(pred.latency_s([s.kernel for s in ea.megatron_steps(sh2, False) if isinstance(s, Compute)],
                                  cluster.gpu))
    assert t2 > compute2 > 0.4 * t1  # two all-reduces on top of half the work (plus what does not split)
