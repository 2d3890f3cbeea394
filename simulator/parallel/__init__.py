"""Parallel plans: feasibility, rank mesh, pipeline schedules, and lowering to a Program."""
from .lowering import lower
from .mesh import Mesh
from .plan import check_plan
from .schedules import SCHEDULES

__all__ = ["Mesh", "SCHEDULES", "check_plan", "lower"]
