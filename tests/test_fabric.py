import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from simulator.engine.fabric import Fabric, max_min_rates

A, B, C = ("a", "b"), ("b", "c"), ("c", "d")


def test_max_min_textbook_example():
    # two flows share A (cap 10); one of them also crosses B (cap 2): it gets 2, the other 8
    assert max_min_rates([(A, B), (A,)], {A: 10.0, B: 2.0}) == [2.0, 8.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([A, B, C]), min_size=1, max_size=3, unique=True), min_size=1, max_size=8),
       st.lists(st.floats(1.0, 100.0), min_size=3, max_size=3))
def test_max_min_is_feasible_and_saturates_a_link_per_flow(flows, caps):
    capacity = dict(zip([A, B, C], caps))
    rates = max_min_rates([tuple(f) for f in flows], capacity)
    load = {e: sum(r for f, r in zip(flows, rates) if e in f) for e in capacity}
    for e in capacity:
        assert load[e] <= capacity[e] * (1 + 1e-9)
    for f, r in zip(flows, rates):  # every flow is limited by some saturated link where it is the largest
        assert any(load[e] >= capacity[e] * (1 - 1e-9) and r >= max(r2 for f2, r2 in zip(flows, rates) if e in f2) * (1 - 1e-9)
                   for e in f)


def run_flows(specs, capacity, starts=None):
    env = simpy.Environment()
    fabric = Fabric(env, capacity)
    ends = {}

    def go(i, edges, size, start):
        yield env.timeout(start)
        yield fabric.transfer([(edges, size)])[0]
        ends[i] = env.now

    for i, (edges, size) in enumerate(specs):
        env.process(go(i, edges, size, (starts or [0] * len(specs))[i]))
    env.run()
    return ends


def test_single_flow_takes_size_over_capacity():
    assert run_flows([((A,), 100.0)], {A: 10.0})[0] == pytest.approx(10.0)


def test_late_flow_shares_then_speeds_up():
    # flow 0 alone for 5 s (50 B), then shares 5/5 B/s: remaining 50 B at 5 -> ends at 15; flow 1 sends 50 at 5
    # until t=15, then 10 B/s for its last 0 bytes
    ends = run_flows([((A,), 100.0), ((A,), 50.0)], {A: 10.0}, starts=[0, 5])
    assert ends[0] == pytest.approx(15.0) and ends[1] == pytest.approx(15.0)


def test_disjoint_flows_do_not_interact():
    ends = run_flows([((A,), 100.0), ((B,), 100.0)], {A: 10.0, B: 10.0})
    assert ends == {0: pytest.approx(10.0), 1: pytest.approx(10.0)}
