"""GPU catalog: datasheet specs of the GPU models the simulator knows by name."""
from .catalog import catalog_names, load_gpu, resolve_gpu

__all__ = ["catalog_names", "load_gpu", "resolve_gpu"]
