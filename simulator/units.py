"""The one place where conventional YAML units become SI.

A key ending in a unit suffix (``bandwidth_GBps: 450``) becomes the SI key (``bandwidth_bytes_per_s:
450e9``). Dicts of numbers under such a key (``peak_TFLOPS: {fp32: 19.5}``) are scaled value by value.
"""
from __future__ import annotations

from typing import Any

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
#: Bytes per element as stored in memory (tf32 is an fp32 storage format with a tensor-core math mode).
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

#: suffix -> (SI suffix, factor). Decimal prefixes for rates (vendor convention), binary for capacities
#: where vendors mean binary (``memory_GiB``, ``l2_MiB``).
UNIT_SUFFIXES: dict[str, tuple[str, float]] = {
    "_TFLOPS": ("_flops_per_s", 1e12),
    "_GFLOPS": ("_flops_per_s", 1e9),
    "_TBps": ("_bytes_per_s", 1e12),
    "_GBps": ("_bytes_per_s", 1e9),
    "_MBps": ("_bytes_per_s", 1e6),
    "_Gbps": ("_bytes_per_s", 1e9 / 8),
    "_GiB": ("_bytes", 2**30),
    "_MiB": ("_bytes", 2**20),
    "_KiB": ("_bytes", 2**10),
    "_GB": ("_bytes", 1e9),
    "_MB": ("_bytes", 1e6),
    "_GHz": ("_hz", 1e9),
    "_MHz": ("_hz", 1e6),
    "_us": ("_s", 1e-6),
    "_ms": ("_s", 1e-3),
    "_ns": ("_s", 1e-9),
    "_W": ("_w", 1.0),
}


def si_key(key: str) -> tuple[str, float]:
    """Return the SI name of ``key`` and the factor to multiply its value by (1.0 if no unit)."""
    for suffix, (si_suffix, factor) in UNIT_SUFFIXES.items():
        if key.endswith(suffix):
            return key[: -len(suffix)] + si_suffix, factor
    return key, 1.0


def _scale(value: Any, factor: float) -> Any:
    if factor == 1.0:
        return value
    if isinstance(value, bool):
        return value  # let validation complain about the type
    if isinstance(value, (int, float)):
        return value * factor
    if isinstance(value, dict):
        return {k: _scale(v, factor) for k, v in value.items()}
    return value  # wrong type: validation reports it under the SI name


def to_si(raw: Any) -> tuple[Any, dict[str, tuple[str, float]]]:
    """Convert a parsed YAML mapping (recursively) to SI keys and values.

    Returns the converted data and a map from SI key to (the key the user wrote, its factor), so that
    errors can name the field and value as they appear in the file.
    """
    renamed: dict[str, tuple[str, float]] = {}

    def convert(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                new_key, factor = si_key(str(key))
                if new_key != key:
                    renamed[new_key] = (str(key), factor)
                out[new_key] = convert(_scale(value, factor)) if factor != 1.0 else convert(value)
            return out
        if isinstance(node, list):
            return [convert(v) for v in node]
        return node

    return convert(raw), renamed
