"""Loads ``gpus.yaml`` (shipped with the package) into ``GpuSpec`` objects, by name or alias."""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import ConfigError

if TYPE_CHECKING:  # specs (pydantic) loads on use: `collect` reads the raw catalog on GPU machines without it
    from ..specs import GpuSpec

CATALOG_PATH = Path(__file__).with_name("gpus.yaml")


def normalise(name: str) -> str:
    """Canonical spelling for name matching: lower case, no vendor prefix, '-' as the only separator."""
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return re.sub(r"^(nvidia-)?(tesla-)?(geforce-)?", "", key)


@functools.lru_cache(maxsize=1)
def _raw_catalog() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(CATALOG_PATH.read_text())


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    index = {}
    for name, entry in _raw_catalog().items():
        for alias in [name, *entry.get("aliases", [])]:
            index[normalise(alias)] = name
    return index


def catalog_names() -> list[str]:
    return list(_raw_catalog())


def gpu_from_mapping(raw: dict[str, Any], source: str, prefix: str = "") -> GpuSpec:
    """Build a GpuSpec from a catalog-style mapping (nested ``nvlink``/``pcie`` sections)."""
    from ..specs import GpuSpec, parse_spec

    data = {k: v for k, v in raw.items() if k not in ("aliases", "nvlink", "pcie")}
    for section in ("nvlink", "pcie"):
        sub = raw.get(section) or {}
        if not isinstance(sub, dict):
            raise ConfigError(source, prefix + section, sub, "expected a mapping")
        for key, value in sub.items():
            data[f"{section}_{key}"] = value
    return parse_spec(GpuSpec, data, source, prefix)


def catalog_entry(name: str) -> dict[str, Any]:
    """The raw catalog mapping for ``name`` (any alias), with ``name`` set to the canonical one."""
    canonical = _index().get(normalise(name))
    if canonical is None:
        known = ", ".join(catalog_names())
        raise ConfigError("GPU catalog", "gpu", name, f"unknown GPU; known: {known}")
    return dict(_raw_catalog()[canonical], name=canonical)


@functools.lru_cache(maxsize=None)
def load_gpu(name: str) -> GpuSpec:
    """The catalog entry for ``name`` (any alias, case-insensitive); ConfigError if unknown."""
    return gpu_from_mapping(catalog_entry(name), str(CATALOG_PATH))


def resolve_gpu(value: Any, source: str, field: str = "gpu") -> GpuSpec:
    """A GPU given as a catalog name, or inline as a mapping (optionally ``base: NAME`` plus overrides)."""
    if isinstance(value, str):
        try:
            return load_gpu(value)
        except ConfigError as exc:
            raise ConfigError(source, field, value, exc.problem) from None
    if isinstance(value, dict):
        raw = dict(value)
        base = raw.pop("base", None)
        if base is not None:
            merged = dict(_raw_catalog()[load_gpu(str(base)).name])
            merged.update(raw)
            raw = merged
        raw.setdefault("name", "custom-gpu")
        return gpu_from_mapping(raw, source, prefix=field + ".")
    raise ConfigError(source, field, value, "expected a catalog GPU name or a mapping of GPU fields")
