"""Kernel latency prediction: kernel descriptors, the predictor protocol and its implementations."""
from .base import MemoisedPredictor, Predictor
from .kernels import OPS, Kernel
from .roofline import RooflinePredictor

__all__ = ["OPS", "Kernel", "MemoisedPredictor", "Predictor", "RooflinePredictor", "get_predictor"]


def get_predictor(name: str = "roofline") -> Predictor:
    """A memoised predictor by name."""
    from ..errors import PredictorError

    if name == "roofline":
        return MemoisedPredictor(RooflinePredictor())
    raise PredictorError(f"unknown predictor {name!r}; known: roofline")
