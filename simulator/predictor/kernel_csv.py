"""Kernels listed in a CSV, read by ``predict-kernels`` and ``collect --input``, in either of two formats:

* NeuSight's: ``OPName`` plus ``B,M,N,K`` (bmm/linear) or ``B,H`` (vector ops), an optional ``dtype``
  (default fp32);
* ``collect``'s own ``kernels.csv``: ``op``, ``dtype``, ``shape`` (dimensions joined by ``x``) and ``layout``.

Other columns are ignored. Imports no pydantic, so ``collect`` can use it on GPU machines.
"""
from __future__ import annotations

import csv
import gzip
import math

from ..errors import ConfigError
from ..units import DTYPES
from .kernels import OPS, Kernel

#: NeuSight ``OPName`` -> kernel op (``predict-kernels`` also accepts this project's op names).
NEUSIGHT_NAMES = {"bmm": "gemm", "linear": "gemm", "ln": "layernorm", "addu": "add_scalar", "mulu": "mul_scalar",
                  "divu": "div_scalar", "powu": "pow_scalar", "VECln": "layernorm", "VECsoftmax": "softmax"}


def _int(row: dict[str, str], column: str, line: int, source: str) -> int:
    if row.get(column) in (None, ""):
        raise ConfigError(source, f"line {line}: {column}", row.get(column),
                          "missing (bmm/linear rows need B, M, N, K; vector ops B, H)")
    try:
        value = float(row[column])  # 512.0 (as a spreadsheet may write it) is 512
    except (TypeError, ValueError):
        value = math.nan
    if not value.is_integer() or value < 0:
        raise ConfigError(source, f"line {line}: {column}", row.get(column), "expected a whole number >= 0")
    return int(value)


def kernel_from_row(row: dict[str, str], line: int, source: str) -> Kernel:
    """One NeuSight-format row -> Kernel. ``bmm``: ``A[B,M,N] @ W[B,N,K]`` (N = reduction) -> gemm
    ``(b=B, m=M, n=K, k=N)``; ``linear``: ``A[B,M,N] @ W^T`` with the weight stored ``[out, in]``
    (layout ``nt``), one GEMM over B x M rows; vector ops: a B x H tensor; optional ``dtype`` column
    (default fp32)."""
    name = (row.get("OPName") or "").strip()
    dtype = (row.get("dtype") or "fp32").strip() or "fp32"
    if dtype not in DTYPES:
        raise ConfigError(source, f"line {line}: dtype", dtype, f"expected one of {', '.join(DTYPES)}")
    op = NEUSIGHT_NAMES.get(name, name)
    if op not in OPS:
        raise ConfigError(source, f"line {line}: OPName", name,
                          f"unknown op; known: {', '.join(sorted(set(OPS) | set(NEUSIGHT_NAMES)))}")
    try:
        if op == "gemm":
            b, m, n, k = (_int(row, c, line, source) for c in "BMNK")
            if name == "linear":
                return Kernel("gemm", dtype, (1, b * m, k, n), "nt")
            return Kernel("gemm", dtype, (b, m, k, n), "nn")
        return Kernel(op, dtype, (_int(row, "B", line, source), _int(row, "H", line, source)))
    except ValueError as exc:  # an op whose shape is not B x H (attention, embedding backward)
        raise ConfigError(source, f"line {line}: OPName", name, str(exc)) from None


def collected_kernel(row: dict[str, str], where: str) -> Kernel:
    """The kernel of one row of ``collect``'s ``kernels.csv`` (``op``, ``dtype``, ``shape``, ``layout``); a bad field
    is a ``ConfigError`` naming it (``where``: the file and line)."""
    for name in ("op", "dtype", "shape"):
        if not row.get(name):
            raise ConfigError(where, name, row.get(name), "missing or empty")
    if row["op"] not in OPS:
        raise ConfigError(where, "op", row["op"], f"unknown kernel op; known: {', '.join(OPS)}")
    if row["dtype"] not in DTYPES:
        raise ConfigError(where, "dtype", row["dtype"], f"expected one of {', '.join(DTYPES)}")
    try:
        shape = tuple(int(d) for d in row["shape"].split("x"))
    except ValueError:
        raise ConfigError(where, "shape", row["shape"], "expected whole numbers joined by 'x', e.g. 512x1024") from None
    try:
        return Kernel(row["op"], row["dtype"], shape, row.get("layout") or "")
    except ValueError as exc:
        raise ConfigError(where, "shape", row["shape"], str(exc)) from None


def open_text(path: str, mode: str):
    """A CSV file for reading or writing; ``.gz`` paths are gzip-compressed (NeuSight ships .csv.gz)."""
    if path.endswith(".gz"):
        return gzip.open(path, mode + "t", newline="", encoding="utf-8-sig" if mode == "r" else "utf-8")
    return open(path, mode, newline="", encoding="utf-8-sig" if mode == "r" else "utf-8")


def read_kernel_rows(source: str) -> tuple[list[dict[str, str]], list[str], list[Kernel]]:
    """(rows, column names, one kernel per row) of a CSV in NeuSight's or ``collect``'s format; ConfigError
    when unreadable."""
    try:
        with open_text(source, "r") as fh:
            reader = csv.DictReader(fh)
            rows, columns = list(reader), list(reader.fieldnames or [])
    except OSError as exc:
        raise ConfigError("command line", "--input", source, f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError("command line", "--input", source, f"not a CSV file ({exc.__class__.__name__})") from None
    if "OPName" not in columns and {"op", "shape"} <= set(columns):
        return rows, columns, [collected_kernel(r, f"{source}: line {i + 2}") for i, r in enumerate(rows)]
    if "OPName" not in columns:
        raise ConfigError(source, "OPName", None, "required column is missing (or, in collect's format, op and shape)")
    return rows, columns, [kernel_from_row(r, i + 2, source) for i, r in enumerate(rows)]
