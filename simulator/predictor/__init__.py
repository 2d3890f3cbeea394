"""Kernel latency prediction: kernel descriptors, the predictor protocol and its implementations."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .kernels import OPS, Kernel

if TYPE_CHECKING:
    from .base import Predictor

_LAZY = {"MemoisedPredictor": "base", "Predictor": "base", "RooflinePredictor": "roofline"}

__all__ = ["OPS", "Kernel", "MemoisedPredictor", "Predictor", "RooflinePredictor", "available_predictors", "get_predictor"]


def __getattr__(name: str):
    # Loaded on first use so that ``predictor.collect`` imports without pydantic (GPU machines).
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_LAZY[name]}", __name__), name)


def available_predictors() -> list[str]:
    """Names ``get_predictor`` accepts on this installation."""
    names = ["roofline"]
    try:
        from . import mlp  # noqa: F401

        if mlp.weights_available():
            names.insert(0, "mlp")
    except (ImportError, AttributeError):
        pass
    return names


def get_predictor(name: str = "roofline", calibration=None, weights=None) -> Predictor:
    """A memoised predictor by name: ``mlp`` (the shipped weights, or those in the folder ``weights`` that
    ``simulator fit-predictor`` wrote; optionally with a calibration file or mapping from ``simulator collect
    --quick``) or ``roofline`` (which takes neither)."""
    from ..errors import ConfigError, PredictorError
    from .base import MemoisedPredictor
    from .roofline import RooflinePredictor

    if name == "roofline":
        for flag, value in (("--calibration", calibration), ("--weights", weights)):
            if value is not None:
                raise ConfigError("command line", flag, str(value), "only the mlp predictor takes it")
        return MemoisedPredictor(RooflinePredictor())
    if name == "mlp":
        from pathlib import Path

        from .mlp import MLPPredictor, weights_available

        if weights is not None and not weights_available(Path(weights)):
            raise ConfigError("command line", "--weights", str(weights), "no kernel_mlp.npz and kernel_mlp.json in "
                              "it: write them with `simulator fit-predictor --out DIR`")
        if calibration is not None and not isinstance(calibration, dict):
            from .collect import read_calibration

            calibration = read_calibration(calibration)
        return MemoisedPredictor(MLPPredictor(weights, calibration=calibration))
    raise PredictorError(f"unknown predictor {name!r}; known: {', '.join(available_predictors())}")
