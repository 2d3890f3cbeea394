"""Compare parallel plans for GPT-3 1.3B on one DGX A100 with the Python API, fastest first.

Run: python examples/compare_plans.py   (expected output: examples/compare_plans.out)
"""
from simulator import PlanSpec, load_cluster, load_workload, simulate

cluster = load_cluster("dgx-a100")
model = load_workload("gpt3-1.3b")
plans = [
    PlanSpec(dp=8, micro_batch_size=4, global_batch_size=64),
    PlanSpec(dp=4, tp=2, micro_batch_size=4, global_batch_size=64),
    PlanSpec(dp=2, tp=4, micro_batch_size=8, global_batch_size=64),
    PlanSpec(dp=4, pp=2, micro_batch_size=4, global_batch_size=64),
    PlanSpec(dp=2, pp=4, micro_batch_size=2, global_batch_size=64, schedule="gpipe"),
]
results = [simulate(cluster, model, plan, predictor="roofline") for plan in plans]

print(f"{'plan':<34} {'step':>9} {'MFU':>6} {'exposed comm':>13} {'bubble':>8} {'memory':>9}")
for r in sorted(results, key=lambda r: r.step_time_s):
    p = r.plan
    name = f"dp{p['dp']} tp{p['tp']} pp{p['pp']} mb{p['micro_batch_size']} {p['schedule']}"
    print(f"{name:<34} {r.step_time_s * 1e3:7.1f}ms {100 * r.mfu:5.1f}% {r.exposed_comm_s * 1e3:11.1f}ms "
          f"{r.bubble_s * 1e3:6.1f}ms {r.peak_memory_bytes / 2**30:6.1f}GiB")
