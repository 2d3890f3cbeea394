"""The kernel benchmark's own helpers (the benchmark itself takes minutes to hours: not run here)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import fold_jobs  # noqa: E402
import kernel_accuracy  # noqa: E402,F401  (imports its helper as a script does)


def test_fold_shares_deal_every_fold_once_and_leave_no_process_idle():
    folds = [f"f{i}" for i in range(10)]
    for jobs in (1, 2, 3, 4, 12):
        shares = fold_jobs.fold_shares(folds, jobs)
        assert sorted(f for s in shares for f in s) == folds and all(shares)
        assert len(shares) == min(jobs, len(folds)) and max(map(len, shares)) - min(map(len, shares)) <= 1
