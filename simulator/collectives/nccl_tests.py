"""Read an nccl-tests log (``all_reduce_perf`` and friends) for ``simulator collective --compare``: the size and
out-of-place time of each data line, and the model's error against them."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError

#: Where the columns sit when a log has no header line: nccl-tests 2.x's ``size count type redop root time ...``.
DEFAULT_TIME_COLUMN = 5


def _time_column(header: list[str]) -> int | None:
    """The out-of-place ``time`` column of a header line (``#  size  count  type  redop  root  time ...``)."""
    if header[:1] == ["size"] and "time" in header:
        return header.index("time")
    return None


def read_nccl_tests(path: str) -> list[tuple[int, float]]:
    """(size in bytes, out-of-place time in seconds) per data line of an nccl-tests log, in file order.
    ``ConfigError`` naming the file and line for a log this cannot read."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise ConfigError("command line", "--compare", path, f"cannot read: {exc.strerror}") from None
    column, rows = DEFAULT_TIME_COLUMN, []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if line.lstrip().startswith("#"):
            found = _time_column(line.lstrip("# \t").split())
            column = found if found is not None else column
            continue
        if not fields or not fields[0].isdigit():
            continue  # nccl-tests' other output: device list, warnings, "Out of bounds values", ...
        try:
            size, time_us = int(fields[0]), float(fields[column])
        except (IndexError, ValueError):
            raise ConfigError(path, f"line {number}", line.strip(), f"expected the size and, in column "
                              f"{column + 1}, the out-of-place time in us") from None
        if size < 1 or not time_us > 0:
            raise ConfigError(path, f"line {number}", line.strip(), "expected a positive size and time")
        rows.append((size, time_us * 1e-6))
    if not rows:
        raise ConfigError("command line", "--compare", path, "no nccl-tests data lines (size ... time ...) in it")
    return rows


def compare_summary(rows: list[dict]) -> str:
    """One line: the model's MAPE over the compared rows, below and from 1 MiB (the issue's two targets)."""
    def mape(sel: list[dict]) -> str:
        return f"{sum(abs(r['error_pct']) for r in sel) / len(sel):.1f} % (n={len(sel)})" if sel else "-"

    small = [r for r in rows if r["size_bytes"] < 2**20]
    large = [r for r in rows if r["size_bytes"] >= 2**20]
    return f"# model vs measured: MAPE {mape(rows)}; below 1 MiB {mape(small)}; from 1 MiB {mape(large)}"
