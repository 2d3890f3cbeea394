"""Kernel latency prediction: kernel descriptors, the predictor protocol and its implementations."""
from .base import MemoisedPredictor, Predictor
from .kernels import OPS, Kernel
from .roofline import RooflinePredictor

__all__ = ["OPS", "Kernel", "MemoisedPredictor", "Predictor", "RooflinePredictor", "available_predictors", "get_predictor"]


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


def get_predictor(name: str = "roofline") -> Predictor:
    """A memoised predictor by name."""
    from ..errors import PredictorError

    if name == "roofline":
        return MemoisedPredictor(RooflinePredictor())
    raise PredictorError(f"unknown predictor {name!r}; known: roofline")
