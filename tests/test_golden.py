"""Golden scenarios: reviewed outputs of whole simulations, checked in under tests/golden/.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/test_golden.py`` and review the
diff before committing it.
"""
import json
import os
from pathlib import Path

import pytest

from simulator.api import simulate_files

GOLDEN = Path(__file__).with_name("golden")
KEYS = ("step_time_s", "compute_s", "exposed_comm_s", "bubble_s", "tokens_per_s", "mfu")


def scenario_files():
    return sorted(GOLDEN.glob("*.json"))


def summarise(result) -> dict:
    out = result.to_json()
    summary = {k: out[k] for k in KEYS}
    summary["peak_memory_bytes_per_gpu"] = out["memory"]["peak_bytes_per_gpu"]
    summary["stage_end_s"] = [r["end_s"] for r in out["ranks"]]
    return summary


@pytest.mark.parametrize("path", scenario_files(), ids=lambda p: p.stem)
def test_golden(path):
    case = json.loads(path.read_text())
    inp = case["input"]
    result = simulate_files(inp["cluster"], inp["workload"], inp["plan"], predictor=inp["predictor"],
                            nodes=inp.get("nodes"))
    got = summarise(result)
    if os.environ.get("UPDATE_GOLDEN"):
        case["expected"] = got
        path.write_text(json.dumps(case, indent=2) + "\n")
    expected = case["expected"]
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-6), key
