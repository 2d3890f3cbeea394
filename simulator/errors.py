"""Error types. A user mistake is a ``ConfigError`` or an ``InfeasiblePlan``; anything else is a bug.

The CLI turns every ``SimulatorError`` into one line on stderr and exit status 2.
"""
from __future__ import annotations


class SimulatorError(Exception):
    """Base of every error caused by user input (never by a bug)."""


class ConfigError(SimulatorError):
    """A bad input value: names the file, the field and the offending value."""

    def __init__(self, source: str, field: str, value: object, problem: str):
        self.source, self.field, self.value, self.problem = source, field, value, problem
        where = f"{source}: " if source else ""
        if field:
            super().__init__(f"{where}{field} = {value!r}: {problem}")
        else:
            super().__init__(f"{where}{problem}" + ("" if value is None else f" (got {value!r})"))


class InfeasiblePlan(SimulatorError):
    """A plan that cannot run on the given cluster and model; the message is the reason."""


class PredictorError(SimulatorError):
    """The kernel predictor cannot answer (missing weights, unsupported dtype on a GPU, ...)."""


class KernelTooLarge(SimulatorError, ValueError):
    """A kernel shape with more elements than any GPU holds (and than the predictors' int64 arithmetic counts):
    a user's size, e.g. a sequence length of 10^20, that reached a kernel. A ``ValueError`` like the other bad
    shapes (``predict-kernels`` names the row), a ``SimulatorError`` so that ``simulate`` prints one line."""
