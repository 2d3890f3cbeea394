"""Trace -> Chrome trace event JSON (opens in Perfetto / chrome://tracing): one process per simulated
rank, one thread per stream, one complete ("X") event per task, times in microseconds."""
from __future__ import annotations

from ..engine.trace import Trace

STREAM_TID = {"compute": 0, "comm": 1}


def chrome_trace(trace: Trace) -> dict:
    events: list[dict] = []
    for rank in trace.ranks:
        weight = trace.multiplicity.get(rank, 1)
        label = f"rank {rank}" + (f" (x{weight} GPUs)" if weight > 1 else "")
        events.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": label}})
        for stream, tid in STREAM_TID.items():
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": stream}})
    for i in trace.intervals:
        events.append({"ph": "X", "name": i.name, "cat": i.category, "pid": i.rank, "tid": STREAM_TID[i.stream],
                       "ts": i.start_s * 1e6, "dur": (i.end_s - i.start_s) * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
