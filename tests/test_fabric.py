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


def test_caps_limit_a_flow_and_leave_the_rest_to_others():
    assert max_min_rates([(A,), (A,)], {A: 10.0}, [2.0, float("inf")]) == [2.0, 8.0]


def test_capped_flows_that_fit_run_at_their_caps_without_a_solve():
    env = simpy.Environment()
    fabric = Fabric(env, {A: 10.0, B: 10.0})
    fabric.transfer([((A,), 40.0, 4.0), ((A, B), 60.0, 6.0)])
    env.run()
    assert env.now == pytest.approx(10.0) and fabric.solves == 0


def test_only_the_touched_component_is_re_solved():
    env = simpy.Environment()
    fabric = Fabric(env, {A: 10.0, B: 10.0, C: 10.0})
    ends = {}

    def go(name, edges, size, start):
        yield env.timeout(start)
        yield fabric.transfer([(edges, size)])[0]
        ends[name] = env.now

    env.process(go("a", (A,), 100.0, 0.0))
    env.process(go("b", (A,), 100.0, 0.0))
    env.process(go("c", (C,), 50.0, 1.0))  # on its own link: unaffected by a and b
    env.run()
    assert ends == {"a": pytest.approx(20.0), "b": pytest.approx(20.0), "c": pytest.approx(6.0)}
