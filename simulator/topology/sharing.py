"""Max-min fair rates of flows over shared links (progressive filling), with optional per-flow caps.

Used twice with one answer: by ``collectives`` to find an algorithm's bandwidth on an idle fabric, and by
``engine.fabric`` to share links between everything in flight (network-model.md section 5.3). A cap is a
private link of the flow (a channel's own throughput limit); an infinite cap is no limit.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

Edge = tuple[str, str]


def max_min_rates(flows: Sequence[tuple[Edge, ...]], capacity: dict[Edge, float],
                  caps: Optional[Sequence[float]] = None) -> list[float]:
    """Max-min fair rate of each flow (given as its edge list) under per-edge ``capacity`` and per-flow
    ``caps``. Each round freezes the flows of every edge whose fair share equals the current minimum, so a
    symmetric collective resolves in one round whatever its size. A flow with no edges gets its cap."""
    n = len(flows)
    rates = [0.0] * n
    users: dict[object, list[int]] = {}
    left: dict[object, float] = {}
    for i, edges in enumerate(flows):
        for e in edges:
            if e not in users:
                users[e], left[e] = [], capacity[e]
            users[e].append(i)
        cap = math.inf if caps is None else caps[i]
        if cap < math.inf or not edges:
            key = ("cap", i)
            users[key], left[key] = [i], cap
    path = {i: list(flows[i]) + ([("cap", i)] if ("cap", i) in users else []) for i in range(n)}
    active = {e: len(ids) for e, ids in users.items()}
    frozen = [False] * n
    while active:
        shares = {e: left[e] / k for e, k in active.items()}
        low = min(shares.values())
        for edge in [e for e, s in shares.items() if s <= low * (1 + 1e-12)]:
            for i in users[edge]:
                if frozen[i]:
                    continue
                frozen[i], rates[i] = True, low
                for e in path[i]:
                    left[e] = max(left[e] - low, 0.0)
                    active[e] -= 1
                    if active[e] == 0:
                        del active[e]
    return rates
