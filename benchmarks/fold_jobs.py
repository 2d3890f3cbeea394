"""``benchmarks/kernel_accuracy.py --jobs N``: its folds trained in N single-threaded child processes, each caching
its folds for the parent's ``--resume`` (on 2 cores two 1-thread processes run about 5x faster than two 2-thread
ones)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


#: Options a ``--jobs`` child gets from its parent (the cache keys and data), by attribute name.
CHILD_OPTIONS = ("data", "epochs", "members", "seed", "neusight_epochs", "neusight_width", "neusight_rows",
                 "neusight_from")


def fold_shares(folds: list[str], jobs: int) -> list[list[str]]:
    """``folds`` dealt round-robin to at most ``jobs`` processes (none empty)."""
    return [share for share in (folds[i::jobs] for i in range(jobs)) if share]


def train_in_children(args, folds: list[str], script: Path, results_dir: Path) -> None:
    """``--jobs``: each share of the folds trained (and cached for ``--resume``) by a single-threaded child
    process running ``script``; their own result files in ``results_dir`` are removed afterwards."""
    base = [sys.executable, str(script), "--resume", "--threads", "1"]
    base += ["--quick"] if args.quick else []
    for key in CHILD_OPTIONS:
        if getattr(args, key) is not None:
            base += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    names = [f"{args.name or 'kernel_accuracy'}-part{i}" for i in range(args.jobs)]
    shares = [",".join(share) for share in fold_shares(folds, args.jobs)]
    children = [subprocess.Popen(base + ["--folds", share, "--name", name], stdout=subprocess.DEVNULL)
                for share, name in zip(shares, names)]
    failed = [share for share, c in zip(shares, children) if c.wait() != 0]
    for name in names:
        for suffix in (".md", ".json"):
            (results_dir / f"{name}{suffix}").unlink(missing_ok=True)
    if failed:
        raise SystemExit(f"fold processes failed: {', '.join(failed)}")
